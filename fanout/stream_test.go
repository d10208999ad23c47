package fanout

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wire"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
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

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Lists that are never read hold one chunk each, not their whole response; beyond the
// limit of lists per client the client is answered 429 with a Retry-After; a list reader
// that stalls past WriteTimeout is disconnected, and its slot is free again.
func TestServerStalledListReaders(t *testing.T) {
	const objects, readers = 2000, 20
	up := newUpstream(t, memory.Options{})
	val := strings.Repeat("v", 1<<10)
	for i := range objects {
		wiretest.Put(up.src, fmt.Sprintf("k%05d", i), val)
	}
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{WriteTimeout: 500 * time.Millisecond, ErrorHandler: func(error) {}}})
	ts := startServer(t, srv)
	addr := ts.Listener.Addr().String()

	before := heapInUse()
	codes := map[int]int{}
	for range readers {
		rc := dialAs(t, addr, "limit=0", "", 4096)
		codes[rc.resp.StatusCode]++
		if rc.resp.StatusCode == 429 && rc.resp.Header.Get("Retry-After") != "1" {
			t.Errorf("429 with Retry-After %q, want 1", rc.resp.Header.Get("Retry-After"))
		}
	}
	held := int64(heapInUse()) - int64(before)
	t.Logf("%d stalled list readers of %d objects of 1 KiB hold %d KiB of heap (answers %v)", readers, objects, held>>10, codes)
	if codes[200] != DefaultMaxListsPerClient || codes[429] != readers-DefaultMaxListsPerClient {
		t.Errorf("answers %v, want %d × 200 (the limit per client) and the rest 429", codes, DefaultMaxListsPerClient)
	}
	// A whole response is 2 MiB; a stalled list holds a 32 KiB chunk.
	if held > 4<<20 {
		t.Errorf("stalled list readers hold %d KiB of heap, want under 4 MiB", held>>10)
	}
	wiretest.Eventually(t, "the stalled list readers to be evicted", func() bool { return srv.Stats().Evicted == DefaultMaxListsPerClient })
	if n := srv.Stats().ListsRejected; n != readers-DefaultMaxListsPerClient {
		t.Errorf("Stats.ListsRejected = %d, want %d", n, readers-DefaultMaxListsPerClient)
	}
	// Their slots are free: a list is served in full.
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	wiretest.Eventually(t, "a list to be served again", func() bool {
		l, err := c.List(context.Background(), informer.ListOptions{})
		return err == nil && len(l.Items) == objects
	})
}

// paced reads a stream at about rate bytes per second, in reads of 16 KiB, until want
// ADDED events and the end-of-initial-events bookmark have been read.
func paced(t *testing.T, rc *rawConn, rate int, want int) {
	t.Helper()
	const chunk = 16 << 10
	tick := time.NewTicker(time.Duration(int64(time.Second) * chunk / int64(rate)))
	defer tick.Stop()
	_ = rc.conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	buf := make([]byte, chunk)
	var added int
	var tail []byte
	for deadline := time.Now().Add(wiretest.WaitTimeout); time.Now().Before(deadline); {
		<-tick.C
		n, err := rc.resp.Body.Read(buf)
		tail = append(tail, buf[:n]...)
		for {
			i := strings.IndexByte(string(tail), '\n')
			if i < 0 {
				break
			}
			line := string(tail[:i])
			tail = tail[i+1:]
			switch {
			case strings.HasPrefix(line, `{"type":"ADDED"`):
				added++
			case strings.Contains(line, wire.InitialEventsEnd):
				if added != want {
					t.Fatalf("%d ADDED events before the end of the initial events, want %d", added, want)
				}
				return
			default:
				t.Fatalf("unexpected frame %.80s", line)
			}
		}
		if err != nil {
			t.Fatalf("after %d of %d events: %v", added, want, err)
		}
	}
	t.Fatal("timed out")
}

// A client that reads slowly but steadily is kept, through an initial state far larger
// than its connection's buffers: eviction waits for a stall, not for one slow write.
func TestServerSlowReaderKept(t *testing.T) {
	const objects = 16 // of 64 KiB: 1 MiB of initial state
	up := newUpstream(t, memory.Options{})
	val := strings.Repeat("v", 64<<10)
	for i := range objects {
		wiretest.Put(up.src, fmt.Sprintf("k%02d", i), val)
	}
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		WriteTimeout: time.Second, SendBuffer: 64 << 10, ErrorHandler: func(error) {},
	}})
	ts := startServer(t, srv)
	rc := dialAs(t, ts.Listener.Addr().String(), "watch=1&sendInitialEvents=true&allowWatchBookmarks=true", "", 16<<10)
	paced(t, rc, 400<<10, objects) // 400 KiB/s: about 2.5 s
	if n := srv.Stats().Evicted; n != 0 {
		t.Errorf("Stats.Evicted = %d: a steady reader was evicted", n)
	}
}

// bigBuffers gives every accepted connection a send buffer of 4 MiB, as the kernel's
// autotuning does to a connection that was fast for a while.
type bigBuffers struct{ net.Listener }

func (l bigBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 20)
	}
	return c, err
}

// A steady reader behind a send buffer of megabytes is kept: one write may wait for
// seconds, until a third of that buffer has drained, but the client's TCP stack accepts
// data all along, and that progress is what keeps it (ConnContext, Linux).
func TestServerSlowReaderProgress(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the send queue is read on Linux only")
	}
	const objects = 48 // of 256 KiB: 12 MiB, beyond the 8 MiB the kernel gives a 4 MiB SO_SNDBUF
	up := newUpstream(t, memory.Options{})
	val := strings.Repeat("v", 256<<10)
	for i := range objects {
		wiretest.Put(up.src, fmt.Sprintf("k%02d", i), val)
	}
	reported := make(chan error, 1)
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		WriteTimeout: time.Second, SendBuffer: -1,
		ErrorHandler: reportTo(reported),
	}})
	ts := serveHTTP(t, srv, srv, func(ts *httptest.Server) {
		ts.Listener = bigBuffers{ts.Listener}
		ts.Config.ConnContext = ConnContext
	})
	rc := dialAs(t, ts.Listener.Addr().String(), "watch=1&sendInitialEvents=true", "", 64<<10)
	// 3 MiB at 1 MiB/s, in reads of 16 KiB: the server's writes block throughout.
	const chunk, total = 16 << 10, 3 << 20
	tick := time.NewTicker(time.Second * chunk / (1 << 20))
	defer tick.Stop()
	buf := make([]byte, chunk)
	for read := 0; read < total; {
		<-tick.C
		n, err := io.ReadFull(rc.r, buf)
		read += n
		if err != nil {
			t.Fatalf("after %d KiB: %v", read>>10, err)
		}
	}
	select {
	case err := <-reported:
		t.Errorf("a steady reader at 1 MiB/s was reported: %v", err)
	default:
	}
	if n := srv.Stats().Evicted; n != 0 {
		t.Errorf("Stats.Evicted = %d: a steady reader was evicted", n)
	}
}

// A client disconnected for stalling gets its connection reset, not closed, so that the
// kernel drops the data queued for it at once (with ConnContext installed).
func TestServerEvictedConnectionReset(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		WriteTimeout: 200 * time.Millisecond, SendBuffer: 4096, ErrorHandler: func(error) {},
	}})
	ts := startServer(t, srv)
	stalled := dialAs(t, ts.Listener.Addr().String(), "watch=1&resourceVersion="+rev(srv, 1), "", 4096)
	big := strings.Repeat("x", 4<<10)
	for i := 0; i < 1000 && srv.Stats().Evicted == 0; i++ {
		wiretest.Put(up.src, fmt.Sprintf("k%03d", i%100), big+fmt.Sprint(i))
		if i%50 == 49 {
			wiretest.Eventually(t, "the server to take the changes", func() bool { return srv.src.Revision() >= int64(i+2) })
		}
	}
	wiretest.Eventually(t, "the stalled watcher to be evicted", func() bool { return srv.Stats().Evicted == 1 })
	_ = stalled.conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	if _, err := io.Copy(io.Discard, stalled.r); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the evicted watcher's connection ended with %v, want a reset (ECONNRESET)", err)
	}
	// A watch that ends normally ends gracefully: the reset is disarmed.
	done := dialAs(t, ts.Listener.Addr().String(), "watch=1&timeoutSeconds=1&resourceVersion="+rev(srv, 1), "", 0)
	_ = done.conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	if _, err := io.Copy(io.Discard, done.r); err != nil {
		t.Errorf("a watch at its timeout ended with %v, want a clean end", err)
	}
}

// A list or a streaming list still being sent when its revision leaves the history is cut
// (the connection is closed mid-body; a streaming list ends with an ERROR event, 410), so
// that a slow reader never pins more of the state than the changes the history holds.
func TestServerSlowListReaderCut(t *testing.T) {
	const objects, history = 2000, 100
	for _, q := range []string{"limit=0", "watch=1&sendInitialEvents=true"} {
		t.Run(q, func(t *testing.T) {
			up, srv, ts := bigState(t, objects, 1<<10, history)
			rc := dialAs(t, ts.Listener.Addr().String(), q, "", 64<<10)
			if rc.resp.StatusCode != 200 {
				t.Fatalf("status %d", rc.resp.StatusCode)
			}
			if _, err := io.ReadFull(rc.r, make([]byte, 64<<10)); err != nil {
				t.Fatal(err)
			}
			// The state changes past the history while the reader is still at the start.
			for i := range 2 * history {
				wiretest.Put(up.src, fmt.Sprintf("k%05d", i), "changed")
			}
			wiretest.Eventually(t, "the server to log the changes", func() bool { return srv.src.Revision() >= objects+2*history })
			// A list, streaming or not, whose write waits for its reader is cut too, well
			// before WriteTimeout: it releases its slot and its snapshot at once.
			wiretest.Eventually(t, "the waiting list to be cut", func() bool { return srv.Stats().Evicted == 1 })
			if strings.HasPrefix(q, "watch") {
				wiretest.Eventually(t, "the cut streaming list's slot to be free", func() bool { return srv.Stats().OpenWatches == 0 })
			}
			_ = rc.conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
			var rest []byte
			var err error
			if strings.HasPrefix(q, "watch") {
				for err == nil && !bytes.Contains(rest, []byte(wire.InitialEventsEnd)) && !bytes.Contains(rest, []byte(`"type":"ERROR"`)) {
					var l []byte
					l, err = rc.r.ReadBytes('\n')
					rest = append(rest, l...)
				}
			} else {
				rest, err = io.ReadAll(rc.r)
			}
			if err == nil && (bytes.Contains(rest, []byte(wire.InitialEventsEnd)) || bytes.HasSuffix(rest, []byte("]}\n"))) {
				t.Fatalf("the slow reader got the whole state (%d bytes more) though its revision left the history", len(rest))
			}
			if n := srv.Stats().Evicted; n != 1 {
				t.Errorf("Stats.Evicted = %d, want 1", n)
			}
		})
	}
}

// A watcher that stops reading altogether is disconnected once a write has waited
// WriteTimeout, reported to the ErrorHandler and counted; its connection is cut (no clean
// end, no ERROR event: nothing can be written to it).
func TestServerStalledWatcher(t *testing.T) {
	up := newUpstream(t, memory.Options{HistoryLimit: 10})
	wiretest.Put(up.src, "a", "1")
	reported := make(chan error, 1)
	srv, stalled, fast := twoWatchers(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		WriteTimeout: 200 * time.Millisecond,
		ErrorHandler: reportTo(reported),
	}}, 4096)
	big := strings.Repeat("x", 4<<10)
	for i := range 100 { // far more than the stalled watcher's buffers hold
		wiretest.Put(up.src, fmt.Sprintf("k%03d", i), big)
		fast.Line(t)
	}
	if err := testkit.Recv(t, reported, "the stalled watcher's disconnection"); !errors.Is(err, os.ErrDeadlineExceeded) ||
		!strings.HasPrefix(err.Error(), `fanout: server for informer "upstream": watcher 127.0.0.1:`) ||
		!strings.Contains(err.Error(), " stalled: disconnected after 200ms") || !strings.HasSuffix(err.Error(), "(the client must read faster, or raise WriteTimeout)") {
		t.Errorf("reported %v", err)
	}
	var lines int
	for {
		l, err := stalled.r.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				t.Error("the stalled watcher's stream ended cleanly; want a cut connection")
			}
			break
		}
		if strings.Contains(l, `"type":"ERROR"`) {
			t.Errorf("ERROR event sent to a stalled watcher: %.80s", l)
		}
		lines++
	}
	if lines == 0 || lines >= 100 {
		t.Errorf("the stalled watcher got %d events before its connection was cut", lines)
	}
	if n := srv.Stats().Evicted; n != 1 {
		t.Errorf("Stats.Evicted = %d, want 1", n)
	}
}
