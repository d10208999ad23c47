package fanout

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/informer-go/informer/internal/wiretest"
	"github.com/informer-go/informer/source/memory"
)

// BenchmarkWatcherCostHTTP2 measures as BenchmarkWatcherCost does, over HTTP/2 (TLS),
// whose watches stay on net/http's path (a stream of a shared connection cannot be taken
// over): 1,000 watches on the streams of a few connections of a Go client in the same
// process, whose side of each stream (its state and buffers) is included, unlike
// BenchmarkWatcherCost's bare sockets.
func BenchmarkWatcherCostHTTP2(b *testing.B) {
	const n = 1000
	raiseFileLimit(b, 2*n+1024)
	up := newUpstream(b, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, err := newServer(b, up, ServerOptions[*wiretest.Obj]{})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	b.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		ts.Close()
	})
	waitSynced(b, srv)
	client := ts.Client()
	line := make([]byte, 1)
	for i := -1; i < b.N; i++ {
		from := int64(i + 2)
		wiretest.Eventually(b, "the server to hold the last change", func() bool { return srv.src.Revision() == from })
		cost := startWatcherCost()
		bodies := make([]io.ReadCloser, n)
		for j := range bodies {
			resp, err := client.Get(ts.URL + "?watch=1&resourceVersion=" + rev(srv, from))
			if err != nil {
				b.Fatal(err)
			}
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
				b.Fatalf("%s %s", resp.Proto, resp.Status)
			}
			bodies[j] = resp.Body
		}
		val := fmt.Sprint("round", i)
		wiretest.Put(up.src, "a", val)
		for _, body := range bodies { // each has its change: the server is idle again
			var got []byte
			for !bytes.HasSuffix(got, []byte("\n")) {
				if _, err := io.ReadFull(body, line); err != nil {
					b.Fatal(err)
				}
				got = append(got, line[0])
			}
			if !bytes.Contains(got, []byte(val)) {
				b.Fatalf("%q", got)
			}
		}
		if i >= 0 {
			cost.report(b, n)
		}
		for _, body := range bodies {
			body.Close()
		}
		wiretest.Eventually(b, "the watchers to close", func() bool { return srv.Stats().OpenWatches == 0 })
	}
}
