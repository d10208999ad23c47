package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// teamOf is the test objects' "team": their value up to the first colon
// ("payments:1" is on team payments).
func teamOf(o *wiretest.Obj) string {
	team, _, _ := strings.Cut(o.Val, ":")
	return team
}

// testIndexes are the indexes of every test upstream informer: "team" and "initial" (the
// name's first letter). The team index function fails for the value "fail" and panics
// for "panic": the informer refuses such an object.
func testIndexes() informer.Indexers[*wiretest.Obj] {
	return informer.Indexers[*wiretest.Obj]{
		"team": informer.IndexBy(func(o *wiretest.Obj) (string, error) {
			switch o.Val {
			case "fail":
				return "", errors.New("no team")
			case "panic":
				panic("team of a panic")
			}
			return teamOf(o), nil
		}),
		"initial": informer.IndexBy(func(o *wiretest.Obj) (string, error) { return o.Name[:1], nil }),
	}
}

// filterOptions serves the upstream informer's indexes "team" and "initial" as filters.
func filterOptions() ServerOptions[*wiretest.Obj] {
	return ServerOptions[*wiretest.Obj]{Filters: []string{"team", "initial"}}
}

// serveFiltered serves a new upstream with filterOptions and a history of historyLimit
// changes.
func serveFiltered(t *testing.T, historyLimit int) (*upstream, *Server[string, *wiretest.Obj], *httptest.Server) {
	t.Helper()
	up := newUpstream(t, memory.Options{})
	opts := filterOptions()
	opts.HistoryLimit = historyLimit
	srv, ts := serve(t, up, opts)
	return up, srv, ts
}

// openBounded opens a watch whose reads fail after wiretest.WaitTimeout rather than block: its
// body is closed then.
func openBounded(t *testing.T, url string) *wiretest.Stream {
	t.Helper()
	st := wiretest.Open(t, url)
	stop := time.AfterFunc(wiretest.WaitTimeout, st.Close)
	t.Cleanup(func() { stop.Stop() })
	return st
}

// step makes one change upstream and waits until the server holds it at log revision n.
func step(t *testing.T, srv *Server[string, *wiretest.Obj], n int64, change func()) {
	t.Helper()
	change()
	wiretest.Eventually(t, fmt.Sprintf("the server to hold log revision %d", n), func() bool { return srv.Revision() == rev(srv, n) })
}

func TestFilteredWatch_MovesInAndOutAreAddedAndDeleted(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	srv, ts := serve(t, up, filterOptions())
	watch := func(team string) *wiretest.Stream {
		return openBounded(t, fmt.Sprintf("%s?watch=1&index=team&value=%s&resourceVersion=%s", ts.URL, team, rev(srv, 0)))
	}
	payments, search, all := watch("payments"), watch("search"), openBounded(t, ts.URL+"?watch=1&resourceVersion="+rev(srv, 0))
	wiretest.Eventually(t, "the watches to open", func() bool { return srv.Stats().OpenWatches == 3 })

	changes := []func(){
		func() { wiretest.Put(up.src, "a", "payments:1") },
		func() { wiretest.Put(up.src, "b", "search:1") },
		func() { wiretest.Put(up.src, "a", "payments:2") },
		func() { wiretest.Put(up.src, "a", "search:2") },
		func() { wiretest.Put(up.src, "b", "payments:3") },
		func() { wiretest.Put(up.src, "c", "other:1") },
		func() { up.src.Delete("b") },
		func() { wiretest.Put(up.src, "a", "search:3") },
		func() { wiretest.Put(up.src, "z", "payments:9") },
	}
	for i, change := range changes {
		step(t, srv, int64(i+1), change)
	}
	frame := func(typ string, n int64, name, val string) string {
		return fmt.Sprintf(`{"type":%q,"resourceVersion":%q,"object":{"name":%q,"val":%q}}`, typ, rev(srv, n), name, val)
	}
	for _, tc := range []struct {
		name string
		st   *wiretest.Stream
		want []string
	}{
		{"payments", payments, []string{
			frame("ADDED", 1, "a", "payments:1"),
			frame("MODIFIED", 3, "a", "payments:2"),
			frame("DELETED", 4, "a", "payments:2"), // a moved to search: the last state payments served
			frame("ADDED", 5, "b", "payments:3"),   // b moved in from search
			frame("DELETED", 7, "b", "payments:3"),
			frame("ADDED", 9, "z", "payments:9"),
		}},
		{"search", search, []string{
			frame("ADDED", 2, "b", "search:1"),
			frame("ADDED", 4, "a", "search:2"), // a moved in from payments
			frame("DELETED", 5, "b", "search:1"),
			frame("MODIFIED", 8, "a", "search:3"),
		}},
		{"unfiltered", all, []string{
			frame("ADDED", 1, "a", "payments:1"),
			frame("ADDED", 2, "b", "search:1"),
			frame("MODIFIED", 3, "a", "payments:2"),
			frame("MODIFIED", 4, "a", "search:2"),
			frame("MODIFIED", 5, "b", "payments:3"),
			frame("ADDED", 6, "c", "other:1"),
			frame("DELETED", 7, "b", "payments:3"),
			frame("MODIFIED", 8, "a", "search:3"),
			frame("ADDED", 9, "z", "payments:9"),
		}},
	} {
		var got []string
		for range tc.want {
			got = append(got, tc.st.Line(t))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s watcher:\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}

	// Resumed from a revision: the same filtered events after it.
	resumed := openBounded(t, fmt.Sprintf("%s?watch=1&index=team&value=payments&resourceVersion=%s", ts.URL, rev(srv, 4)))
	for _, want := range []string{frame("ADDED", 5, "b", "payments:3"), frame("DELETED", 7, "b", "payments:3"), frame("ADDED", 9, "z", "payments:9")} {
		if got := resumed.Line(t); got != want {
			t.Errorf("resumed from 4: %s, want %s", got, want)
		}
	}
	// The last event of a value is sent at once, though it is not the server's newest.
	search8 := openBounded(t, fmt.Sprintf("%s?watch=1&index=team&value=search&resourceVersion=%s", ts.URL, rev(srv, 5)))
	if got, want := search8.Line(t), frame("MODIFIED", 8, "a", "search:3"); got != want {
		t.Errorf("resumed from 5: %s, want %s", got, want)
	}
	// Without a revision: the value's objects, then its changes.
	initial := openBounded(t, ts.URL+"?watch=1&index=team&value=search")
	if got, want := initial.Line(t), frame("ADDED", 9, "a", "search:3"); got != want {
		t.Errorf("initial event %s, want %s", got, want)
	}
	step(t, srv, 10, func() { wiretest.Put(up.src, "y", "search:1") })
	if got, want := initial.Line(t), frame("ADDED", 10, "y", "search:1"); got != want {
		t.Errorf("after the initial events: %s, want %s", got, want)
	}
}

func TestFilteredList_ServedFromTheBucket(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	for i, team := range []string{"payments", "search", "payments", "other", "payments"} {
		wiretest.Put(up.src, fmt.Sprintf("k%d", i), team+":1")
	}
	srv, ts := serve(t, up, filterOptions())
	type page struct {
		Metadata struct{ ResourceVersion, Continue string }
		Items    []*wiretest.Obj
	}
	list := func(query string) page {
		t.Helper()
		resp := wiretest.Get(t, nil, ts.URL+"?"+query, nil)
		b := wiretest.Body(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET ?%s: %d %s", query, resp.StatusCode, b)
		}
		var p page
		if err := json.Unmarshal([]byte(b), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := list("index=team&value=payments")
	if got := wiretest.State(p.Items); got != "k0=payments:1 k2=payments:1 k4=payments:1" || p.Metadata.ResourceVersion != rev(srv, 5) || p.Metadata.Continue != "" {
		t.Fatalf("filtered list: %s at %s (continue %q)", got, p.Metadata.ResourceVersion, p.Metadata.Continue)
	}
	if p := list("index=team&value=nobody"); len(p.Items) != 0 || p.Metadata.ResourceVersion != rev(srv, 5) {
		t.Fatalf("list of a value without objects: %+v", p)
	}
	// A streaming list: the bucket as ADDED events in key order, then the annotated bookmark.
	st := openBounded(t, ts.URL+"?watch=1&index=team&value=payments&sendInitialEvents=true&allowWatchBookmarks=true")
	r5 := rev(srv, 5)
	for _, want := range []string{
		fmt.Sprintf(`{"type":"ADDED","resourceVersion":%q,"object":{"name":"k0","val":"payments:1"}}`, r5),
		fmt.Sprintf(`{"type":"ADDED","resourceVersion":%q,"object":{"name":"k2","val":"payments:1"}}`, r5),
		fmt.Sprintf(`{"type":"ADDED","resourceVersion":%q,"object":{"name":"k4","val":"payments:1"}}`, r5),
		fmt.Sprintf(`{"type":"BOOKMARK","resourceVersion":%[1]q,"object":{"metadata":{"resourceVersion":%[1]q,"annotations":{"k8s.io/initial-events-end":"true"}}}}`, r5),
	} {
		if got := st.Line(t); got != want {
			t.Errorf("streaming list: %s, want %s", got, want)
		}
	}
	// Paged: every page is the bucket at the first page's revision.
	first := list("index=team&value=payments&limit=2")
	step(t, srv, 6, func() { wiretest.Put(up.src, "k1", "payments:2") })
	second := list("index=team&value=payments&limit=2&continue=" + first.Metadata.Continue)
	if got := wiretest.State(first.Items) + " | " + wiretest.State(second.Items); got != "k0=payments:1 k2=payments:1 | k4=payments:1" || second.Metadata.Continue != "" || second.Metadata.ResourceVersion != rev(srv, 5) {
		t.Fatalf("pages %s, second at %s", got, second.Metadata.ResourceVersion)
	}
	if p := list("index=team&value=payments"); wiretest.State(p.Items) != "k0=payments:1 k1=payments:2 k2=payments:1 k4=payments:1" || p.Metadata.ResourceVersion != rev(srv, 6) {
		t.Fatalf("after k1 moved in: %s at %s", wiretest.State(p.Items), p.Metadata.ResourceVersion)
	}
}

func TestFilter_BadRequests(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	srv, ts := serve(t, up, filterOptions())
	h := httptest.NewServer(NewPassThrough[*wiretest.Obj](up.src, PassThroughOptions[*wiretest.Obj]{}))
	t.Cleanup(h.Close)
	for _, tc := range []struct {
		url, query, want string
	}{
		{ts.URL, "index=owner&value=x", `unknown filter index \"owner\": this server's filter indexes are initial, team`},
		{ts.URL, "watch=1&index=owner&value=x", `unknown filter index \"owner\": this server's filter indexes are initial, team`},
		{ts.URL, "index=team", `index=\"team\" needs value=, the value to filter by`},
		{ts.URL, "value=x", `value=\"x\" needs index=, the name of the filter index`},
		{ts.URL, "index=&value=x", `index is empty`},
		{ts.URL, "index=team&value=" + strings.Repeat("v", maxFilterValue+1), `longer than 1024 bytes`},
		{h.URL, "index=team&value=x", `unknown filter index \"team\": this server has none`},
	} {
		got := wiretest.Body(t, wiretest.Get(t, nil, tc.url+"?"+tc.query, nil))
		if !strings.Contains(got, `"code":400`) || !strings.Contains(got, tc.want) {
			t.Errorf("?%.40s: %s, want a 400 saying %s", tc.query, got, tc.want)
		}
	}
	if n := srv.Stats().BadRequests; n != 6 {
		t.Errorf("BadRequests = %d, want 6", n)
	}
	// The Client's errors say it once.
	_, err := httpsource.NewClient[*wiretest.Obj](ts.URL, httpsource.ClientOptions[*wiretest.Obj]{Filter: httpsource.Filter{Value: "x"}})
	if err == nil || err.Error() != `httpsource: NewClient: Filter.Value "x" without Filter.Index` {
		t.Errorf("NewClient with a value and no index: %v", err)
	}
	for _, tc := range []struct {
		filters []string
		want    string
	}{
		{[]string{""}, "fanout: NewServer: ServerOptions.Filters has an empty name: name one of the informer's indexes"},
		{[]string{"team", "team"}, `fanout: NewServer: ServerOptions.Filters names "team" twice`},
		{[]string{"owner"}, `fanout: NewServer: ServerOptions.Filters of informer "upstream": informer: no such index: "owner" (the informer's indexes: initial, team): declare it in informer.Options.Indexers`},
	} {
		if _, err := NewServer(up.Inf, ServerOptions[*wiretest.Obj]{Filters: tc.filters}); err == nil || err.Error() != tc.want {
			t.Errorf("NewServer: %v, want %s", err, tc.want)
		}
	}
}

// An object the informer's index function fails or panics on is refused by the informer
// (reported to its error handler): it keeps its last state there, and so in the server's
// filters, and its filtered watchers see nothing of the refused change.
func TestFilter_ObjectTheInformerCannotIndexKeepsItsState(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	srv, ts := serve(t, up, filterOptions())
	st := openBounded(t, fmt.Sprintf("%s?watch=1&index=team&value=payments&resourceVersion=%s", ts.URL, rev(srv, 0)))
	refused := func(put func()) {
		t.Helper()
		n := len(up.Rec.Errors())
		put()
		wiretest.Eventually(t, "the informer to refuse the object", func() bool { return len(up.Rec.Errors()) > n })
	}
	step(t, srv, 1, func() { wiretest.Put(up.src, "a", "payments:1") })
	refused(func() { wiretest.Put(up.src, "a", "fail") })
	step(t, srv, 2, func() { wiretest.Put(up.src, "b", "payments:1") })
	refused(func() { wiretest.Put(up.src, "b", "panic") })
	step(t, srv, 3, func() { wiretest.Put(up.src, "a", "payments:2") })
	frame := func(typ string, n int64, name, val string) string {
		return fmt.Sprintf(`{"type":%q,"resourceVersion":%q,"object":{"name":%q,"val":%q}}`, typ, rev(srv, n), name, val)
	}
	want := []string{
		frame("ADDED", 1, "a", "payments:1"), frame("ADDED", 2, "b", "payments:1"), frame("MODIFIED", 3, "a", "payments:2"),
	}
	for _, w := range want {
		if got := st.Line(t); got != w {
			t.Errorf("got %s, want %s", got, w)
		}
	}
	if n := srv.Stats().IndexErrors; n != 0 {
		t.Errorf("IndexErrors = %d, want 0: the informer refused the objects", n)
	}
	got := teamKeys(srv, "payments")
	if want := []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("payments holds %v, want %v", got, want)
	}
}

// teamKeys returns the keys the server's filter index team holds under value.
func teamKeys(srv *Server[string, *wiretest.Obj], value string) []string {
	var keys []string
	if tree, _ := srv.mirror.Snapshot(valueFilter{Index: "team", Value: value}); tree != nil {
		tree.Ascend(func(k string, _ *record[string]) bool { keys = append(keys, k); return true })
	}
	return keys
}

// TestFilteredClient_CacheIsTheMatchingSubset runs a random, bounded writer against the
// upstream while filtered clients mirror the server, with watches cut short often
// (MaxWatchDuration) so that they resume from their revisions, and a short history so
// that some resumes are too old and relist. Each filtered cache must end as exactly the
// matching subset of the source.
func TestFilteredClient_CacheIsTheMatchingSubset(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	opts := filterOptions()
	opts.HistoryLimit = 32
	opts.MaxWatchDuration = 40 * time.Millisecond
	_, ts := serve(t, up, opts)
	teams := []string{"payments", "search", "ads"}
	clients := map[string]*wiretest.Mirror{}
	for _, team := range teams {
		c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{Filter: httpsource.Filter{Index: "team", Value: team}, StreamingList: team == "ads"})
		clients[team] = wiretest.NewMirror(t, c, "filtered-"+team, nil)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		name := fmt.Sprintf("k%02d", rng.IntN(40))
		if rng.IntN(5) == 0 {
			up.src.Delete(name)
		} else {
			wiretest.Put(up.src, name, fmt.Sprintf("%s:%d", teams[rng.IntN(len(teams))], i))
		}
	}
	for _, team := range teams {
		wiretest.Converge(t, clients[team], func() string {
			var want []*wiretest.Obj
			for _, o := range up.src.Items() {
				if teamOf(o) == team {
					want = append(want, o)
				}
			}
			return wiretest.State(want)
		})
	}
}

// gatedTransport holds every new connection, and so every request, while closed.
type gatedTransport struct {
	mu    sync.Mutex
	gate  chan struct{} // nil: open
	once  sync.Once
	t     *http.Transport
	conns []net.Conn
}

// cut closes every connection dialed so far.
func (g *gatedTransport) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

func (g *gatedTransport) close() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedTransport) open() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

// RoundTrip sends r on a transport of its own whose new connections wait for the gate:
// gating at the dial, not at RoundTrip, also holds the request net/http retries by itself
// on a new connection when its connection is closed before the response (a watch cut
// before its headers came), which slipped past a gate at RoundTrip.
func (g *gatedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	g.once.Do(func() {
		g.t = http.DefaultTransport.(*http.Transport).Clone()
		dial := g.t.DialContext
		g.t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			g.mu.Lock()
			gate := g.gate
			g.mu.Unlock()
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			c, err := dial(ctx, network, addr)
			if err == nil {
				g.mu.Lock()
				g.conns = append(g.conns, c)
				g.mu.Unlock()
			}
			return c, err
		}
	})
	return g.t.RoundTrip(r)
}

// TestFilteredClient_RelistsWhenItsRevisionIsCompacted: a filtered client cut off while
// its revision leaves the history watches again, is answered 410, lists its filter again
// and converges on the matching subset.
func TestFilteredClient_RelistsWhenItsRevisionIsCompacted(t *testing.T) {
	up, srv, ts := serveFiltered(t, 4)
	step(t, srv, 1, func() { wiretest.Put(up.src, "a", "payments:1") })
	step(t, srv, 2, func() { wiretest.Put(up.src, "b", "search:1") })
	gate := &gatedTransport{}
	t.Cleanup(func() {
		if gate.t != nil {
			gate.t.CloseIdleConnections()
		}
	})
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{HTTPClient: &http.Client{Transport: gate}, Filter: httpsource.Filter{Index: "team", Value: "payments"}})
	d := wiretest.NewMirror(t, c, "filtered", nil)
	wiretest.Converge(t, d, func() string { return "a=payments:1" })
	wiretest.Eventually(t, "the client's watch to open", func() bool { return srv.Stats().OpenWatches == 1 })
	lists := srv.Stats().Lists

	gate.close()
	gate.cut()
	wiretest.Eventually(t, "the client's watch to end", func() bool { return srv.Stats().OpenWatches == 0 })
	step(t, srv, 3, func() { wiretest.Put(up.src, "c", "payments:1") })
	step(t, srv, 4, func() { up.src.Delete("a") })
	for i := range 6 {
		step(t, srv, int64(5+i), func() { wiretest.Put(up.src, "b", fmt.Sprint("search:", i)) })
	}
	gate.open()
	wiretest.Converge(t, d, func() string { return "c=payments:1" })
	if got := srv.Stats().Lists; got != lists+1 {
		t.Errorf("the server served %d lists after the cut, want 1 (the filtered relist); calls %q errors %v", got-lists, d.Rec.Calls(), d.Rec.Errors())
	}
	got := d.Rec.Calls()
	for i, call := range got { // the relist's calls, in whatever order, marked or not
		got[i] = strings.NewReplacer("add*", "add ", "delete?", "delete ").Replace(call)
	}
	slices.Sort(got[1:])
	if want := []string{"add a=payments:1", "add c=payments:1", "delete a=payments:1"}; !slices.Equal(got, want) {
		t.Errorf("handler calls %q, want %q", got, want)
	}
}

// TestFilteredWatch_FromACompactedOrFutureRevision: 410 either way, as for an unfiltered
// watch.
func TestFilteredWatch_FromACompactedOrFutureRevision(t *testing.T) {
	up, srv, ts := serveFiltered(t, 2)
	for i := range 5 {
		step(t, srv, int64(i+1), func() { wiretest.Put(up.src, "a", fmt.Sprint("payments:", i)) })
	}
	for _, from := range []int64{1, 9} {
		got := wiretest.Body(t, wiretest.Get(t, nil, fmt.Sprintf("%s?watch=1&index=team&value=payments&resourceVersion=%s", ts.URL, rev(srv, from)), nil))
		if !strings.Contains(got, `"code":410`) {
			t.Errorf("from %d: %s, want 410", from, got)
		}
	}
	st := openBounded(t, fmt.Sprintf("%s?watch=1&index=team&value=payments&resourceVersion=%s", ts.URL, rev(srv, 4)))
	if got, want := st.Line(t), fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q,"object":{"name":"a","val":"payments:4"}}`, rev(srv, 5)); got != want {
		t.Errorf("from 4: %s, want %s", got, want)
	}
}

// TestFilter_ValuesAreForgotten: a value with no object, history or watch is dropped, so
// that churned values do not accumulate.
func TestFilter_ValuesAreForgotten(t *testing.T) {
	up, srv, ts := serveFiltered(t, 3)
	for i := range 20 {
		step(t, srv, int64(i+1), func() { wiretest.Put(up.src, "a", fmt.Sprint("team", i, ":1")) })
	}
	st := openBounded(t, ts.URL+"?watch=1&index=team&value=nobody&resourceVersion="+rev(srv, 20))
	wiretest.Eventually(t, "the watch to open", func() bool { return srv.Stats().OpenWatches == 1 })
	values := func() []string {
		h := srv.mirror.filters
		h.mu.Lock()
		defer h.mu.Unlock()
		var vs []string
		for v := range h.indexes[1].values { // "team"
			vs = append(vs, v)
		}
		slices.Sort(vs)
		return vs
	}
	if got, want := values(), []string{"nobody", "team16", "team17", "team18", "team19"}; !slices.Equal(got, want) {
		t.Errorf("values %q, want %q", got, want)
	}
	st.Close()
	wiretest.Eventually(t, "the watch to close", func() bool { return srv.Stats().OpenWatches == 0 })
	if got, want := values(), []string{"team16", "team17", "team18", "team19"}; !slices.Equal(got, want) {
		t.Errorf("values after the watch closed %q, want %q", got, want)
	}
}

// TestFilteredWatch_BookmarksAndTimeout: an idle filtered watcher that allows bookmarks
// gets one at the server's newest revision, past changes of other values, so that it
// resumes from there; a timeout ends a filtered watch cleanly. Both on the server's clock.
func TestFilteredWatch_BookmarksAndTimeout(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "payments:1")
	wiretest.Put(up.src, "b", "search:1")
	fake := clock.NewFake(time.Unix(1000, 0))
	opts := filterOptions()
	opts.BookmarkInterval, opts.Clock = 10*time.Second, fake
	srv, ts := serve(t, up, opts)
	with := openBounded(t, fmt.Sprintf("%s?watch=1&index=team&value=payments&allowWatchBookmarks=true&resourceVersion=%s", ts.URL, rev(srv, 2)))
	without := openBounded(t, fmt.Sprintf("%s?watch=1&index=team&value=payments&timeoutSeconds=15&resourceVersion=%s", ts.URL, rev(srv, 2)))
	if !fake.WaitForWaiters(2, nil) { // the bookmark timer and the timeout
		t.Fatal("no timers")
	}
	step(t, srv, 3, func() { wiretest.Put(up.src, "b", "search:2") })
	fake.Step(10 * time.Second)
	want := fmt.Sprintf(`{"type":"BOOKMARK","resourceVersion":"%[1]s","object":{"metadata":{"resourceVersion":"%[1]s"}}}`, rev(srv, 3))
	if got := with.Line(t); got != want {
		t.Errorf("bookmark %s, want %s", got, want)
	}
	fake.Step(5 * time.Second)
	if got := without.Line(t); got != "EOF" {
		t.Errorf("filtered watch at its timeout: %s, want its clean end", got)
	}
}

// TestFilteredWatch_FallsBehindTheHistory: a filtered watch whose next event leaves the
// history ends with an error matching informer.ErrExpired (served as an ERROR 410 frame),
// after the events it could still deliver.
func TestFilteredWatch_FallsBehindTheHistory(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	inf, err := informer.New[string, *wiretest.Obj](unordered{src}, informer.Options[string, *wiretest.Obj]{Key: wiretest.ObjKey, Indexers: testIndexes()})
	if err != nil {
		t.Fatal(err)
	}
	opts := filterOptions()
	opts.HistoryLimit = 2
	srv, err := NewServer(inf, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	w, err := srv.mirror.filters.Watch(context.Background(), valueFilter{Index: "team", Value: "payments"}, informer.WatchOptions{Revision: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	srv.mirror.put(&wiretest.Obj{Name: "a", Val: "payments:1"})
	if ev, err := w.Next(); err != nil || ev.Type != informer.Added || ev.Revision != "1" || string(ev.Object.json) != `{"name":"a","val":"payments:1"}` {
		t.Fatalf("first event %v %q %v", ev.Type, ev.Revision, err)
	}
	for i := range 4 {
		srv.mirror.put(&wiretest.Obj{Name: "a", Val: fmt.Sprint("payments:", i+2)})
	}
	_, err = w.Next()
	if !errors.Is(err, informer.ErrExpired) || !strings.HasPrefix(err.Error(), `fanout: filtered watch of team="payments": its next event has left the server's history: `) {
		t.Fatalf("after falling behind: %v, want ErrExpired", err)
	}
	if _, err2 := w.Next(); err2 != err {
		t.Errorf("the next call: %v, want the same error", err2)
	}
	h := srv.mirror.filters
	h.mu.Lock()
	defer h.mu.Unlock()
	if fv := h.indexes[1].values["payments"]; fv == nil || len(fv.watches) != 0 || fv.waiters.Len() != 0 {
		t.Errorf("the ended watch is still registered: %+v", fv)
	}
}

// A filtered client of a Server over an ordered upstream: the upstream's revisions end to
// end, batches of several changes (the informer behind the Server applies bursts whole)
// delivered whole, read-your-writes for the changes it receives, and its cache the
// matching subset once the writes stop, with no relist. From an empty upstream at
// revision 0, the client's watch from "0" asks for a replay of the Server's state, which
// may already hold the first writes: it is one batch too.
func TestFilteredClient_UpstreamRevisions(t *testing.T) {
	t.Run("from a non-empty upstream", func(t *testing.T) { testFilteredClientUpstreamRevisions(t, false) })
	t.Run("from an empty upstream at revision 0", func(t *testing.T) { testFilteredClientUpstreamRevisions(t, true) })
}

func testFilteredClientUpstreamRevisions(t *testing.T, empty bool) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	if !empty {
		wiretest.Put(src, "z", "search:0")
	}
	d := paymentsMirror(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	teams := []string{"payments", "search", "billing"}
	for i := range 200 {
		name := fmt.Sprintf("o%02d", i%17)
		team := teams[i%len(teams)]
		if i%5 == 4 {
			team = "payments"
		}
		r := wiretest.Put(src, name, fmt.Sprintf("%s:%d", team, i))
		if i%7 == 0 {
			src.Delete(fmt.Sprintf("o%02d", (i+3)%17))
		}
		if team != "payments" || i%10 != 4 {
			continue // a burst: the Server gets several changes per batch
		}
		rs := strconv.FormatInt(r, 10)
		if err := d.Inf.WaitForRevision(ctx, rs); err != nil {
			t.Fatalf("WaitForRevision(%s): %v", rs, err)
		}
		if got, ok := d.Inf.Get(name); !ok || got.Val != fmt.Sprintf("payments:%d", i) {
			t.Fatalf("after WaitForRevision(%s) of %s=payments:%d the filtered mirror reads %v (at %s)", rs, name, i, got, d.Inf.Stats().ReceivedRevision)
		}
	}
	want := func() string {
		var b strings.Builder
		for _, o := range src.Items() {
			if teamOf(o) == "payments" {
				fmt.Fprintf(&b, "%s=%s ", o.Name, o.Val)
			}
		}
		return b.String()
	}()
	wiretest.Eventually(t, "the filtered mirror to hold the payments subset", func() bool {
		var b strings.Builder
		for _, o := range wiretest.Cached(d.Inf) {
			fmt.Fprintf(&b, "%s=%s ", o.Name, o.Val)
		}
		return b.String() == want
	})
	if n := d.Inf.Stats().Relists; n != 1 {
		t.Errorf("the filtered mirror listed %d times, want 1 (no relist)", n)
	}
}

// A filtered client's WaitForRevision of a write to another value returns soon, not after
// a bookmark interval (a minute by default): the Server sends its idle filtered watchers a
// bookmark at the newest revision shortly after it moves.
func TestFilteredClientWaitsForAWriteElsewhere(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "payments:0")
	d := paymentsMirror(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	for i := range 3 {
		r := strconv.FormatInt(wiretest.Put(src, "b", fmt.Sprintf("search:%d", i)), 10)
		start := time.Now()
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		err := d.Inf.WaitForRevision(wctx, r)
		wcancel()
		if err != nil {
			t.Fatalf("WaitForRevision(%s) of a write to another value: %v after %v", r, err, time.Since(start))
		}
	}
	if n := d.Inf.Len(); n != 1 {
		t.Errorf("the filtered cache holds %d objects, want 1", n)
	}
}
