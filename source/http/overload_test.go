package httpsource

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

// sendEndless sends a GET of query whose body never ends (a chunked body, or a
// Content-Length that is never reached) on a bare TCP connection, and returns the
// connection with its response's status, read within limit (0 if none came).
func sendEndless(t *testing.T, addr, query string, chunked bool, limit time.Duration) (net.Conn, int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head := "Content-Length: 1000000\r\n\r\nabcd"
	if chunked {
		head = "Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n"
	}
	if _, err := fmt.Fprintf(conn, "GET /?%s HTTP/1.1\r\nHost: x\r\n%s", query, head); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return conn, 0
	}
	resp.Body.Close()
	return conn, resp.StatusCode
}

// A GET whose body never ends holds no list or watch slot: it is answered 400 at once,
// before a slot is taken, with the http.Server settings the README shows (no
// ReadTimeout), and an honest list and watch are served while such requests stay open.
func TestServerEndlessRequestBody(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	put(up.src, "a", "1")
	srv, err := newServer(t, up, ServerOptions[*obj]{ServeOptions: ServeOptions{MaxLists: 2, MaxWatchers: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, srv)
	addr := ts.Listener.Addr().String()
	for _, q := range []string{"limit=0", "watch=1", "watch=1&resourceVersion=" + rev(srv, 1)} {
		for _, chunked := range []bool{true, false} {
			for range 3 {
				if _, code := sendEndless(t, addr, q, chunked, 2*time.Second); code != http.StatusBadRequest {
					t.Fatalf("GET ?%s with a body that never ends (chunked %v): status %d, want 400 at once", q, chunked, code)
				}
			}
		}
	}
	c := newTestClient(t, ts.URL, ClientOptions[*obj]{})
	l, err := c.List(context.Background(), informer.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("an honest list: %v, %d items", err, len(l.Items))
	}
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: rev(srv, 1)})
	if err != nil {
		t.Fatalf("an honest watch: %v", err)
	}
	w.Stop()
	if n := srv.Stats().ListsRejected.Load() + srv.Stats().Rejected.Load(); n != 0 {
		t.Errorf("%d requests refused for want of a slot, want 0", n)
	}
	if n := srv.Stats().BadRequests.Load(); n != 18 {
		t.Errorf("Stats.BadRequests = %d, want 18", n)
	}
}
