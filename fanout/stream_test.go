package fanout

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/wiretest"
	"github.com/informer-go/informer/source/memory"
)

// flushOnly is a middleware's ResponseWriter that implements Flush and nothing more: no
// Unwrap, no Hijacker, no deadlines.
type flushOnly struct{ w http.ResponseWriter }

func (f flushOnly) Header() http.Header         { return f.w.Header() }
func (f flushOnly) WriteHeader(code int)        { f.w.WriteHeader(code) }
func (f flushOnly) Write(b []byte) (int, error) { return f.w.Write(b) }
func (f flushOnly) Flush()                      { f.w.(http.Flusher).Flush() }

// A stalled watcher behind a ResponseWriter that only flushes is evicted as any other:
// counted in Stats.Evicted and reported, over TLS and over plain TCP.
func TestServerStalledWatcherBehindFlushOnlyWriter(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"tcp", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, memory.Options{})
			wiretest.Put(up.src, "a", "1")
			reports := make(chan error, 10)
			srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
				WriteTimeout: 200 * time.Millisecond, SendBuffer: 4096, ErrorHandler: reportTo(reports),
			}})
			front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeHTTP(flushOnly{w}, r) })
			ts := serveHTTP(t, srv, front, func(ts *httptest.Server) {
				withConnContext(ts)
				if tc.tls {
					ts.TLS = &tls.Config{}
				}
			})
			query := "watch=1&resourceVersion=" + rev(srv, 1)
			if tc.tls {
				conn, _ := tlsWatch(t, ts, query)
				_ = conn.NetConn().(*net.TCPConn).SetReadBuffer(4096)
			} else {
				dialAs(t, ts.Listener.Addr().String(), query, "", 4096)
			}
			wiretest.Eventually(t, "the watch to open", func() bool { return srv.Stats().OpenWatches == 1 })
			big := strings.Repeat("x", 4<<10)
			for i := 0; i < 2000 && srv.Stats().OpenWatches == 1; i++ {
				wiretest.Put(up.src, fmt.Sprintf("k%03d", i%100), big+fmt.Sprint(i))
				if i%50 == 49 {
					wiretest.Eventually(t, "the server to take the changes", func() bool { return srv.src.Revision() >= int64(i+2) })
				}
			}
			wiretest.Eventually(t, "the stalled watcher to be dropped", func() bool { return srv.Stats().OpenWatches == 0 })
			if n := srv.Stats().Evicted; n != 1 {
				t.Errorf("Stats.Evicted = %d after a stalled watcher was dropped, want 1", n)
			}
			select {
			case err := <-reports:
				if !strings.Contains(err.Error(), "stalled") {
					t.Errorf("reported %q, want the stalled watcher", err)
				}
			case <-time.After(wiretest.WaitTimeout):
				t.Error("the stalled watcher was not reported")
			}
		})
	}
}
