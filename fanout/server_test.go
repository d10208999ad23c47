package fanout

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// withObjects starts an upstream holding name=1 for each name, and a server of it.
func withObjects(t *testing.T, opts ServerOptions[*wiretest.Obj], names ...string) (*upstream, *Server[string, *wiretest.Obj], *httptest.Server) {
	t.Helper()
	up := newUpstream(t, memory.Options{})
	for _, n := range names {
		wiretest.Put(up.src, n, "1")
	}
	srv, ts := serve(t, up, opts)
	if got := srv.Revision(); got != rev(srv, int64(len(names))) {
		t.Fatalf("server revision %s after the initial state, want %s", got, rev(srv, int64(len(names))))
	}
	return up, srv, ts
}

// waitRevision waits until the server at url holds the change of log revision n: a watch
// from log revision from, which the server has, shows when it arrives.
func waitRevision(t *testing.T, url string, srv *Server[string, *wiretest.Obj], from, n int64) {
	t.Helper()
	st := wiretest.Open(t, fmt.Sprintf("%s?watch=1&resourceVersion=%s", url, rev(srv, from)))
	defer st.Close()
	for want := fmt.Sprintf(`"resourceVersion":%q`, rev(srv, n)); !strings.Contains(st.Line(t), want); {
	}
}

func TestServerListPagination(t *testing.T) {
	up, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a", "b", "c", "d", "e")
	r5 := rev(srv, 5)

	resp := wiretest.Get(t, nil, ts.URL+"?limit=2", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var page struct {
		Metadata struct{ ResourceVersion, Continue string }
		Items    []*wiretest.Obj
	}
	if err := json.Unmarshal([]byte(wiretest.Body(t, resp)), &page); err != nil {
		t.Fatal(err)
	}
	if page.Metadata.ResourceVersion != r5 || page.Metadata.Continue == "" || wiretest.State(page.Items) != "a=1 b=1" {
		t.Fatalf("first page: %+v", page)
	}

	// A change between pages is not in this list: every page reflects the first's revision.
	wiretest.Put(up.src, "a", "2")
	wiretest.Put(up.src, "f", "1")
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	ctx := context.Background()
	var got []string
	opts := informer.ListOptions{Continue: page.Metadata.Continue, Limit: 2}
	for {
		l, err := c.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s@%s more=%v", wiretest.State(l.Items), l.Revision, l.Continue != ""))
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	want := []string{"c=1 d=1@" + r5 + " more=true", "e=1@" + r5 + " more=false"}
	if !slices.Equal(got, want) {
		t.Fatalf("pages %q, want %q", got, want)
	}

	// A token of a finished list has expired: 410.
	_, err := c.List(ctx, informer.ListOptions{Continue: page.Metadata.Continue, Limit: 2})
	if !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("reused token: %v, want ErrExpired", err)
	}
	// A token from another instance of the server: 410. A malformed one: 400.
	_, err = c.List(ctx, informer.ListOptions{Continue: "zzz." + strings.SplitN(page.Metadata.Continue, ".", 2)[1]})
	if !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("token of another instance: %v, want ErrExpired", err)
	}
	var se *httpsource.StatusError
	_, err = c.List(ctx, informer.ListOptions{Continue: "garbage"})
	if !errors.As(err, &se) || se.Code != 400 || errors.Is(err, informer.ErrExpired) || errors.Is(err, informer.ErrRetryable) {
		t.Fatalf("malformed token: %v, want a 400 of no class", err)
	}
	// A list at least as fresh as a revision the server does not have yet: 410 (too large).
	_, err = c.List(ctx, informer.ListOptions{Revision: rev(srv, 1000)})
	if !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("too large revision: %v, want ErrExpired", err)
	}
}

func TestServerWatchFromRevision(t *testing.T) {
	up, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a", "b")
	wiretest.Put(up.src, "c", "1")
	wiretest.Put(up.src, "a", "2")
	up.src.Delete("b")
	waitRevision(t, ts.URL, srv, 2, 5)

	frame := func(typ string, n int64, o string) string {
		return fmt.Sprintf(`{"type":%q,"resourceVersion":%q,"object":%s}`, typ, rev(srv, n), o)
	}
	for _, tc := range []struct {
		from int64
		want []string
	}{
		{2, []string{
			frame("ADDED", 3, `{"name":"c","val":"1"}`),
			frame("MODIFIED", 4, `{"name":"a","val":"2"}`),
			frame("DELETED", 5, `{"name":"b","val":"1"}`),
		}},
		{4, []string{frame("DELETED", 5, `{"name":"b","val":"1"}`)}},
	} {
		st := wiretest.Open(t, fmt.Sprintf("%s?watch=1&resourceVersion=%s", ts.URL, rev(srv, tc.from)))
		if ct := st.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		var got []string
		for range tc.want {
			got = append(got, st.Line(t))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("from %d:\n%s\nwant\n%s", tc.from, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
		st.Close()
	}

	// Through the client: the same events, typed.
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	got := wiretest.Watched(t, c, informer.WatchOptions{Revision: rev(srv, 2)}, 3)
	want := []string{"Added c=1 @" + rev(srv, 3), "Modified a=2 @" + rev(srv, 4), "Deleted b=1 @" + rev(srv, 5)}
	if !slices.Equal(got, want) {
		t.Errorf("client events %q, want %q", got, want)
	}
}

func TestServerWatchExpired(t *testing.T) {
	up, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{HistoryLimit: 2}, "a")
	st := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion="+rev(srv, 1))
	for i := range 5 {
		wiretest.Put(up.src, "a", fmt.Sprint(i+2))
		st.Line(t) // one change at a time, so that this watcher never falls behind
	}
	st.Close()
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	for _, tc := range []struct {
		name, rev string
	}{
		{"compacted", rev(srv, 1)},
		{"older than the instance", "1"},
		{"too large", rev(srv, 100)},
	} {
		_, err := c.Watch(context.Background(), informer.WatchOptions{Revision: tc.rev})
		var se *httpsource.StatusError
		if !errors.Is(err, informer.ErrExpired) || !errors.As(err, &se) || se.Code != 410 || se.Reason != "Expired" {
			t.Errorf("%s: %v, want a 410 Expired", tc.name, err)
		}
	}
	// Within the window: fine.
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: rev(srv, 4)})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
}

// smallBuffer makes the server's side of the first connection buffer little, so that a
// client that does not read blocks the server's writes quickly.
type smallBuffer struct {
	net.Listener
	done atomic.Bool
}

func (l *smallBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && !l.done.Swap(true) {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// rawConn is a watch on a bare TCP connection: no client goroutines, and a receive buffer
// the test controls.
type rawConn struct {
	conn net.Conn
	resp *http.Response
	r    *bufio.Reader
}

// dialWatch is dialAs with no credential and no read deadline.
func dialWatch(t testing.TB, addr, query string, readBuffer int) *rawConn {
	t.Helper()
	rc := dialAs(t, addr, query, "", readBuffer)
	_ = rc.conn.SetReadDeadline(time.Time{})
	return rc
}

// twoWatchers serves a Server of up with opts, the first connection with a small send
// buffer, and opens two watches from its first change: the first on that connection, with
// readBuffer (0: the default) as its receive buffer; the second with default buffers.
func twoWatchers(t *testing.T, up *upstream, opts ServerOptions[*wiretest.Obj], readBuffer int) (srv *Server[string, *wiretest.Obj], first, second *rawConn) {
	t.Helper()
	srv = newServer(t, up, opts)
	ts := serveHTTP(t, srv, srv, func(ts *httptest.Server) { ts.Listener = &smallBuffer{Listener: ts.Listener} })
	addr := ts.Listener.Addr().String()
	from := "watch=1&resourceVersion=" + rev(srv, 1)
	first = dialWatch(t, addr, from, readBuffer)
	second = dialWatch(t, addr, from, 0)
	return srv, first, second
}

// Line returns the next line without its newline; "EOF" at the clean end of the stream.
func (rc *rawConn) Line(t testing.TB) string {
	t.Helper()
	return wiretest.ReadLine(t, rc.r)
}

// A watcher that does not read falls behind; once its next change has left the bounded
// history it is sent an ERROR event (410) and disconnected, and the server's memory stays
// bounded by the history, whatever the watcher does.
func TestServerSlowWatcherEvicted(t *testing.T) {
	up := newUpstream(t, memory.Options{HistoryLimit: 10})
	wiretest.Put(up.src, "a", "1")
	srv, slow, fast := twoWatchers(t, up, ServerOptions[*wiretest.Obj]{HistoryLimit: 20}, 0)

	// One change at a time, each read by the fast watcher before the next is made: the
	// fast watcher never falls behind, the slow one stalls once its buffers are full. The
	// first change is read by both, so that the slow one is known to be under way (its
	// goroutine could otherwise start after its first change left the history).
	const n = 300
	big := strings.Repeat("x", 4<<10)
	wiretest.Put(up.src, "k000", big)
	if l := slow.Line(t); !strings.Contains(l, `"name":"k000"`) {
		t.Fatalf("slow watcher, event 0: %.80s", l)
	}
	for i := range n {
		if i > 0 {
			wiretest.Put(up.src, fmt.Sprintf("k%03d", i), big)
		}
		if l := fast.Line(t); !strings.Contains(l, fmt.Sprintf(`"name":"k%03d"`, i)) {
			t.Fatalf("fast watcher, event %d: %.80s", i, l)
		}
	}
	if kept := srv.src.Revision() - srv.src.CompactedRevision(); kept > 20 {
		t.Errorf("the server keeps %d changes, want at most HistoryLimit 20", kept)
	}
	// The slow one: the changes it had buffered before it stalled, in order, then ERROR.
	got := 1
	for {
		l := slow.Line(t)
		if strings.HasPrefix(l, `{"type":"ERROR"`) {
			if !strings.Contains(l, `"code":410`) || !strings.Contains(l, `"reason":"Expired"`) || !strings.Contains(l, "fell behind") {
				t.Errorf("ERROR event: %s", l)
			}
			break
		}
		if want := fmt.Sprintf(`{"type":"ADDED","resourceVersion":"%s"`, rev(srv, int64(got+2))); !strings.HasPrefix(l, want) {
			t.Fatalf("slow watcher, event %d: %.80s, want %s", got, l, want)
		}
		got++
	}
	t.Logf("the slow watcher received %d of %d changes before its ERROR event", got, n)
	if got >= n-20 {
		t.Errorf("the slow watcher received %d events before the ERROR; want it to have stalled early", got)
	}
	if l := slow.Line(t); l != "EOF" {
		t.Errorf("after the ERROR: %.80s, want the end of the stream", l)
	}
	if e := srv.Stats().Evicted; e != 1 {
		t.Errorf("Stats.Evicted = %d, want 1", e)
	}
}

// Bookmarks at the interval, on the server's clock, only for watchers that allow them.
func TestServerBookmarks(t *testing.T) {
	fake := clock.NewFake(time.Unix(1000, 0))
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{BookmarkInterval: 10 * time.Second, Clock: fake}, "a")
	with := wiretest.Open(t, ts.URL+"?watch=1&allowWatchBookmarks=true&resourceVersion="+rev(srv, 1))
	without := wiretest.Open(t, ts.URL+"?watch=1&timeoutSeconds=15&resourceVersion="+rev(srv, 1))
	// Each watch arms a timer: the bookmark timer and the timeout.
	if !fake.WaitForWaiters(2, nil) {
		t.Fatal("no timers")
	}
	fake.Step(10 * time.Second)
	want := fmt.Sprintf(`{"type":"BOOKMARK","resourceVersion":"%[1]s","object":{"metadata":{"resourceVersion":"%[1]s"}}}`, rev(srv, 1))
	if got := with.Line(t); got != want {
		t.Errorf("bookmark %s, want %s", got, want)
	}
	fake.Step(5 * time.Second) // the second watch's timeout: it ends cleanly, with no bookmark
	if got := without.Line(t); got != "EOF" {
		t.Errorf("watch without bookmarks: %s, want the clean end of the timeout", got)
	}
}

// A watch without resourceVersion starts with the current state (Kubernetes' semantics);
// sendInitialEvents=true adds the annotated bookmark that ends it.
func TestServerWatchInitialEvents(t *testing.T) {
	up, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a", "b")
	r2 := rev(srv, 2)
	plain := wiretest.Open(t, ts.URL+"?watch=1")
	stream := wiretest.Open(t, ts.URL+"?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
	wiretest.Put(up.src, "c", "1")
	r3 := rev(srv, 3)
	add := func(n, r string) string {
		return fmt.Sprintf(`{"type":"ADDED","resourceVersion":%q,"object":{"name":%q,"val":"1"}}`, r, n)
	}
	for _, tc := range []struct {
		st   *wiretest.Stream
		want []string
	}{
		{plain, []string{add("a", r2), add("b", r2), add("c", r3)}},
		{stream, []string{add("a", r2), add("b", r2),
			fmt.Sprintf(`{"type":"BOOKMARK","resourceVersion":%[1]q,"object":{"metadata":{"resourceVersion":%[1]q,"annotations":{"k8s.io/initial-events-end":"true"}}}}`, r2),
			add("c", r3)}},
	} {
		var got []string
		for range tc.want {
			got = append(got, tc.st.Line(t))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// Server-Sent Events on request.
func TestServerSSE(t *testing.T) {
	up, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a")
	resp := wiretest.Get(t, nil, ts.URL+"?watch=1&resourceVersion="+rev(srv, 1), http.Header{"Accept": {"text/event-stream"}})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	wiretest.Put(up.src, "b", "1")
	r := bufio.NewReader(resp.Body)
	want := fmt.Sprintf("data: {\"type\":\"ADDED\",\"resourceVersion\":%q,\"object\":{\"name\":\"b\",\"val\":\"1\"}}\n\n", rev(srv, 2))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
}

// A client that starts paged list after paged list loses its own oldest snapshots, never
// another client's: a paged informer still gets its second page.
func TestServerPagedListsPerClient(t *testing.T) {
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{PagedLists: 4, PagedListsPerClient: 3, ServeOptions: ServeOptions{AuthorizeClient: byToken}}, "a", "b", "c")
	hc := &http.Client{}
	first := func(who string) string {
		t.Helper()
		resp := wiretest.Get(t, hc, ts.URL+"?limit=1", http.Header{"Authorization": {"Bearer " + who}})
		b := wiretest.Body(t, resp)
		_, tok, ok := strings.Cut(b, `"continue":"`)
		if resp.StatusCode != 200 || !ok {
			t.Fatalf("%s's first page: %d %s", who, resp.StatusCode, b)
		}
		return tok[:strings.IndexByte(tok, '"')]
	}
	next := func(who, tok string) (int, string) {
		t.Helper()
		resp := wiretest.Get(t, hc, ts.URL+"?limit=1&continue="+tok, http.Header{"Authorization": {"Bearer " + who}})
		return resp.StatusCode, wiretest.Body(t, resp)
	}
	bob := first("bob")
	var alice []string
	for range 200 { // a limit=1 loop on one connection
		alice = append(alice, first("alice"))
	}
	carol := first("carol") // the table is full: alice, who holds the most, loses one
	for _, c := range []struct{ who, tok string }{{"bob", bob}, {"carol", carol}} {
		if code, b := next(c.who, c.tok); code != 200 || !strings.Contains(b, `"name":"b"`) {
			t.Errorf("%s's second page after alice's 200 lists: %d %s", c.who, code, b)
		}
	}
	if code, _ := next("alice", alice[0]); code != 410 {
		t.Errorf("alice's first list, long evicted by her own: %d, want 410", code)
	}
	if code, b := next("alice", alice[len(alice)-1]); code != 200 || !strings.Contains(b, `"name":"b"`) {
		t.Errorf("alice's newest list: %d %s", code, b)
	}
	// A page asked for again (a client retrying it) is served again; once the last page
	// is served, the list is finished.
	dave := first("dave")
	code, b := next("dave", dave)
	_, t2, _ := strings.Cut(b, `"continue":"`)
	t2 = t2[:max(strings.IndexByte(t2, '"'), 0)]
	if code != 200 || !strings.Contains(b, `"name":"b"`) || t2 == "" {
		t.Fatalf("dave's second page: %d %s", code, b)
	}
	if code, b := next("dave", dave); code != 200 || !strings.Contains(b, `"name":"b"`) || !strings.Contains(b, t2) {
		t.Errorf("dave's second page again: %d %s", code, b)
	}
	if code, b := next("dave", t2); code != 200 || !strings.Contains(b, `"name":"c"`) || strings.Contains(b, `"continue"`) {
		t.Errorf("dave's last page: %d %s", code, b)
	}
	if code, _ := next("dave", t2); code != 410 {
		t.Errorf("a finished list's token: %d, want 410", code)
	}
	if n := srv.Stats().Lists; n != 209 {
		t.Errorf("Stats.Lists = %d, want 209", n)
	}
}

// Behind a round-robin balancer the pages of one list go to different replicas: a
// continue token of one replica is served by another at the same upstream revision.
func TestPagedListAcrossReplicas(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	for i := range 10 {
		wiretest.Put(src, fmt.Sprintf("k%02d", i), "v")
	}
	up := startUpstream(t, src, "upstream", true)
	_, a, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
	_, b, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
	ca, cb := newTestClient(t, a.URL, httpsource.ClientOptions[*wiretest.Obj]{}), newTestClient(t, b.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	var got []string
	l, err := ca.List(context.Background(), informer.ListOptions{Limit: 4})
	for i := 0; err == nil; i++ {
		for _, o := range l.Items {
			got = append(got, o.Name)
		}
		if l.Continue == "" {
			break
		}
		next := ca
		if i%2 == 0 {
			next = cb
		}
		l, err = next.List(context.Background(), informer.ListOptions{Limit: 4, Continue: l.Continue})
	}
	if err != nil {
		t.Fatalf("a paged list across replicas: %v after %v", err, got)
	}
	if s := strings.Join(got, ","); s != "k00,k01,k02,k03,k04,k05,k06,k07,k08,k09" {
		t.Fatalf("a paged list across replicas gave %s", s)
	}
}
