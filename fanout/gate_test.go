package fanout

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

func TestServerWatcherLimit(t *testing.T) {
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxWatchers: 2}}, "a")
	r := rev(srv, 1)
	wiretest.Open(t, ts.URL+"?watch=1&resourceVersion="+r)
	second := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion="+r)
	resp := wiretest.Get(t, nil, ts.URL+"?watch=1&resourceVersion="+r, nil)
	b := wiretest.Body(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(b, `"reason":"TooManyRequests"`) || !strings.Contains(b, `"code":429`) {
		t.Fatalf("third watch: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	// The client sees it as a retryable error with the delay.
	_, err := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Watch(context.Background(), informer.WatchOptions{Revision: r})
	if d, _ := informer.RetryAfterOf(err); !errors.Is(err, informer.ErrTooManyRequests) || !errors.Is(err, informer.ErrRetryable) || d != time.Second {
		t.Fatalf("client: %v (retry after %v)", err, d)
	}
	if n := srv.Stats().Rejected; n != 2 {
		t.Errorf("Stats.Rejected = %d, want 2", n)
	}
	// Lists are not limited.
	if resp := wiretest.Get(t, nil, ts.URL, nil); resp.StatusCode != 200 {
		t.Errorf("list at the watcher limit: %d", resp.StatusCode)
	} else {
		wiretest.Body(t, resp)
	}
	second.Close()
}

// Shutdown ends every open watch cleanly (the terminating chunk: the client sees io.EOF),
// answers later requests 503, and returns once every handler has.
func TestServerShutdown(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	waitSynced(t, srv)
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	var watches []informer.Watch[*wiretest.Obj]
	for range 3 {
		w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: rev(srv, 1)})
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, w)
	}
	wiretest.Put(up.src, "b", "1")
	for _, w := range watches {
		if ev, err := w.Next(); err != nil || ev.Object.Name != "b" {
			t.Fatalf("%v %v", ev, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range watches {
		if _, err := w.Next(); err != io.EOF {
			t.Errorf("after Shutdown: %v, want io.EOF", err)
		}
		w.Stop()
	}
	if n := srv.Stats().OpenWatches; n != 0 {
		t.Errorf("%d watches still open", n)
	}
	if _, err := c.List(context.Background(), informer.ListOptions{}); !errors.Is(err, informer.ErrUnavailable) {
		t.Errorf("list after Shutdown: %v, want 503", err)
	}
	// The handler is gone from the informer: changes no longer reach the server.
	before := srv.Revision()
	wiretest.Put(up.src, "c", "1")
	wiretest.Converge(t, up.Mirror, func() string { return wiretest.State(up.src.Items()) })
	if srv.Revision() != before {
		t.Error("the server still mirrors after Shutdown")
	}
}

// 1,000 watchers on one server: all are served one change, the 1,001st is refused, and
// shutdown ends them all; bounded in count and in time.
func TestServer1000Watchers(t *testing.T) {
	const n = 1000
	up, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxWatchers: n}}, "a")
	addr := ts.Listener.Addr().String()
	from := "watch=1&resourceVersion=" + rev(srv, 1)
	start := time.Now()
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = dialWatch(t, addr, from, 0)
		if conns[i].resp.StatusCode != 200 {
			t.Fatalf("watch %d: %d", i, conns[i].resp.StatusCode)
		}
	}
	over := dialWatch(t, addr, from, 0)
	if over.resp.StatusCode != 429 {
		t.Fatalf("watch %d: %d, want 429", n+1, over.resp.StatusCode)
	}
	if got := srv.Stats().OpenWatches; got != n {
		t.Fatalf("OpenWatches = %d", got)
	}
	opened := time.Since(start)

	start = time.Now()
	wiretest.Put(up.src, "b", "1")
	want := fmt.Sprintf(`{"type":"ADDED","resourceVersion":%q,"object":{"name":"b","val":"1"}}`, rev(srv, 2))
	for i, c := range conns {
		if got := c.Line(t); got != want {
			t.Fatalf("watcher %d: %s", i, got)
		}
	}
	fanout := time.Since(start)

	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range conns {
		if got := c.Line(t); got != "EOF" {
			t.Fatalf("watcher %d after Shutdown: %s", i, got)
		}
	}
	t.Logf("1000 watchers: opened in %v, one change reached all in %v, shut down in %v", opened, fanout, time.Since(start))
	if fanout > 10*time.Second {
		t.Errorf("fan-out of one change to %d watchers took %v", n, fanout)
	}
}

// dialAs sends a GET of query on a bare TCP connection, as the client named by token
// ("Bearer <token>"; none if empty), and reads the response's header only: the body is
// left for the test to read, or not.
func dialAs(t testing.TB, addr, query, token string, readBuffer int) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if readBuffer > 0 {
		_ = conn.(*net.TCPConn).SetReadBuffer(readBuffer)
	}
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := fmt.Fprintf(conn, "GET /?%s HTTP/1.1\r\nHost: %s\r\n%s\r\n", query, addr, auth); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	rc := &rawConn{conn: conn}
	if rc.resp, err = http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil); err != nil {
		t.Fatal(err)
	}
	rc.r = bufio.NewReaderSize(rc.resp.Body, 64<<10)
	return rc
}

// byToken names the client by its bearer token, and refuses requests without one.
func byToken(r *http.Request) (string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", ErrUnauthorized
	}
	return tok, nil
}

// One client cannot take every watch slot: beyond its own limit it is answered 429 while
// another client is still served; clients are named by AuthorizeClient, or else by their
// remote address.
func TestServerWatchersPerClient(t *testing.T) {
	t.Run("named", func(t *testing.T) {
		_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
			AuthorizeClient: byToken, MaxWatchers: 10, MaxWatchersPerClient: 3,
		}}, "a")
		addr := ts.Listener.Addr().String()
		q := "watch=1&resourceVersion=" + rev(srv, 1)
		for i := range 3 {
			if rc := dialAs(t, addr, q, "alice", 0); rc.resp.StatusCode != 200 {
				t.Fatalf("alice's watch %d: %d", i, rc.resp.StatusCode)
			}
		}
		over := dialAs(t, addr, q, "alice", 0)
		b, _ := io.ReadAll(over.resp.Body)
		if over.resp.StatusCode != 429 || over.resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), "limit per client is 3") {
			t.Errorf("alice's 4th watch: %d %q %s", over.resp.StatusCode, over.resp.Header.Get("Retry-After"), b)
		}
		if rc := dialAs(t, addr, q, "bob", 0); rc.resp.StatusCode != 200 {
			t.Errorf("bob's watch while alice holds her maximum: %d", rc.resp.StatusCode)
		}
		if n := srv.Stats().Rejected; n != 1 {
			t.Errorf("Stats.Rejected = %d, want 1", n)
		}
	})
	t.Run("by address", func(t *testing.T) {
		_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxWatchersPerClient: 2}}, "a")
		addr := ts.Listener.Addr().String()
		q := "watch=1&resourceVersion=" + rev(srv, 1)
		var got []int
		for range 3 {
			got = append(got, dialAs(t, addr, q, "", 0).resp.StatusCode)
		}
		if fmt.Sprint(got) != "[200 200 429]" {
			t.Errorf("three watches from 127.0.0.1: %v, want [200 200 429]", got)
		}
	})
}

// A watch ends, cleanly, within MaxWatchDuration whatever timeoutSeconds asked; the client
// must then be authorized again, so a revoked credential stops receiving within it.
func TestServerWatchLifetime(t *testing.T) {
	var revoked atomic.Bool
	up, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		MaxWatchDuration: 400 * time.Millisecond,
		AuthorizeClient: func(r *http.Request) (string, error) {
			if revoked.Load() {
				return "", fmt.Errorf("token revoked: %w", ErrUnauthorized)
			}
			return "alice", nil
		},
	}}, "a")
	addr := ts.Listener.Addr().String()
	start := time.Now()
	w := dialAs(t, addr, "watch=1&timeoutSeconds=3600&resourceVersion="+rev(srv, 1), "", 0)
	if w.resp.StatusCode != 200 {
		t.Fatalf("watch: %d", w.resp.StatusCode)
	}
	revoked.Store(true)
	_ = w.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // changes keep coming while the revoked client is still connected
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 500; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
				wiretest.Put(up.src, "a", fmt.Sprint(i))
			}
		}
	}()
	defer wg.Wait()
	defer close(done)
	for {
		l, err := w.r.ReadString('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the watch did not end cleanly within its bound: %v (after %.60q)", err, l)
		}
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 400*time.Millisecond+time.Second {
		t.Errorf("the watch ended after %v, want between 200ms and 400ms (plus slack)", took)
	}
	if rc := dialAs(t, addr, "watch=1&resourceVersion="+rev(srv, 1), "", 0); rc.resp.StatusCode != 401 {
		t.Errorf("watch again with a revoked credential: %d, want 401", rc.resp.StatusCode)
	}
}

// Lifetimes are drawn in [MaxWatchDuration/2, MaxWatchDuration], spread out.
func TestServerWatchLifetimeSpread(t *testing.T) {
	c := newGate(ServeOptions{MaxWatchDuration: time.Minute})
	seen := map[time.Duration]bool{}
	for range 100 {
		d := c.WatchLifetime()
		if d < 30*time.Second || d > time.Minute {
			t.Fatalf("lifetime %v outside [30s, 1m]", d)
		}
		seen[d] = true
	}
	if len(seen) < 90 {
		t.Errorf("%d distinct lifetimes of 100", len(seen))
	}
	c = newGate(ServeOptions{})
	if d := c.WatchLifetime(); d < DefaultMaxWatchDuration/2 || d > DefaultMaxWatchDuration {
		t.Errorf("default lifetime %v", d)
	}
}
