package fanout

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/testkit"
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

func TestServerQueryValidation(t *testing.T) {
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a")
	for _, q := range []string{
		"labelSelector=x",
		"limit=-1",
		"limit=ten",
		"limit=1&limit=2",
		"watch=maybe",
		"watch=1&limit=5",
		"watch=1&continue=abc",
		"continue=",
		"continue=abc&resourceVersion=5",
		"timeoutSeconds=-3",
		"timeoutSeconds=1e3",
		"allowWatchBookmarks=yes",
		"sendInitialEvents=true",
		"sendInitialEvents=perhaps&watch=1",
		"resourceVersionMatch=Exact&resourceVersion=1",
		"resourceVersionMatch=Newest",
		"resourceVersion=abc",
		"resourceVersion=007",
		"watch=1&resourceVersion=-5",
		"%zz",
	} {
		resp := wiretest.Get(t, nil, ts.URL+"?"+q, nil)
		b := wiretest.Body(t, resp)
		var se struct {
			Kind, Status, Reason, Message string
			Code                          int
		}
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(b), &se) != nil ||
			se.Kind != "Status" || se.Status != "Failure" || se.Code != 400 || se.Reason != "BadRequest" || se.Message == "" {
			t.Errorf("?%s: %d %s", q, resp.StatusCode, b)
		}
	}
	// Not GET: 405. Only protobuf acceptable: 406.
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if wiretest.Body(t, resp); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	resp = wiretest.Get(t, nil, ts.URL, http.Header{"Accept": {"application/vnd.kubernetes.protobuf"}})
	if wiretest.Body(t, resp); resp.StatusCode != 406 {
		t.Errorf("protobuf only: %d", resp.StatusCode)
	}
	if n := srv.Stats().BadRequests; n != 22 {
		t.Errorf("Stats.BadRequests = %d, want 22", n)
	}
}

func TestServerAuthorize(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		Authorize: func(r *http.Request) error {
			switch r.Header.Get("Authorization") {
			case "":
				return fmt.Errorf("no token: %w", ErrUnauthorized)
			case "Bearer good":
				return nil
			case "Bearer reader":
				return fmt.Errorf("reader may not watch: %w", ErrForbidden)
			}
			return errors.New("unknown token")
		},
	}})
	for _, tc := range []struct {
		token  string
		code   int
		reason string
	}{
		{"", 401, "Unauthorized"},
		{"Bearer reader", 403, "Forbidden"},
		{"Bearer bogus", 403, "Forbidden"},
		{"Bearer good", 200, ""},
	} {
		c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{PrepareRequest: func(r *http.Request) error {
			if tc.token != "" {
				r.Header.Set("Authorization", tc.token)
			}
			return nil
		}})
		_, err := c.List(context.Background(), informer.ListOptions{})
		var se *httpsource.StatusError
		switch {
		case tc.code == 200 && err != nil:
			t.Errorf("%q: %v", tc.token, err)
		case tc.code != 200 && (!errors.As(err, &se) || se.Code != tc.code || se.Reason != tc.reason):
			t.Errorf("%q: %v, want %d %s", tc.token, err, tc.code, tc.reason)
		case tc.code != 200 && (errors.Is(err, informer.ErrRetryable) || errors.Is(err, informer.ErrExpired)):
			t.Errorf("%q: %v is classified; a refusal must not be", tc.token, err)
		}
	}
	if n := srv.Stats().Denied; n != 3 {
		t.Errorf("Stats.Denied = %d, want 3", n)
	}
}

// Before the informer has delivered its initial state, the server answers 503 with a
// Retry-After, which a client classifies as ErrUnavailable.
func TestServerNotSynced(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	inf, err := informer.New(src, informer.Options[string, *wiretest.Obj]{Key: wiretest.ObjKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(inf, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{RetryAfter: 2500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	_, err = newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).List(context.Background(), informer.ListOptions{})
	if d, _ := informer.RetryAfterOf(err); !errors.Is(err, informer.ErrUnavailable) || d != 3*time.Second {
		t.Errorf("%v (retry after %v), want ErrUnavailable after 3s", err, d)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

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
