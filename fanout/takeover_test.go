package fanout

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// readWatchHead reads the status line and header of a watch on conn, and returns a
// reader of what follows, still chunked.
func readWatchHead(t testing.TB, conn net.Conn) *bufio.Reader {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	br := bufio.NewReaderSize(conn, 1024)
	status, err := br.ReadString('\n')
	if err != nil || status != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("status line %q, %v", status, err)
	}
	chunked := false
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			break
		}
		if strings.EqualFold(l, "Transfer-Encoding: chunked\r\n") {
			chunked = true
		}
	}
	if !chunked {
		t.Fatal("the watch's response is not chunked")
	}
	return br
}

// readChunk reads one chunk of a chunked body: its data, or nil for the last chunk
// (whose empty trailer it reads too).
func readChunk(t testing.TB, br *bufio.Reader) []byte {
	t.Helper()
	size, err := br.ReadString('\n')
	if err != nil || !strings.HasSuffix(size, "\r\n") {
		t.Fatalf("chunk size line %q, %v", size, err)
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(size, "\r\n"), 16, 32)
	if err != nil || size != strconv.FormatUint(n, 16)+"\r\n" {
		t.Fatalf("chunk size line %q: not lower-case hex without padding", size)
	}
	data := make([]byte, n+2)
	if _, err := io.ReadFull(br, data); err != nil {
		t.Fatal(err)
	}
	if string(data[n:]) != "\r\n" {
		t.Fatalf("chunk of %d bytes ends with %q, want CRLF", n, data[n:])
	}
	if n == 0 {
		return nil
	}
	return data[:n]
}

// An idle HTTP/1.1 watcher holds at most one goroutine of the serving process (net/http's
// connection goroutine and its background reader are gone once the watch is taken over),
// and a watcher whose client goes away frees its slot.
func TestServerIdleWatcherGoroutines(t *testing.T) {
	const n = 20
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{})
	addr := ts.Listener.Addr().String()
	wiretest.Eventually(t, "the server to hold the object", func() bool { return srv.src.Revision() == 1 })
	before := runtime.NumGoroutine()
	conns := openWatches(t, srv, addr, n, rev(srv, 1))
	wiretest.Put(up.src, "a", "2")
	for _, c := range conns {
		br := readWatchHead(t, c)
		if l := string(readChunk(t, br)); !strings.Contains(l, `"val":"2"`) {
			t.Fatalf("first frame %q", l)
		}
	}
	// One per watcher, and the one that watches their connections for hang-ups.
	wiretest.Eventually(t, fmt.Sprintf("at most %d goroutines for %d idle watchers", n+1, n), func() bool {
		return runtime.NumGoroutine()-before <= n+1
	})
	t.Logf("%d goroutines for %d idle watchers", runtime.NumGoroutine()-before, n)
	for _, c := range conns {
		c.Close()
	}
	wiretest.Eventually(t, "the watchers' slots to be freed", func() bool { return srv.Stats().OpenWatches == 0 })
	wiretest.Eventually(t, "the watchers' goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if n := len(srv.src.Requests()); n != 0 {
		t.Errorf("the server's log keeps a record of %d calls; want none (it grows by one per watch)", n)
	}
}

// The bytes of a taken-over watch are those net/http would write: a chunked body, one
// chunk per write, lower-case hex sizes, and the last chunk when the watch ends.
func TestServerWatchWire(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{})
	wiretest.Eventually(t, "the server to hold the object", func() bool { return srv.src.Revision() == 1 })
	conn := dialFrom(t, ts.Listener.Addr().String(), 0, "watch=1&resourceVersion="+rev(srv, 1))
	wiretest.Eventually(t, "the watch to open", func() bool { return srv.Stats().OpenWatches == 1 })
	br := readWatchHead(t, conn)
	big := strings.Repeat("x", 40<<10) // more than a write buffer: written before the flush
	var want strings.Builder
	for i, v := range []string{"2", big, "3"} {
		wiretest.Put(up.src, "a", v)
		fmt.Fprintf(&want, `{"type":"MODIFIED","resourceVersion":%q,"object":{"name":"a","val":%q}}`+"\n", rev(srv, int64(i+2)), v)
	}
	var got []byte
	for len(got) < want.Len() {
		got = append(got, readChunk(t, br)...)
	}
	if string(got) != want.String() {
		t.Fatalf("the stream's data:\n%.300q\nwant\n%.300q", got, want.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if rest := readChunk(t, br); rest != nil {
		t.Fatalf("after Shutdown: a chunk %q, want the last chunk", rest)
	}
}

// Shutdown ends a taken-over watch and waits for it: when it returns, the watch's
// goroutine has ended and its connection is closed.
func TestServerShutdownEndsTakenOverWatches(t *testing.T) {
	const n = 5
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{}) // its cleanup's Shutdown only waits again
	wiretest.Eventually(t, "the server to hold the object", func() bool { return srv.src.Revision() == 1 })
	before := runtime.NumGoroutine()
	var readers []*bufio.Reader
	var conns []net.Conn
	for range n {
		c := dialFrom(t, ts.Listener.Addr().String(), 0, "watch=1&resourceVersion="+rev(srv, 1))
		readers = append(readers, readWatchHead(t, c))
		conns = append(conns, c)
	}
	// http.Server.Shutdown does not track hijacked connections: Server.Shutdown must.
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if open := srv.Stats().OpenWatches; open != 0 {
		t.Errorf("%d watches open after Shutdown", open)
	}
	for _, br := range readers {
		if rest := readChunk(t, br); rest != nil {
			t.Fatalf("after Shutdown: a chunk %q, want the last chunk", rest)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	wiretest.Eventually(t, "the watches' goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// A taken-over watch keeps the deadline a middleware gave its request's context.
func TestServerTakenOverWatchKeepsDeadline(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, err := newServer(t, up, ServerOptions[*wiretest.Obj]{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 300*time.Millisecond)
		defer cancel()
		srv.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		ts.Close()
	})
	waitSynced(t, srv)
	wiretest.Eventually(t, "the server to hold the object", func() bool { return srv.src.Revision() == 1 })
	before := runtime.NumGoroutine()
	br := readWatchHead(t, dialFrom(t, ts.Listener.Addr().String(), 0, "watch=1&resourceVersion="+rev(srv, 1)))
	wiretest.Eventually(t, "the watch to be taken over", func() bool { return runtime.NumGoroutine() <= before+2 })
	wiretest.Put(up.src, "a", "2")
	if l := string(readChunk(t, br)); !strings.Contains(l, `"val":"2"`) {
		t.Fatalf("first frame %q", l)
	}
	if rest := readChunk(t, br); rest != nil {
		t.Fatalf("a chunk %q, want the last chunk at the deadline", rest)
	}
}

// A panic while a taken-over watch is served (here in a PassThrough's Encode) is what
// net/http makes of a handler's: the stream is cut, not ended, the panic reported, and
// the process serves on.
func TestTakenOverWatchPanic(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "1")
	reported := make(chan error, 1)
	pt := NewPassThrough[*wiretest.Obj](src, PassThroughOptions[*wiretest.Obj]{
		ServeOptions: ServeOptions{
			Logger: slog.New(slog.DiscardHandler),
			ErrorHandler: func(err error) {
				select {
				case reported <- err:
				default:
				}
			},
		},
		Encode: func(o *wiretest.Obj) ([]byte, error) {
			if o.Val == "boom" {
				panic("boom")
			}
			return json.Marshal(o)
		},
	})
	ts := httptest.NewServer(pt)
	t.Cleanup(func() {
		_ = pt.Shutdown(context.Background())
		ts.Close()
	})
	addr := ts.Listener.Addr().String()
	br := readWatchHead(t, dialFrom(t, addr, 0, "watch=1&resourceVersion=1"))
	wiretest.Put(src, "a", "boom")
	if l, err := br.ReadString('\n'); err == nil || l != "" {
		t.Fatalf("after the panic: read %q, %v; want the connection cut", l, err)
	}
	select {
	case err := <-reported:
		if !strings.Contains(err.Error(), "panic") || !strings.Contains(err.Error(), "boom") {
			t.Errorf("reported %v", err)
		}
	case <-time.After(wiretest.WaitTimeout):
		t.Fatal("the panic was not reported")
	}
	wiretest.Put(src, "a", "2")
	br = readWatchHead(t, dialFrom(t, addr, 0, "watch=1&resourceVersion=3"))
	wiretest.Put(src, "a", "3")
	if l := string(readChunk(t, br)); !strings.Contains(l, `"val":"3"`) {
		t.Fatalf("the next watch's first frame %q", l)
	}
}

// Over TLS (HTTP/1.1), a watch is taken over as well: the chunks go through the TLS
// connection, Shutdown ends the stream cleanly, and a client that closes its connection
// (a close_notify, then its FIN, under TLS) frees its slot.
func TestServerTakenOverWatchTLS(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, err := newServer(t, up, ServerOptions[*wiretest.Obj]{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewTLSServer(srv) // HTTP/1.1 only: EnableHTTP2 is not set
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		ts.Close()
	})
	waitSynced(t, srv)
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{HTTPClient: ts.Client()})
	watch := func() informer.Watch[*wiretest.Obj] {
		w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: srv.Revision()})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	closed, ended := watch(), watch()
	for _, v := range []string{"2", "3"} {
		wiretest.Put(up.src, "a", v)
		for _, w := range []informer.Watch[*wiretest.Obj]{closed, ended} {
			if ev, err := w.Next(); err != nil || ev.Object.Val != v {
				t.Fatalf("%+v %v, want a=%s", ev, err, v)
			}
		}
	}
	closed.Stop()
	ts.Client().Transport.(*nethttp.Transport).CloseIdleConnections()
	wiretest.Eventually(t, "the closed watch's slot to be freed", func() bool { return srv.Stats().OpenWatches == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ended.Next(); err != io.EOF {
		t.Errorf("after Shutdown: %v, want io.EOF", err)
	}
	ended.Stop()
}
