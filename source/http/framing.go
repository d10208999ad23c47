package httpsource

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/informer-go/informer"
)

// Framing cuts a watch response body into frames, one encoded event each. NDJSON is the
// default; ServerSentEvents is the other framing this package speaks.
type Framing interface {
	// Accept returns the Accept header of a watch request whose events are encoded with a
	// codec of the given content type.
	Accept(codecType string) string
	// NewReader returns a reader of the frames of r. A frame longer than maxFrame bytes is
	// an error.
	NewReader(r io.Reader, maxFrame int) FrameReader
}

// FrameReader reads frames. Used by one goroutine at a time.
type FrameReader interface {
	// ReadFrame returns the next frame. The bytes are valid until the next call. At the
	// clean end of the stream it returns io.EOF. A stream that ends inside a frame (a
	// truncated chunk, a connection cut mid-event), or a frame longer than the limit, is an
	// error that matches informer.ErrBadInput (and, if the stream broke, the underlying
	// error too). A stream that breaks between two frames returns the underlying error
	// unchanged.
	ReadFrame() ([]byte, error)
}

// NDJSON is newline-delimited framing, as a Kubernetes API server sends a JSON watch: one
// event per line. Blank lines are skipped; a trailing "\r" is dropped.
var NDJSON Framing = ndjsonFraming{}

// ServerSentEvents is the text/event-stream framing of the HTML standard: each event's
// "data:" lines, joined with "\n", are one frame; "event", "id" and "retry" fields and ":"
// comments (keep-alives) are ignored. Lines end with "\n" or "\r\n" (a lone "\r" is not
// treated as a line end).
var ServerSentEvents Framing = sseFraming{}

// readBufferSize is the size of a frame reader's buffer; longer frames are assembled in
// a second buffer that grows up to the limit.
const readBufferSize = 32 << 10

type ndjsonFraming struct{}

func (ndjsonFraming) Accept(codecType string) string { return codecType }

func (ndjsonFraming) NewReader(r io.Reader, maxFrame int) FrameReader {
	return &lineReader{r: bufio.NewReaderSize(r, readBufferSize), max: maxFrame}
}

type sseFraming struct{}

func (sseFraming) Accept(string) string { return "text/event-stream" }

func (sseFraming) NewReader(r io.Reader, maxFrame int) FrameReader {
	return &sseReader{lines: lineReader{r: bufio.NewReaderSize(r, readBufferSize), max: maxFrame}, max: maxFrame}
}

// errFrameTooLarge is the message of a frame over the limit.
func errFrameTooLarge(max int) error { return badInput("watch frame longer than %d bytes", max) }

// lineReader reads lines of at most max bytes (without the line end).
type lineReader struct {
	r    *bufio.Reader
	max  int
	long []byte // assembles a line longer than the bufio buffer
}

// readLine returns the next line without its "\n" (and "\r"). At the end of the stream
// it returns io.EOF if nothing was pending, and a truncation error otherwise.
func (l *lineReader) readLine() ([]byte, error) {
	l.long = l.long[:0]
	for {
		line, err := l.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(l.long)+len(line) > l.max {
				l.discardLine()
				return nil, errFrameTooLarge(l.max)
			}
			l.long = append(l.long, line...)
			continue
		}
		if len(l.long) > 0 {
			l.long = append(l.long, line...)
			line = l.long
		}
		if err != nil {
			if len(line) == 0 {
				return nil, err
			}
			return nil, truncated(err)
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) > l.max {
			return nil, errFrameTooLarge(l.max)
		}
		return line, nil
	}
}

// discardLine skips the rest of an over-long line so that the error is about this line
// only; the watch ends anyway.
func (l *lineReader) discardLine() {
	for {
		_, err := l.r.ReadSlice('\n')
		if err != bufio.ErrBufferFull {
			return
		}
	}
}

// truncated is the error for a stream that ended inside a frame.
func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w (%w)", badInput("watch stream ended inside a frame (truncated chunk or connection cut)"), err)
}

// lineReader as a FrameReader is NDJSON.
func (l *lineReader) ReadFrame() ([]byte, error) {
	for {
		line, err := l.readLine()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
	}
}

// sseReader reads Server-Sent Events.
type sseReader struct {
	lines lineReader
	max   int
	data  []byte
}

func (r *sseReader) ReadFrame() ([]byte, error) {
	r.data = r.data[:0]
	have := false // a data field was seen in this event
	for {
		line, err := r.lines.readLine()
		if err != nil {
			if have && !errors.Is(err, informer.ErrBadInput) {
				return nil, truncated(err) // the stream ended inside an event
			}
			return nil, err
		}
		if len(line) == 0 { // dispatch
			if have {
				return r.data, nil
			}
			continue
		}
		if line[0] == ':' { // comment
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if string(field) != "data" {
			continue // event, id, retry and unknown fields
		}
		if have {
			r.data = append(r.data, '\n')
		}
		if len(r.data)+len(value) > r.max {
			return nil, errFrameTooLarge(r.max)
		}
		r.data = append(r.data, value...)
		have = true
	}
}
