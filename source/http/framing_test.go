package httpsource

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/informer-go/informer"
)

// The Server-Sent Events reader: data lines joined, fields and comments skipped, CRLF, a
// stream cut inside an event.
func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  error
	}{
		{"data: a\n\n", []string{"a"}, io.EOF},
		{": keepalive\n\nevent: x\nid: 7\nretry: 10\ndata: {\"a\":\ndata:1}\n\n", []string{"{\"a\":\n1}"}, io.EOF},
		{"data: a\r\n\r\ndata:b\r\n\r\n", []string{"a", "b"}, io.EOF},
		{"event: only\n\n", nil, io.EOF},
		{"data\n\n", []string{""}, io.EOF},
		{"data: a\n\ndata: b\n", []string{"a"}, informer.ErrBadInput},
		{"data: a\n\ndata: b", []string{"a"}, informer.ErrBadInput},
	} {
		got, err := readFrames(ServerSentEvents.NewReader(strings.NewReader(tc.in), 1<<10))
		if !slices.Equal(got, tc.want) || !errors.Is(err, tc.err) {
			t.Errorf("%q: %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// The NDJSON reader: blank lines skipped, CRLF, a frame longer than the buffer, the limit.
func TestNDJSONReader(t *testing.T) {
	long := strings.Repeat("x", 3*readBufferSize)
	for _, tc := range []struct {
		in   string
		max  int
		want []string
		err  error
	}{
		{"a\n\n  \nb\r\n", 100, []string{"a", "b"}, io.EOF},
		{long + "\nz\n", 4 * readBufferSize, []string{long, "z"}, io.EOF},
		{long + "\nz\n", 2 * readBufferSize, nil, informer.ErrBadInput},
		{"a\nb", 100, []string{"a"}, io.ErrUnexpectedEOF},
	} {
		got, err := readFrames(NDJSON.NewReader(strings.NewReader(tc.in), tc.max))
		if !slices.Equal(got, tc.want) || !errors.Is(err, tc.err) {
			t.Errorf("%.20q: %d frames, %v; want %d, %v", tc.in, len(got), err, len(tc.want), tc.err)
		}
	}
}

// readFrames reads r to its end: the frames, and the error that ended them.
func readFrames(r FrameReader) ([]string, error) {
	var got []string
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return got, err
		}
		got = append(got, string(f))
	}
}
