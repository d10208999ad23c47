package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// unordered hides a source's RevisionComparer: an upstream whose revisions the informer
// (and so a Server over it) cannot order.
type unordered struct {
	informer.ListerWatcher[*wiretest.Obj]
}

// startUpstream starts an informer over a memory source, hiding the source's order
// unless ordered.
func startUpstream(t testing.TB, src *memory.Source[string, *wiretest.Obj], name string, ordered bool) *upstream {
	t.Helper()
	var lw informer.ListerWatcher[*wiretest.Obj] = src
	if !ordered {
		lw = unordered{src}
	}
	withIndexes := func(o *informer.Options[string, *wiretest.Obj]) { o.Indexers = testIndexes() }
	return &upstream{Mirror: wiretest.NewMirror(t, lw, name, withIndexes), src: src}
}

// startServer serves u's informer on a loopback server; kill stops both at once, as a
// crashed process would (open watches are cut).
func startReplica(t testing.TB, u *upstream, opts ServerOptions[*wiretest.Obj]) (srv *Server[string, *wiretest.Obj], ts *httptest.Server, kill func()) {
	t.Helper()
	srv, err := NewServer(u.Inf, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts = httptest.NewServer(srv)
	killed := false
	kill = func() {
		if killed {
			return
		}
		killed = true
		ts.CloseClientConnections()
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		ts.Close()
	}
	t.Cleanup(kill)
	waitSynced(t, srv)
	return srv, ts, kill
}

// Read-your-writes through the fan-out tier: a client informer that waits for the
// revision of a write to the upstream source sees the write.
func TestFanoutReadYourWrites(t *testing.T) {
	src, _, d := mirroredTier(t)
	for i := range 20 {
		r := strconv.FormatInt(wiretest.Put(src, "k", fmt.Sprint(i)), 10)
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		err := d.Inf.WaitForRevision(ctx, r)
		cancel()
		if err != nil {
			t.Fatalf("WaitForRevision(%s): %v", r, err)
		}
		if got, ok := d.Inf.Get("k"); !ok || got.Val != fmt.Sprint(i) {
			t.Fatalf("after WaitForRevision(%s) of the write k=%d the mirror reads %v: a stale read", r, i, got)
		}
	}
	// The mirror's revision is the upstream's own.
	wiretest.Eventually(t, "the mirror at the upstream's revision", func() bool {
		return httpsource.PlainRevision(d.Inf.Stats().ReceivedRevision) == strconv.FormatInt(src.Revision(), 10)
	})
}

// A Server over an upstream whose revisions are not ordered numbers them itself; a
// client's WaitForRevision refuses a revision of another numbering (the upstream's) with
// an error rather than return at once as if it were reached.
func TestFanoutOwnNumberingRefusesForeignRevision(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "1")
	up := startUpstream(t, src, "upstream", false)
	srv, ts, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "mirror", nil)
	mirrorConverge(t, d, src)
	r := strconv.FormatInt(wiretest.Put(src, "a", "2"), 10)
	err := d.Inf.WaitForRevision(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "numbering") {
		t.Fatalf("WaitForRevision(%s) of the upstream's numbering: %v, want an error naming the other numbering", r, err)
	}
	// Its own revisions are fine.
	wiretest.Until(t, "the mirror to see a=2", func() bool { o, _ := d.Inf.Get("a"); return o != nil && o.Val == "2" }, d.Rec.Changed)
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := d.Inf.WaitForRevision(ctx, srv.Revision()); err != nil {
		t.Fatalf("WaitForRevision(%s) of the server's own numbering: %v", srv.Revision(), err)
	}
}

// Two Servers over two informers of one ordered upstream serve the same revisions, so a
// watch started at one resumes at the other from any revision within its history.
func TestFanoutReplicasShareRevisions(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "1")
	srvA, tsA, _ := startReplica(t, startUpstream(t, src, "a", true), ServerOptions[*wiretest.Obj]{})
	srvB, tsB, _ := startReplica(t, startUpstream(t, src, "b", true), ServerOptions[*wiretest.Obj]{})
	// One change at a time, so that each is a revision of both servers.
	r1 := wiretest.Put(src, "b", "1")
	wiretest.Eventually(t, "both servers at the upstream's revision", func() bool {
		return srvA.Revision() == fmt.Sprint(r1) && srvB.Revision() == fmt.Sprint(r1)
	})
	wiretest.Put(src, "a", "2")
	want := strconv.FormatInt(src.Revision(), 10)
	wiretest.Eventually(t, "both servers at the upstream's revision", func() bool {
		return srvA.Revision() == want && srvB.Revision() == want
	})
	// A watch at B from a revision A served: the changes after it, no 410.
	resp := wiretest.Get(t, nil, fmt.Sprintf("%s?watch=1&resourceVersion=%d", tsB.URL, r1), nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch at replica B from revision %d: %d %s", r1, resp.StatusCode, b)
	}
	st := wiretest.NewStream(resp)
	if got, want := st.Line(t), fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q,"object":{"name":"a","val":"2"}}`, want); got != want {
		t.Fatalf("watch at replica B: %s, want %s", got, want)
	}
	_ = tsA
}

// A client whose server dies fails over to a replica (ClientOptions.FailoverURLs) and
// resumes its watch there from its revision: no relist, and it keeps up with the writes.
func TestFanoutFailoverWithoutRelist(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	putRound(src, 0)
	_, tsA, killA := startReplica(t, startUpstream(t, src, "a", true), ServerOptions[*wiretest.Obj]{})
	_, tsB, _ := startReplica(t, startUpstream(t, src, "b", true), ServerOptions[*wiretest.Obj]{})
	c := newTestClient(t, tsA.URL, httpsource.ClientOptions[*wiretest.Obj]{StreamingList: true, FailoverURLs: []string{tsB.URL}})
	d := wiretest.NewMirror(t, c.Ordered(), "mirror", nil)
	mirrorConverge(t, d, src)
	relists := d.Inf.Stats().Relists

	write := func(round int) {
		t.Helper()
		last := putRound(src, round)
		src.Delete(fmt.Sprint("k", round))
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		defer cancel()
		if err := d.Inf.WaitForRevision(ctx, strconv.FormatInt(last, 10)); err != nil {
			t.Fatalf("WaitForRevision(%d): %v", last, err)
		}
		mirrorConverge(t, d, src)
	}
	write(1)
	killA()
	write(2)
	write(3)
	if c.URL() != tsB.URL {
		t.Errorf("the client's URL is %s after replica A died, want replica B's, %s", c.URL(), tsB.URL)
	}
	if got := d.Inf.Stats().Relists; got != relists {
		t.Errorf("%d relists after the failover, want 0", got-relists)
	}
	if errs := d.Rec.Errors(); len(errs) > 0 {
		for _, err := range errs {
			if errors.Is(err, informer.ErrExpired) || errors.Is(err, informer.ErrBadInput) {
				t.Errorf("the mirror reported %v", err)
			}
		}
	}
}

// roundRobin is a load balancer on loopback: each request goes to the next of its
// backends, whether or not it is up (a dead one answers 502, which a Client retries).
func roundRobin(t testing.TB, backends ...string) *httptest.Server {
	t.Helper()
	var next atomic.Uint64
	targets := make([]*url.URL, len(backends))
	for i, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		targets[i] = u
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[(next.Add(1)-1)%uint64(len(targets))])
		},
		FlushInterval: -1, // stream watches
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	ts := httptest.NewServer(proxy)
	t.Cleanup(ts.Close)
	return ts
}

// Replicas behind one address: a round-robin load balancer spreads a client's lists and
// watches over two replicas, one of which dies; the client never relists.
func TestFanoutFailoverThroughLoadBalancer(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	putRound(src, 0)
	srvA, tsA, killA := startReplica(t, startUpstream(t, src, "a", true), ServerOptions[*wiretest.Obj]{})
	srvB, tsB, _ := startReplica(t, startUpstream(t, src, "b", true), ServerOptions[*wiretest.Obj]{})
	lb := roundRobin(t, tsA.URL, tsB.URL)
	// The first request (the streaming list, which goes on as the watch) goes to A.
	c := newTestClient(t, lb.URL, httpsource.ClientOptions[*wiretest.Obj]{StreamingList: true})
	d := wiretest.NewMirror(t, c.Ordered(), "mirror", nil)
	mirrorConverge(t, d, src)
	relists := d.Inf.Stats().Relists
	for round := 1; round <= 4; round++ {
		if round == 3 {
			if srvA.Stats().OpenWatches != 1 || srvB.Stats().Watches != 0 {
				t.Fatalf("before A dies: A has %d open watches, B has had %d; want the client's watch at A", srvA.Stats().OpenWatches, srvB.Stats().Watches)
			}
			killA()
		}
		last := putRound(src, round)
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		err := d.Inf.WaitForRevision(ctx, strconv.FormatInt(last, 10))
		cancel()
		if err != nil {
			t.Fatalf("WaitForRevision(%d): %v", last, err)
		}
		mirrorConverge(t, d, src)
	}
	if got := d.Inf.Stats().Relists; got != relists {
		t.Errorf("%d relists through the load balancer, want 0", got-relists)
	}
	if srvB.Stats().OpenWatches != 1 {
		t.Errorf("replica B has %d open watches after A died, want the client's", srvB.Stats().OpenWatches)
	}
}

// A replica behind the revision a client asks for waits for it (ServerOptions.CatchUpWait)
// or, past the wait, answers 410, so that the client lists again rather than retry for
// good a revision the replica may never reach (another upstream's, or one of before a
// restore).
func TestFanoutReplicaBehindWaitsOrAnswers410(t *testing.T) {
	// Two sources that see the same writes in the same order have the same revisions: B's
	// is held back to make its replica fall behind.
	src, srcB := memory.New(wiretest.ObjName, memory.Options{}), memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "1")
	wiretest.Put(srcB, "a", "1")
	upB := startUpstream(t, srcB, "b", true)
	_, tsNoWait, _ := startReplica(t, upB, ServerOptions[*wiretest.Obj]{CatchUpWait: -1})
	srvWait, tsWait, _ := startReplica(t, upB, ServerOptions[*wiretest.Obj]{CatchUpWait: wiretest.WaitTimeout})
	r2 := wiretest.Put(src, "a", "2")

	for _, path := range []string{"?watch=1&resourceVersion=2", "?resourceVersion=2&resourceVersionMatch=NotOlderThan"} {
		resp := wiretest.Get(t, nil, tsNoWait.URL+path, nil)
		b := wiretest.Body(t, resp)
		if resp.StatusCode != http.StatusGone || !strings.Contains(b, "not reached") {
			t.Errorf("GET %s at a replica behind, past its wait: %d %s, want 410", path, resp.StatusCode, b)
		}
	}

	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("%s?watch=1&resourceVersion=%d", tsWait.URL, r2))
		got <- answer{resp, err}
	}()
	// The request waits until the replica reaches revision 2; then it watches from there.
	wiretest.Eventually(t, "the request to wait at the replica", func() bool {
		watches, _ := srvWait.gate.InUse()
		return watches == 1
	})
	if n := srvWait.Stats().Watches; n != 0 {
		t.Fatalf("%d watches started at a replica behind, want 0 until it catches up", n)
	}
	wiretest.Put(srcB, "a", "2")
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	st := wiretest.NewStream(a.resp)
	t.Cleanup(st.Close)
	if a.resp.StatusCode != http.StatusOK {
		t.Fatalf("watch at the replica once it caught up: %d %s", a.resp.StatusCode, wiretest.Body(t, a.resp))
	}
	wiretest.Put(srcB, "a", "3")
	if got, want := st.Line(t), `{"type":"MODIFIED","resourceVersion":"3","object":{"name":"a","val":"3"}}`; got != want {
		t.Fatalf("watch from %d: %s, want %s", r2, got, want)
	}
}

// mirrorConverge waits until the mirror's cache and handler hold src's state, and says
// putRound writes k0…k9 = round to src and returns the last write's revision.
func putRound(src *memory.Source[string, *wiretest.Obj], round int) int64 {
	var last int64
	for i := range 10 {
		last = wiretest.Put(src, fmt.Sprint("k", i), fmt.Sprint(round))
	}
	return last
}

// mirroredTier serves a source holding a=1 (its own revisions) and returns it, its
// Server and a Mirror (streaming list) that has converged on it.
func mirroredTier(t *testing.T) (*memory.Source[string, *wiretest.Obj], *Server[string, *wiretest.Obj], *wiretest.Mirror) {
	t.Helper()
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "1")
	up := startUpstream(t, src, "upstream", true)
	srv, ts, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{StreamingList: true}).Ordered(), "mirror", nil)
	mirrorConverge(t, d, src)
	return src, srv, d
}

// how they differ if they never do.
func mirrorConverge(t testing.TB, d *wiretest.Mirror, src *memory.Source[string, *wiretest.Obj]) {
	t.Helper()
	deadline := time.Now().Add(wiretest.WaitTimeout)
	for {
		want := wiretest.State(src.Items())
		cache, told := wiretest.State(wiretest.Cached(d.Inf)), d.Rec.State()
		if cache == want && told == want {
			return
		}
		if time.Now().After(deadline) {
			err := d.Inf.Stats().LastError
			t.Fatalf("the mirror did not converge:\n cache %s\n told  %s\n want  %s\n at %s, last error %v, errors %v", cache, told, want, d.Inf.Stats().ReceivedRevision, err, d.Rec.Errors())
		}
		select {
		case <-d.Rec.Changed:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// staller is a Block handler that, once stalled, holds the informer's processing: the
// first change it is given waits in the handler until release, the next fills its queue,
// and the changes after that wait in the informer's queue, to be applied as one batch.
type staller struct {
	stalled atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *staller) hold() {
	if s.stalled.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
}
func (s *staller) OnAdd(*wiretest.Obj, bool)    { s.hold() }
func (s *staller) OnUpdate(_, _ *wiretest.Obj)  { s.hold() }
func (s *staller) OnDelete(*wiretest.Obj, bool) { s.hold() }

// A client whose revision falls inside a batch of the replica it resumes at (the
// replicas' informers batched the same changes differently) is sent that whole batch, as
// one batch: every key it holds comes to a state at least as new, and nothing is lost.
func TestFanoutResumeInsideAnotherReplicasBatch(t *testing.T) {
	src, srcB := memory.New(wiretest.ObjName, memory.Options{}), memory.New(wiretest.ObjName, memory.Options{})
	both := func(name, val string) int64 { wiretest.Put(srcB, name, val); return wiretest.Put(src, name, val) }
	both("a", "1")
	srvA, _, _ := startReplica(t, startUpstream(t, src, "a", true), ServerOptions[*wiretest.Obj]{})
	upB := startUpstream(t, srcB, "b", true)
	st := &staller{entered: make(chan struct{}), release: make(chan struct{})}
	reg, err := upB.Inf.AddHandler(st, informer.HandlerOptions{Policy: informer.Block, QueueLength: 1})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	free := func() { once.Do(func() { close(st.release) }) }
	t.Cleanup(free) // before the informer stops, which waits for its handlers
	wiretest.Eventually(t, "the staller to have had the cache's replay", func() bool { return reg.Stats().Synced })
	srvB, tsB, _ := startReplica(t, upB, ServerOptions[*wiretest.Obj]{})

	st.stalled.Store(true)
	both("a", "2") // r2: the staller holds it
	<-st.entered
	both("b", "1") // r3: fills the staller's queue; B's informer waits
	wiretest.Eventually(t, "replica B at revision 3", func() bool { return srvB.Revision() == "3" })
	r4 := both("a", "3") // r4 and r5 wait in B's informer's queue: one batch there
	both("c", "1")
	wiretest.Eventually(t, "replica A at revision 5", func() bool { return srvA.Revision() == "5" })
	wiretest.Eventually(t, "B's informer to have received revision 5", func() bool { return upB.Inf.Stats().ReceivedRevision == "5" })
	free()
	wiretest.Eventually(t, "replica B at revision 5", func() bool { return srvB.Revision() == "5" })

	// Revision 4 is one of A's; at B it falls inside the batch that ends at 5.
	raw := wiretest.Open(t, fmt.Sprintf("%s?watch=1&resourceVersion=%d", tsB.URL, r4))
	want := []string{
		`{"type":"MODIFIED","resourceVersion":"5~","object":{"name":"a","val":"3"}}`,
		`{"type":"ADDED","resourceVersion":"5","object":{"name":"c","val":"1"}}`,
	}
	for _, w := range want {
		if got := raw.Line(t); got != w {
			t.Fatalf("watch at B from %d: %s, want %s", r4, got, w)
		}
	}
	raw.Close()

	// A Client delivers the batch whole, every event at the batch's revision.
	c := newTestClient(t, tsB.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	got := untagged(wiretest.Watched(t, c, informer.WatchOptions{Revision: strconv.FormatInt(r4, 10)}, 2))
	if w := []string{"Modified a=3 @5", "Added c=1 @5"}; fmt.Sprint(got) != fmt.Sprint(w) {
		t.Fatalf("client events %q, want %q", got, w)
	}
}

// The upstream's revision moves on with no change the Server serves (a write that leaves
// an object as it was): a bookmark takes the revision to the clients, so that their
// WaitForRevision for that write returns.
func TestFanoutBookmarksFollowUpstreamProgress(t *testing.T) {
	src, srv, d := mirroredTier(t)
	watches := srv.Stats().Watches
	r := strconv.FormatInt(wiretest.Put(src, "a", "1"), 10) // the same value: nothing to serve
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := d.Inf.WaitForRevision(ctx, r); err != nil {
		t.Fatalf("WaitForRevision(%s) of a write that changed nothing served: %v (server at %s)", r, err, srv.Revision())
	}
	if got := srv.Stats().Watches; got != watches {
		t.Errorf("%d new watches: the revision came by a new watch, not a bookmark", got-watches)
	}
}

// A client that does not apply batches whole (not a Client of this package) and resumes
// from a revision it got inside a batch ("5~") is sent that batch again from its start.
func TestFanoutResumeFromPartialRevision(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "1")
	up := startUpstream(t, src, "upstream", true)
	srv, ts, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
	r2 := wiretest.Put(src, "a", "2")
	wiretest.Eventually(t, "the server at revision 2", func() bool { return srv.Revision() == fmt.Sprint(r2) })
	raw := wiretest.Open(t, fmt.Sprintf("%s?watch=1&resourceVersion=%d%c", ts.URL, r2, wire.PartialMark))
	if got, want := raw.Line(t), `{"type":"MODIFIED","resourceVersion":"2","object":{"name":"a","val":"2"}}`; got != want {
		t.Fatalf("watch from %d+: %s, want %s", r2, got, want)
	}
}
