package fanout

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// wireCount counts what a server's connections write to their sockets: under TLS each
// record sent after the handshake is one Write of the connection under it.
type wireCount struct{ writes, bytes atomic.Int64 }

// countingListener counts the writes of the connections it accepts in c.
type countingListener struct {
	net.Listener
	c *wireCount
}

func (l countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: l.c}, nil
}

// countingConn counts its writes, when they start (so that a peer that has read a write's
// bytes sees it counted).
type countingConn struct {
	net.Conn
	c *wireCount
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.c.writes.Add(1)
	c.c.bytes.Add(int64(len(p)))
	return c.Conn.Write(p)
}

// NetConn returns the connection under c, so that the server finds the TCP connection
// (hang-up watch, send buffer) as it would without c.
func (c *countingConn) NetConn() net.Conn { return c.Conn }

// serveTLSCounted serves srv over TLS (HTTP/1.1 only) on loopback, with ConnContext, and
// counts what its connections write under TLS; both are shut down when the test ends.
func serveTLSCounted(tb testing.TB, srv *Server[string, *wiretest.Obj]) (*httptest.Server, *wireCount) {
	tb.Helper()
	wc := new(wireCount)
	ts := serveHTTP(tb, srv, srv, func(ts *httptest.Server) {
		ts.Config.ConnContext = ConnContext
		ts.Listener = countingListener{Listener: ts.Listener, c: wc}
		ts.TLS = &tls.Config{} // HTTP/1.1 only: EnableHTTP2 is not set
	})
	return ts, wc
}

// tlsWatch opens a watch of query on ts (a TLS server) over a TLS connection of its own,
// closed at the end of the test, and returns its reader once the response's header is in.
func tlsWatch(tb testing.TB, ts *httptest.Server, query string) (*tls.Conn, *bufio.Reader) {
	tb.Helper()
	cfg := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	conn, err := tls.Dial("tcp", ts.Listener.Addr().String(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET /?%s HTTP/1.1\r\nHost: x\r\n\r\n", query); err != nil {
		tb.Fatal(err)
	}
	return conn, readWatchHead(tb, conn)
}

// A taken-over watch served over TLS sends each chunk (here each event) as one write of
// the connection under TLS, that is one TLS record, as net/http's buffered chunked writer
// does: not its size line, its data and its CRLF as three records.
func TestServerTakenOverWatchTLSOneRecordPerChunk(t *testing.T) {
	const events = 20
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{})
	ts, wc := serveTLSCounted(t, srv)
	wiretest.Eventually(t, "the server to hold the object", func() bool { return srv.src.Revision() == 1 })
	_, br := tlsWatch(t, ts, "watch=1&resourceVersion="+rev(srv, 1))
	wiretest.Eventually(t, "the watch to open", func() bool { return srv.Stats().OpenWatches == 1 })
	// The handshake and the header are counted by now; the watch is taken over as soon
	// as its header is sent, before its first event.
	writes, bytes := wc.writes.Load(), wc.bytes.Load()
	for i := range events {
		v := fmt.Sprint(i + 2)
		wiretest.Put(up.src, "a", v)
		// A chunk read whole (to its CRLF) has had every write of it started.
		frame := readChunk(t, br)
		if !strings.Contains(string(frame), fmt.Sprintf(`"val":%q`, v)) {
			t.Fatalf("event %d: chunk %q, want a=%s", i, frame, v)
		}
		w, b := wc.writes.Load(), wc.bytes.Load()
		if w-writes != 1 {
			t.Fatalf("event %d (%d bytes of data) went out in %d writes (%d bytes) under TLS, want 1", i, len(frame), w-writes, b-bytes)
		}
		writes, bytes = w, b
	}
}

// chunkedConn's Write sends a chunk as net/http's would (size line, data, CRLF): in one
// writev on TCP; in one write on another connection (TLS) when it is at most
// maxCopiedChunk bytes, and as three writes when larger.
func TestChunkedConnWrite(t *testing.T) {
	small, large := strings.Repeat("s", 100), strings.Repeat("l", maxCopiedChunk)
	frame := func(p string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(p), p) }
	for _, tc := range []struct {
		name   string
		tcp    bool
		data   string
		writes int64 // -1: not observable (one writev)
	}{
		{"tcp/small", true, small, -1},
		{"tcp/large", true, large, -1},
		{"other/small", false, small, 1},
		{"other/at the bound", false, strings.Repeat("f", maxCopiedChunk-len("3ff8\r\n\r\n")), 1},
		{"other/one over", false, strings.Repeat("o", maxCopiedChunk-len("3ff8\r\n\r\n")+1), 3},
		{"other/large", false, large, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			wc := new(wireCount)
			if !tc.tcp {
				server = &countingConn{Conn: server, c: wc}
			}
			cw := newChunkedConn(server)
			if cw.vectored != tc.tcp {
				t.Fatalf("vectored %v for a %T, want %v", cw.vectored, server, tc.tcp)
			}
			want := frame(tc.data) + frame(tc.data)
			done := make(chan string, 1)
			go func() {
				_ = client.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
				b := make([]byte, len(want))
				n, _ := io.ReadFull(client, b)
				done <- string(b[:n])
			}()
			for range 2 {
				if n, err := cw.Write([]byte(tc.data)); err != nil || n != len(tc.data) {
					t.Fatalf("Write: %d, %v; want %d", n, err, len(tc.data))
				}
			}
			if got := <-done; got != want {
				t.Fatalf("on the wire %.80q…, want %.80q…", got, want)
			}
			if tc.writes >= 0 && wc.writes.Load() != 2*tc.writes {
				t.Errorf("%d writes for 2 chunks, want %d", wc.writes.Load(), 2*tc.writes)
			}
		})
	}
}

// BenchmarkTakenOverWatchTLS measures changes sent one at a time to 100 watchers taken
// over from net/http, over TLS on loopback: each op is one change (a frame of about 110
// bytes) reaching all 100 (the next is made once every watcher has read it, so that each
// is a chunk of its own, as for watchers that keep up). It reports the bytes written
// under TLS per delivery (records and their overhead) and the writes of the connection
// under TLS per delivery (records).
func BenchmarkTakenOverWatchTLS(b *testing.B) {
	const watchers = 100
	up := newUpstream(b, memory.Options{})
	srv := newServer(b, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxWatchersPerClient: -1}})
	ts, wc := serveTLSCounted(b, srv)
	got := make(chan struct{}, watchers)
	from := srv.Revision()
	for range watchers {
		conn, br := tlsWatch(b, ts, "watch=1&resourceVersion="+from)
		_ = conn.SetReadDeadline(time.Time{})
		lines := bufio.NewReader(httputil.NewChunkedReader(br))
		go func() {
			for {
				if _, err := lines.ReadSlice('\n'); err != nil {
					return
				}
				got <- struct{}{}
			}
		}()
	}
	wiretest.Eventually(b, "the watchers to open", func() bool { return srv.Stats().OpenWatches == watchers })
	objs := make([]*wiretest.Obj, b.N)
	for i := range objs {
		objs[i] = &wiretest.Obj{Name: fmt.Sprintf("object-%03d", i%500), Val: fmt.Sprint("payments:", i)}
	}
	writes, bytes := wc.writes.Load(), wc.bytes.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for _, o := range objs {
		srv.mirror.put(o)
		for range watchers {
			<-got
		}
	}
	b.StopTimer()
	n := float64(b.N * watchers)
	b.ReportMetric(float64(wc.bytes.Load()-bytes)/n, "wire-B/delivery")
	b.ReportMetric(float64(wc.writes.Load()-writes)/n, "writes/delivery")
}

// A taken-over watch's connection is closed when the watch ends, so its response says
// so (Connection: close): a client does not pipeline or reuse it, and a request sent
// behind the watch is known to be unanswered rather than lost.
func TestServerTakenOverWatchSaysConnectionClose(t *testing.T) {
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a")
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A watch and, pipelined behind it, a list.
	if _, err := fmt.Fprintf(conn, "GET /?watch=1&timeoutSeconds=1&resourceVersion=%s HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", rev(srv, 1)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close {
		t.Errorf("the taken-over watch's response has Connection %q, want close: its connection is closed after it", resp.Header.Get("Connection"))
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Errorf("the watch ended with %v, want a clean end at its timeout", err)
	}
}

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
	// The server's log (internal/eventlog) keeps no record of its calls: it has none to keep.
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
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	if err := testkit.Recv(t, reported, "the panic's error"); !strings.HasPrefix(err.Error(), "fanout: pass-through: panic serving the watch of 127.0.0.1:") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("reported %v", err)
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
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{})
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
	ts.Client().Transport.(*http.Transport).CloseIdleConnections()
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
