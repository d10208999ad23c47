package fanout

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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

// The fan-out tier: memory source → informer → Server → three client informers, over
// both framings. Every client's cache equals the source after adds, updates, deletes and
// an upstream relist, and each client's handler sees the exact sequence of changes.
func TestChain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		framing httpsource.Framing
	}{{"ndjson", httpsource.NDJSON}, {"sse", httpsource.ServerSentEvents}} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, memory.Options{})
			wiretest.Put(up.src, "a", "1")
			wiretest.Put(up.src, "b", "1")
			srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{})
			want := func() string { return wiretest.State(up.src.Items()) }

			var clients []*wiretest.Mirror
			for i := range 3 {
				c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{Framing: tc.framing})
				clients = append(clients, wiretest.NewMirror(t, c.Ordered(), "client", func(o *informer.Options[string, *wiretest.Obj]) {
					o.PageSize = int64(i + 1) // paginated lists of every size
				}))
			}
			for _, d := range clients {
				wiretest.Converge(t, d, want)
			}

			wiretest.Put(up.src, "c", "1")
			wiretest.Put(up.src, "a", "2")
			up.src.Delete("b")
			for _, d := range clients {
				wiretest.Converge(t, d, want)
			}

			// An upstream relist: the upstream informer re-delivers every object; the server
			// passes on only what changed (d, added while it was disconnected).
			up.src.DropWatches(informer.ErrExpired)
			wiretest.Put(up.src, "d", "1")
			for _, d := range clients {
				wiretest.Converge(t, d, want)
			}
			// Read-your-writes through the tier: the server's revision, waited for on a client.
			ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
			defer cancel()
			for _, d := range clients {
				if err := d.Inf.WaitForRevision(ctx, srv.Revision()); err != nil {
					t.Fatal(err)
				}
				if got := wiretest.State(wiretest.Cached(d.Inf)); got != want() {
					t.Fatalf("after WaitForRevision: %s, want %s", got, want())
				}
				wantCalls := []string{"add*a=1", "add*b=1", "add c=1", "update a=1→2", "delete b=1", "add d=1"}
				wiretest.Until(t, "the handler calls", func() bool { return len(d.Rec.Calls()) >= len(wantCalls) }, d.Rec.Changed)
				if got := d.Rec.Calls(); !slices.Equal(got, wantCalls) {
					t.Errorf("%s: handler saw\n%q\nwant\n%q", d.Inf.Name(), got, wantCalls)
				}
				if errs := d.Rec.Errors(); len(errs) > 0 {
					t.Errorf("client errors: %v", errs)
				}
			}
			if n := srv.Stats().Lists; n != 2+1+1 {
				t.Errorf("server served %d list pages; want 4 (page sizes 1, 2, 3 over 2 objects)", n)
			}
		})
	}
}

// frontDoor sits in front of a server: it records requests, can cut the open watches, refuse
// watches (503), or answer the next watches with a given status.
type frontDoor struct {
	h http.Handler

	mu       sync.Mutex
	closed   bool
	status   int    // answer the next `times` watches with this status
	retry    string // its Retry-After header
	times    int
	open     map[*http.Request]context.CancelFunc
	log      []string    // "list <query>" / "watch <query> → <status>"
	watchAt  []time.Time // when each watch request arrived
	requests chan struct{}
}

func newFrontDoor(h http.Handler) *frontDoor {
	return &frontDoor{h: h, open: map[*http.Request]context.CancelFunc{}, requests: make(chan struct{}, 1)}
}

func (g *frontDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	watch := r.URL.Query().Get("watch") != ""
	g.mu.Lock()
	status, retry := 0, ""
	switch {
	case !watch:
		g.log = append(g.log, "list "+r.URL.RawQuery)
	case g.times > 0:
		g.times--
		g.log = append(g.log, "watch → "+http.StatusText(g.status))
		status, retry = g.status, g.retry
	case g.closed:
		g.log = append(g.log, "watch → closed")
		status = http.StatusServiceUnavailable
	default:
		g.log = append(g.log, "watch "+r.URL.Query().Get("resourceVersion"))
	}
	if watch {
		g.watchAt = append(g.watchAt, time.Now())
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if watch && status == 0 {
		g.open[r] = cancel
		defer func() {
			g.mu.Lock()
			delete(g.open, r)
			g.mu.Unlock()
		}()
	}
	g.mu.Unlock()
	g.signal()
	if status != 0 {
		if retry != "" {
			w.Header().Set("Retry-After", retry)
		}
		http.Error(w, "gate", status)
		return
	}
	// The gate ends watches through their request's context, which a watch taken over
	// from net/http no longer follows: a writer that does not hijack keeps them on
	// net/http's path.
	g.h.ServeHTTP(keptWriter{w}, r.WithContext(ctx))
}

// keptWriter is a ResponseWriter that cannot be hijacked: a watch served through it is
// not taken over.
type keptWriter struct{ http.ResponseWriter }

func (w keptWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// signal tells a waiting test that a request was logged.
func (g *frontDoor) signal() {
	select {
	case g.requests <- struct{}{}:
	default:
	}
}

// cut ends every open watch (cleanly, as a server timeout would).
func (g *frontDoor) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, cancel := range g.open {
		cancel()
	}
}

func (g *frontDoor) setClosed(v bool) {
	g.mu.Lock()
	g.closed = v
	g.mu.Unlock()
}

func (g *frontDoor) answer(status int, retry string, times int) {
	g.mu.Lock()
	g.status, g.retry, g.times = status, retry, times
	g.mu.Unlock()
}

func (g *frontDoor) entries() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.log)
}

func (g *frontDoor) watches() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.watchAt)
}

// A client that was away for longer than the server's history is answered 410, lists
// again, and sees the object deleted meanwhile as a tombstone (finalStateUnknown).
func TestChainExpiredRelistTombstones(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	wiretest.Put(up.src, "b", "1")
	wiretest.Put(up.src, "x", "1")
	srv, _ := serve(t, up, ServerOptions[*wiretest.Obj]{HistoryLimit: 5})
	g := newFrontDoor(srv)
	ts := httptest.NewServer(g)
	t.Cleanup(ts.Close)
	want := func() string { return wiretest.State(up.src.Items()) }
	byVal := func(o *wiretest.Obj) string { return o.Val } // unchanged objects of a relist are resyncs

	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	d := wiretest.NewMirror(t, c.Ordered(), "client", func(o *informer.Options[string, *wiretest.Obj]) { o.Revision = byVal })
	wiretest.Converge(t, d, want)
	wiretest.Put(up.src, "a", "2") // so that the watch has delivered an event before it is cut
	wiretest.Converge(t, d, want)

	g.setClosed(true)
	g.cut()
	up.src.Delete("x")
	wiretest.Put(up.src, "y", "1")
	for i := 2; i <= 10; i++ {
		wiretest.Put(up.src, "b", strconv.Itoa(i))
	}
	// An observer that talks to the server directly shows when it has every change.
	direct := httptest.NewServer(srv)
	t.Cleanup(direct.Close)
	obs := wiretest.NewMirror(t, newTestClient(t, direct.URL, httpsource.ClientOptions[*wiretest.Obj]{}), "direct", nil)
	wiretest.Converge(t, obs, want)

	before := len(g.entries())
	g.setClosed(false)
	wiretest.Converge(t, d, want)
	wiretest.Until(t, "the client to watch again", func() bool {
		e := g.entries()
		return strings.HasPrefix(e[len(e)-1], "watch ") && strings.HasPrefix(e[len(e)-2], "list ")
	}, g.requests)

	calls := d.Rec.Calls()
	wantCalls := []string{"add*a=1", "add*b=1", "add*x=1", "update a=1→2"}
	if !slices.Equal(calls[:4], wantCalls) {
		t.Fatalf("before the gap: %q, want %q", calls[:4], wantCalls)
	}
	after := slices.Sorted(slices.Values(calls[4:]))
	if want := []string{"add y=1", "delete?x=1", "update b=1→10"}; !slices.Equal(after, want) {
		t.Fatalf("after the gap: %q, want %q", after, want)
	}
	if !d.Rec.HasError(informer.ErrExpired) && d.Inf.Stats().Expirations == 0 {
		t.Error("the client never saw its revision expire")
	}
	// The requests after the gate opened: refused watches, then the watch from the old
	// revision (410 from the server), a list at least as new as that revision (which the
	// server's cache serves), a watch.
	var tail []string
	for _, e := range g.entries()[before:] {
		if e != "watch → closed" {
			tail = append(tail, e)
		}
	}
	if len(tail) < 3 || !strings.HasPrefix(tail[0], "watch ") || !strings.HasPrefix(tail[2], "watch ") ||
		tail[1] != "list limit=500&resourceVersion="+strings.TrimPrefix(tail[0], "watch ")+"&resourceVersionMatch=NotOlderThan" {
		t.Errorf("requests after the gap: %q, want a watch, a list not older than its revision, a watch", tail)
	}
}

// A server killed and restarted (a new instance on the same address): the client's
// revision is from the old instance, so it is answered 410, and the client relists and
// converges, with a tombstone for the object deleted while the server was down.
func TestChainServerRestart(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	wiretest.Put(up.src, "b", "1")
	want := func() string { return wiretest.State(up.src.Items()) }

	srv1 := newServer(t, up, ServerOptions[*wiretest.Obj]{})
	ts1 := httptest.NewServer(srv1)
	addr := ts1.Listener.Addr().String()
	waitSynced(t, srv1)

	c := newTestClient(t, ts1.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	d := wiretest.NewMirror(t, c.Ordered(), "client", nil)
	wiretest.Converge(t, d, want)
	wiretest.Put(up.src, "b", "2")
	wiretest.Converge(t, d, want)

	// Kill: cut every connection, stop listening, drop the server's state.
	ts1.CloseClientConnections()
	ts1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := srv1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	up.src.Delete("a")
	wiretest.Put(up.src, "c", "1")
	wiretest.Put(up.src, "b", "3")

	srv2 := newServer(t, up, ServerOptions[*wiretest.Obj]{})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	ts2 := &httptest.Server{Listener: ln, Config: &http.Server{Handler: srv2}}
	ts2.Start()
	t.Cleanup(func() {
		_ = srv2.Shutdown(context.Background())
		ts2.Close()
	})
	wiretest.Converge(t, d, want)

	calls := d.Rec.Calls()
	tail := slices.Sorted(slices.Values(calls[3:]))
	if w := []string{"add c=1", "delete?a=1", "update b=2→3"}; !slices.Equal(tail, w) {
		t.Fatalf("after the restart: %q, want %q (all: %q)", tail, w, calls)
	}
}

// 429 with Retry-After: the client waits at least that long and watches again from the
// same revision, without a relist.
func TestChainTooManyRequestsRetryAfter(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, _ := serve(t, up, ServerOptions[*wiretest.Obj]{})
	g := newFrontDoor(srv)
	ts := httptest.NewServer(g)
	t.Cleanup(ts.Close)
	want := func() string { return wiretest.State(up.src.Items()) }

	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "client", nil)
	wiretest.Converge(t, d, want)
	wiretest.Put(up.src, "a", "2") // the watch delivers an event, so its end is not a "very short watch"
	wiretest.Converge(t, d, want)
	lists := d.Inf.Stats().Lists
	watchesBefore := len(g.watches())

	g.answer(http.StatusTooManyRequests, "1", 1)
	g.cut()
	wiretest.Until(t, "the client to watch again after the 429", func() bool { return len(g.watches()) >= watchesBefore+2 }, g.requests)
	wiretest.Put(up.src, "b", "1")
	wiretest.Converge(t, d, want)

	at := g.watches()[watchesBefore:]
	if gap := at[1].Sub(at[0]); gap < time.Second {
		t.Errorf("watched again %v after a 429 with Retry-After: 1", gap)
	}
	if n := d.Inf.Stats().Lists; n != lists {
		t.Errorf("the client listed %d times after the 429; want a re-watch without a relist", n-lists)
	}
	var ra time.Duration
	for _, err := range d.Rec.Errors() {
		if errors.Is(err, informer.ErrTooManyRequests) {
			ra, _ = informer.RetryAfterOf(err)
		}
	}
	if ra != time.Second {
		t.Errorf("reported Retry-After %v, want 1s", ra)
	}
}

// TLS with HTTP/2, and a bearer token checked by the server's Authorize hook.
func TestChainTLS(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	var protoMu sync.Mutex
	protos := map[string]bool{}
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		Authorize: func(r *http.Request) error {
			protoMu.Lock()
			protos[r.Proto] = true
			protoMu.Unlock()
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				return ErrUnauthorized
			}
			return nil
		},
	}})
	ts := serveHTTP(t, srv, srv, func(ts *httptest.Server) { ts.EnableHTTP2 = true })

	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{
		HTTPClient: ts.Client(),
		PrepareRequest: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer s3cret")
			return nil
		},
	})
	d := wiretest.NewMirror(t, c.Ordered(), "client", nil)
	want := func() string { return wiretest.State(up.src.Items()) }
	wiretest.Converge(t, d, want)
	wiretest.Put(up.src, "b", "1")
	up.src.Delete("a")
	wiretest.Converge(t, d, want)
	protoMu.Lock()
	defer protoMu.Unlock()
	if !protos["HTTP/2.0"] {
		t.Errorf("requests used %v, want HTTP/2.0", protos)
	}
}

// A client with StreamingList starts with a watch that sends the initial state
// (sendInitialEvents=true) and needs no list at all.
func TestChainStreamingList(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	wiretest.Put(up.src, "b", "1")
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{})
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{StreamingList: true}).Ordered(), "client", nil)
	want := func() string { return wiretest.State(up.src.Items()) }
	wiretest.Converge(t, d, want)
	wiretest.Put(up.src, "c", "1")
	wiretest.Converge(t, d, want)
	if n := srv.Stats().Lists; n != 0 {
		t.Errorf("server served %d lists to a streaming client", n)
	}
	if got, w := d.Rec.Calls(), []string{"add*a=1", "add*b=1", "add c=1"}; !slices.Equal(got, w) {
		t.Errorf("handler saw %q, want %q", got, w)
	}
}

// PassThrough serves a bare ListerWatcher: here the memory source itself, revisions and
// continue tokens passed through.
func TestPassThroughChain(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "1")
	wiretest.Put(src, "b", "1")
	wiretest.Put(src, "c", "1")
	h := NewPassThrough[*wiretest.Obj](src, PassThroughOptions[*wiretest.Obj]{})
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = h.Shutdown(context.Background())
		ts.Close()
	})
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "client", func(o *informer.Options[string, *wiretest.Obj]) { o.PageSize = 2 })
	want := func() string { return wiretest.State(src.Items()) }
	wiretest.Converge(t, d, want)
	wiretest.Put(src, "a", "2")
	src.Delete("b")
	wiretest.Converge(t, d, want)
	// The reflector records the revision after it has queued the event that the cache
	// converged on: wait for the revision itself.
	wiretest.Eventually(t, "the client's revision to reach 5", func() bool { return d.Inf.Stats().ReceivedRevision == "5" })
	if got := d.Inf.Stats().ReceivedRevision; got != "5" {
		t.Errorf("client revision %q, want the source's own revision 5", got)
	}
	if n := h.Stats().Lists; n != 2 {
		t.Errorf("served %d pages, want 2", n)
	}
}

var _ informer.SourceIdentifier = (*httpsource.Client[int])(nil)

// A Client's identity is its URL and the instance of the Server behind it: two Servers at
// one URL (one restarted) are two sources, one Server asked twice is one. A server that
// names no instance (a plain API; a PassThrough) is its URL.
func TestClientSourceID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	u := newUpstream(t, memory.Options{})
	wiretest.Put(u.src, "a", "1")
	first := newServer(t, u, ServerOptions[*wiretest.Obj]{})
	second := newServer(t, u, ServerOptions[*wiretest.Obj]{})
	waitSynced(t, first)
	waitSynced(t, second)
	var current atomic.Pointer[Server[string, *wiretest.Obj]]
	current.Store(first)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { current.Load().ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { first.Shutdown(ctx); second.Shutdown(ctx) })

	c := newTestClient(t, ts.URL+"/objs", httpsource.ClientOptions[*wiretest.Obj]{})
	id1, err := c.SourceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.SourceID(ctx)
	if err != nil || again != id1 {
		t.Fatalf("asked twice: %q then %q (%v)", id1, again, err)
	}
	current.Store(second) // restarted
	id2, err := c.SourceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id1 == id2 || !strings.HasPrefix(id1, ts.URL+"/objs ") || !strings.HasPrefix(id2, ts.URL+"/objs ") {
		t.Fatalf("two Server instances at %s: %q and %q, want the URL and two instances", ts.URL, id1, id2)
	}

	plain := httptest.NewServer(NewPassThrough[*wiretest.Obj](u.src, PassThroughOptions[*wiretest.Obj]{}))
	t.Cleanup(plain.Close)
	id, err := newTestClient(t, plain.URL, httpsource.ClientOptions[*wiretest.Obj]{}).SourceID(ctx)
	if err != nil || id != plain.URL {
		t.Fatalf("a server that names no instance: %q %v, want its URL %q", id, err, plain.URL)
	}
}
