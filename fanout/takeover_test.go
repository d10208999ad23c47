package fanout

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/wiretest"
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
