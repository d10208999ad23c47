package fanout

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
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
		return d.Inf.Stats().ReceivedRevision == strconv.FormatInt(src.Revision(), 10)
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
	got := wiretest.Watched(t, c, informer.WatchOptions{Revision: strconv.FormatInt(r4, 10)}, 2)
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

// A Client delivers a batch (events whose revision ends in '~', then one without) only
// whole, at the batch's revision; a batch the stream ends inside is dropped, and a
// bookmark inside a batch is ignored.
func TestClientAppliesBatchesWhole(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []string
		want   []string
	}{
		{"whole", []string{
			`{"type":"ADDED","resourceVersion":"5~","object":{"name":"a","val":"1"}}`,
			`{"type":"BOOKMARK","resourceVersion":"5~","object":{"metadata":{"resourceVersion":"5~"}}}`,
			`{"type":"MODIFIED","resourceVersion":"5","object":{"name":"b","val":"2"}}`,
			`{"type":"DELETED","resourceVersion":"6","object":{"name":"a","val":"1"}}`,
		}, []string{"Added a=1 @5", "Modified b=2 @5", "Deleted a=1 @6", "EOF"}},
		{"cut inside a batch", []string{
			`{"type":"ADDED","resourceVersion":"4","object":{"name":"a","val":"1"}}`,
			`{"type":"ADDED","resourceVersion":"5~","object":{"name":"b","val":"1"}}`,
		}, []string{"Added a=1 @4", "EOF"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				for _, f := range tc.frames {
					fmt.Fprintln(w, f)
				}
			}))
			defer ts.Close()
			w, err := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Watch(context.Background(), informer.WatchOptions{Revision: "3"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			var got []string
			for {
				ev, err := w.Next()
				if err == io.EOF {
					got = append(got, "EOF")
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%v %s=%s @%s", ev.Type, ev.Object.Name, ev.Object.Val, ev.Revision))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
		})
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

// pausedClient is a Client's ListerWatcher whose first watch waits for the test before it
// is sent, and whose watches pause after each whole batch (an event Next returns with no
// more at its revision) until the test resumes them, as a slow network would: the
// informer then holds exactly what was whole at that point.
type pausedClient struct {
	httpsource.OrderedClient[*wiretest.Obj]
	gate    chan struct{} // closed by the test: the first watch may be sent
	resume  chan struct{} // closed by the test: paused watches go on
	watched chan string   // the revision of the first watch, once it is asked for
	once    sync.Once
}

func newPausedClient(c *httpsource.Client[*wiretest.Obj]) *pausedClient {
	return &pausedClient{OrderedClient: c.Ordered(), gate: make(chan struct{}), resume: make(chan struct{}), watched: make(chan string, 1)}
}

func (p *pausedClient) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*wiretest.Obj], error) {
	p.once.Do(func() { p.watched <- opts.Revision })
	select {
	case <-p.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	w, err := p.OrderedClient.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &pausedWatch{Watch: w, ctx: ctx, resume: p.resume}, nil
}

// pausedWatch forwards a Client's watch and pauses after each whole batch.
type pausedWatch struct {
	informer.Watch[*wiretest.Obj]
	ctx    context.Context
	resume chan struct{}
	pause  bool // the last event ended its batch
}

func (w *pausedWatch) Next() (informer.Event[*wiretest.Obj], error) {
	if w.pause {
		select {
		case <-w.resume:
		case <-w.ctx.Done():
			return informer.Event[*wiretest.Obj]{}, w.ctx.Err()
		}
	}
	ev, err := w.Watch.Next()
	w.pause = err == nil && ev.Type != informer.Bookmark && !w.MoreAtRevision()
	return ev, err
}

func (w *pausedWatch) MoreAtRevision() bool {
	b, ok := w.Watch.(informer.BatchedWatch)
	return ok && b.MoreAtRevision()
}

// A client informer that listed an ordered upstream at revision 0 (empty) watches from
// "0", which asks the Server for a replay of its state: the replay is one batch at the
// state's revision, so WaitForRevision of that revision returns only once the client's
// cache holds the whole state (the matching subset, filtered), however slowly the replay
// arrives.
func TestClientReplayFromRevisionZeroIsOneBatch(t *testing.T) {
	for _, filtered := range []bool{false, true} {
		t.Run(fmt.Sprintf("filtered=%v", filtered), func(t *testing.T) {
			src := memory.New(wiretest.ObjName, memory.Options{})
			up := startUpstream(t, src, "upstream", true)
			srv, ts, _ := startReplica(t, up, filterOptions())
			if got := srv.Revision(); got != "0" {
				t.Fatalf("the server of an empty upstream is at revision %q, want 0", got)
			}
			var copts httpsource.ClientOptions[*wiretest.Obj]
			if filtered {
				copts = paymentsOnly
			}
			pc := newPausedClient(newTestClient(t, ts.URL, copts))
			d := syncedMirror(t, pc, "mirror")
			ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
			defer cancel()
			select {
			case rv := <-pc.watched:
				if rv != "0" {
					t.Fatalf("the client watches from %q, want 0 (its list's revision)", rv)
				}
			case <-ctx.Done():
				t.Fatal("the client never watched")
			}
			// Several objects, before the client's watch reaches the server: its replay
			// holds them all at one revision.
			var last int64
			for i := range 7 {
				team := "payments"
				if i%3 == 1 {
					team = "search"
				}
				last = wiretest.Put(src, fmt.Sprintf("o%d", i), fmt.Sprintf("%s:%d", team, i))
			}
			rs := strconv.FormatInt(last, 10)
			wiretest.Eventually(t, "the server at the upstream's revision", func() bool { return srv.Revision() == rs })
			close(pc.gate)
			if err := d.Inf.WaitForRevision(ctx, rs); err != nil {
				t.Fatalf("WaitForRevision(%s): %v", rs, err)
			}
			got := wiretest.State(wiretest.Cached(d.Inf))
			close(pc.resume)
			var want []*wiretest.Obj
			for _, o := range src.Items() {
				if !filtered || teamOf(o) == "payments" {
					want = append(want, o)
				}
			}
			if got != wiretest.State(want) {
				t.Fatalf("right after WaitForRevision(%s) the client's cache holds %q, want the upstream's state %q", rs, got, wiretest.State(want))
			}
			if n := d.Inf.Stats().Relists; n != 1 {
				t.Errorf("the client listed %d times, want 1", n)
			}
		})
	}
}

// The frames of a replay over an ordered upstream: one batch at the state's revision,
// every event but the last with the partial mark, filtered or not, asked for by
// sendInitialEvents or by a watch from "0" or from no revision.
func TestServerReplayFramesAreOneBatch(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	up := startUpstream(t, src, "upstream", true)
	srv, ts, _ := startReplica(t, up, filterOptions())
	wiretest.Put(src, "a", "payments:1")
	wiretest.Put(src, "b", "search:1")
	wiretest.Put(src, "c", "payments:2")
	wiretest.Put(src, "d", "payments:3")
	r := strconv.FormatInt(wiretest.Put(src, "e", "billing:1"), 10)
	wiretest.Eventually(t, "the server at the upstream's revision", func() bool { return srv.Revision() == r })

	added := func(name, val, rv string) string {
		return fmt.Sprintf(`{"type":"ADDED","resourceVersion":%q,"object":{"name":%q,"val":%q}}`, rv, name, val)
	}
	end := fmt.Sprintf(`{"type":"BOOKMARK","resourceVersion":%q,"object":{"metadata":{"resourceVersion":%q,"annotations":{"k8s.io/initial-events-end":"true"}}}}`, r, r)
	p := r + "~"
	all := []string{added("a", "payments:1", p), added("b", "search:1", p), added("c", "payments:2", p), added("d", "payments:3", p), added("e", "billing:1", r)}
	payments := []string{added("a", "payments:1", p), added("c", "payments:2", p), added("d", "payments:3", r)}
	initial := "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"no revision", "", all},
		{"from 0", "&resourceVersion=0", all},
		{"from 0 with bookmarks", "&resourceVersion=0&allowWatchBookmarks=true", all},
		{"sendInitialEvents", initial, append(all[:len(all):len(all)], end)},
		{"filtered, no revision", "&index=team&value=payments", payments},
		{"filtered, from 0", "&index=team&value=payments&resourceVersion=0", payments},
		{"filtered, sendInitialEvents", "&index=team&value=payments" + initial, append(payments[:len(payments):len(payments)], end)},
		{"filtered, one object", "&index=team&value=search&resourceVersion=0", []string{added("b", "search:1", r)}},
		{"filtered, no object, sendInitialEvents", "&index=team&value=nobody" + initial, []string{end}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openBounded(t, ts.URL+"?watch=1"+tc.query)
			defer st.Close()
			for i, want := range tc.want {
				if got := st.Line(t); got != want {
					t.Fatalf("frame %d:\n got %s\nwant %s", i, got, want)
				}
			}
		})
	}

	// After the replay, the watch goes on with the changes, each batch as before.
	st := openBounded(t, ts.URL+"?watch=1&resourceVersion=0")
	for range all {
		st.Line(t)
	}
	r2 := strconv.FormatInt(wiretest.Put(src, "f", "payments:4"), 10)
	if got, want := st.Line(t), added("f", "payments:4", r2); got != want {
		t.Fatalf("the change after the replay:\n got %s\nwant %s", got, want)
	}
}

// batchedSource is a ListerWatcher whose one watch delivers events and says, as
// source/etcd's does for a transaction, which of them are followed by more at their
// revision.
type batchedSource struct {
	events []informer.Event[*wiretest.Obj]
	more   []bool
}

func (s *batchedSource) List(context.Context, informer.ListOptions) (informer.List[*wiretest.Obj], error) {
	return informer.List[*wiretest.Obj]{Revision: "4"}, nil
}

func (s *batchedSource) Watch(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*wiretest.Obj], error) {
	return &batchedWatch{s: s, ctx: ctx, i: -1}, nil
}

type batchedWatch struct {
	s   *batchedSource
	ctx context.Context
	i   int
}

func (w *batchedWatch) Next() (informer.Event[*wiretest.Obj], error) {
	if w.i+1 >= len(w.s.events) {
		<-w.ctx.Done()
		return informer.Event[*wiretest.Obj]{}, w.ctx.Err()
	}
	w.i++
	return w.s.events[w.i], nil
}

func (w *batchedWatch) MoreAtRevision() bool { return w.i >= 0 && w.s.more[w.i] }
func (w *batchedWatch) Stop()                {}

// A PassThrough over a source whose watch groups the changes of one revision (an etcd
// transaction) sends them as a batch, every change but the last with the partial mark,
// so that a Client's WaitForRevision does not count the revision reached halfway.
func TestPassThroughSendsSourceBatches(t *testing.T) {
	ev := func(name, rev string) informer.Event[*wiretest.Obj] {
		return informer.Event[*wiretest.Obj]{Type: informer.Modified, Object: &wiretest.Obj{Name: name, Val: "v"}, Revision: rev}
	}
	src := &batchedSource{
		events: []informer.Event[*wiretest.Obj]{ev("a", "5"), ev("b", "5"), ev("c", "5"), ev("d", "6"), ev("e", "7"), ev("f", "7")},
		more:   []bool{true, true, false, false, true, false},
	}
	ts := httptest.NewServer(NewPassThrough[*wiretest.Obj](src, PassThroughOptions[*wiretest.Obj]{}))
	t.Cleanup(ts.Close)
	st := openBounded(t, ts.URL+"?watch=1&resourceVersion=4")
	defer st.Close()
	for i, want := range []string{"a@5~", "b@5~", "c@5", "d@6", "e@7~", "f@7"} {
		var name, rev string
		fmt.Sscanf(want, "%1s@%s", &name, &rev)
		frame := fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q,"object":{"name":%q,"val":"v"}}`, rev, name)
		if got := st.Line(t); got != frame {
			t.Fatalf("frame %d:\n got %s\nwant %s", i, got, frame)
		}
	}
}

// A PassThrough in front of a Client of a fan-out Server (a proxy tier) passes the Server's
// batches on as batches: the Client's watch says which events share a revision, and the
// PassThrough marks them again.
func TestPassThroughPassesClientBatchesOn(t *testing.T) {
	frame := func(name, rev string) string {
		return fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q,"object":{"name":%q,"val":"v"}}`, rev, name)
	}
	upstream := wiretest.ServeFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for _, l := range []string{frame("a", "5~"), frame("b", "5~"), frame("c", "5"), frame("d", "6")} {
			fmt.Fprintln(w, l)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	client, err := httpsource.NewClient[*wiretest.Obj](upstream.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	if err != nil {
		t.Fatal(err)
	}
	ts := wiretest.ServeFunc(t, NewPassThrough[*wiretest.Obj](client, PassThroughOptions[*wiretest.Obj]{}).ServeHTTP)
	st := openBounded(t, ts.URL+"?watch=1&resourceVersion=4")
	defer st.Close()
	for i, want := range []string{frame("a", "5~"), frame("b", "5~"), frame("c", "5"), frame("d", "6")} {
		if got := st.Line(t); got != want {
			t.Fatalf("frame %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

const modelDeleted = informertest.Deleted

var modelSeeds = flag.Int("model.seeds", 0, "number of seeds of TestModelHTTP (0: 6, or 2 with -short); make soak raises it")

// TestModelHTTP runs seeded random writes through memory source → upstream informer →
// Server → (faults) → Client → downstream informer, with the server killed and restarted
// and connections cut mid-stream, and checks the invariants of the root package's
// TestModel on the downstream handler: convergence of cache and handler to the source,
// per key a subsequence of the key's real states, a valid life cycle.
func TestModelHTTP(t *testing.T) {
	for _, seed := range testkit.Seeds(6, 2, *modelSeeds, 0) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runModelHTTP(t, seed) })
	}
}

func runModelHTTP(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	u := newUpstream(t, memory.Options{})
	history := map[string][]string{}
	write := func(key string) {
		if rng.IntN(4) == 0 {
			if _, ok := u.src.Delete(key); ok {
				history[key] = append(history[key], modelDeleted)
			}
			return
		}
		val := key + "." + strconv.Itoa(len(history[key]))
		history[key] = append(history[key], val)
		wiretest.Put(u.src, key, val)
	}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for range 4 {
		write(keys[rng.IntN(len(keys))])
	}

	// A stable address in front of the current Server: "killed" is 503 and every open
	// connection cut; "restarted" is a new Server of the upstream informer. The front
	// knows which watch streams are open, and can cut one in the middle of a frame.
	var cur atomic.Pointer[Server[string, *wiretest.Obj]]
	watches := newWatchTracker()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := cur.Load()
		if s == nil {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Query().Get("watch") == "" {
			s.ServeHTTP(w, r)
			return
		}
		id := watches.open()
		defer watches.close(id)
		s.ServeHTTP(&cutWriter{ResponseWriter: w, t: watches, id: id}, r)
	}))
	var servers []*Server[string, *wiretest.Obj]
	start := func() {
		s := newServer(t, u, ServerOptions[*wiretest.Obj]{})
		waitSynced(t, s)
		servers = append(servers, s)
		cur.Store(s)
	}
	kill := func() {
		s := cur.Swap(nil)
		if s == nil {
			return
		}
		front.CloseClientConnections()
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
	t.Cleanup(func() {
		kill()
		front.Close()
	})
	start()

	// The downstream handler checks every key's life cycle and keeps the states it saw
	// (the default Coalesce policy: a delete may carry a state merged away).
	v := informertest.NewLifeCycle(func(o *wiretest.Obj) (string, string) { return o.Name, o.Val }, informertest.LifeCycleOptions{Coalesce: true})
	c := newTestClient(t, front.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	d := &wiretest.Mirror{Rec: wiretest.NewRecorder()}
	inf, err := informer.New(c.Ordered(), informer.Options[string, *wiretest.Obj]{
		Key: wiretest.ObjKey, Name: "client", Backoff: wiretest.TestBackoff, ErrorHandler: func(error) {},
		MaxBatch: 1 + rng.IntN(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := inf.AddHandler(v, informer.HandlerOptions{QueueLength: 1 + rng.IntN(4), Policy: informer.QueuePolicy(rng.IntN(2))})
	if err != nil {
		t.Fatal(err)
	}
	d.Inf = inf
	wiretest.Run(t, inf)

	liveCuts, midFrameCuts := 0, 0
	for op := 0; op < 60; op++ {
		switch r := rng.IntN(100); {
		case r < 76:
			write(keys[rng.IntN(len(keys))])
		case r < 84:
			// Cut a live stream: wait for a watch opened since the last cut.
			watches.waitFresh(t)
			front.CloseClientConnections()
			liveCuts++
		case r < 88:
			// Cut a stream in the middle of a frame: the next frame written to a fresh
			// watch is cut after half its bytes, and the connection aborted.
			cut := watches.arm(watches.waitFresh(t))
			// Each put is a change, so a frame for an open watch; if the client was
			// between watches the put may come by a list instead: put again until a
			// frame is cut.
			deadline := time.After(wiretest.WaitTimeout)
		cutting:
			for {
				key := keys[rng.IntN(len(keys))]
				val := key + "." + strconv.Itoa(len(history[key]))
				history[key] = append(history[key], val)
				wiretest.Put(u.src, key, val)
				select {
				case <-cut:
					break cutting
				case <-time.After(50 * time.Millisecond):
				case <-deadline:
					t.Fatalf("seed %d: no frame reached an open watch to be cut", seed)
				}
			}
			midFrameCuts++
		case r < 94:
			kill()
			for range rng.IntN(3) { // writes while the server is down
				write(keys[rng.IntN(len(keys))])
			}
			start()
		default:
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // let the client catch up sometimes
		}
	}
	if cur.Load() == nil {
		start()
	}

	final := map[string]string{}
	for _, o := range u.src.Items() {
		final[o.Name] = o.Val
	}
	deadline := time.Now().Add(wiretest.WaitTimeout)
	for {
		// Converged can hold for a moment while the handler is behind (an earlier delete
		// is the final state too): its queue must be empty as well.
		ok := wiretest.State(wiretest.Cached(inf)) == wiretest.State(u.src.Items()) && v.Converged(final) && reg.Stats().Queued == 0
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: no convergence: cache %q, source %q", seed, wiretest.State(wiretest.Cached(inf)), wiretest.State(u.src.Items()))
		}
		time.Sleep(time.Millisecond) // polling: nothing signals "handler caught up"
	}
	// Every cut hit a stream opened since the previous cut. A frame cut in the middle is
	// bad input: that watch fails and the client lists again. (A plain cut may be absorbed
	// by the client reconnecting within one informer watch, so it is not counted here.)
	st := inf.Stats()
	if failed := st.WatchErrors; failed < uint64(midFrameCuts) {
		t.Errorf("seed %d: %d mid-frame cuts, but only %d failed watches", seed, midFrameCuts, failed)
	}
	if relists := st.Relists; relists < uint64(1+midFrameCuts) {
		t.Errorf("seed %d: %d mid-frame cuts, but only %d lists", seed, midFrameCuts, relists)
	}
	t.Logf("seed %d: %d cuts of live streams, %d mid-frame, %d watches failed", seed, liveCuts, midFrameCuts, inf.Stats().WatchErrors)
	if errs := v.Errors(); len(errs) > 0 {
		t.Fatalf("seed %d: handler: %q", seed, errs)
	}
	for _, k := range v.Keys() {
		// A relist (a frame cut in the middle ends the watch as bad input, and the client
		// lists again) repeats each object's current state as an update, as documented
		// for informers without Options.Revision: a state seen twice in a row is one.
		seen, h := slices.Compact(v.States(k)), history[k]
		if !informertest.IsSubsequence(seen, h) {
			t.Fatalf("seed %d, key %s: saw %q, not a subsequence of %q", seed, k, seen, h)
		}
	}
}

// watchTracker knows the watch streams open at the front, and arms a cut in the middle of
// the next frame written to one.
type watchTracker struct {
	mu      sync.Mutex
	nextID  int
	openIDs map[int]bool
	lastCut int // streams opened up to this id have been cut
	changed chan struct{}
	armed   chan struct{} // closed by the writer that performs the armed cut
	armMin  int           // the first watch id the armed cut may hit
}

func newWatchTracker() *watchTracker {
	return &watchTracker{openIDs: map[int]bool{}, changed: make(chan struct{}, 1)}
}

func (w *watchTracker) open() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	w.openIDs[w.nextID] = true
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return w.nextID
}

func (w *watchTracker) close(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.openIDs, id)
}

// waitFresh waits until a watch opened after the last cut is open, marks every watch open
// now as cut, and returns the first id of the watches opened since the last cut.
func (w *watchTracker) waitFresh(t *testing.T) int {
	t.Helper()
	deadline := time.After(wiretest.WaitTimeout)
	for {
		w.mu.Lock()
		for id := range w.openIDs {
			if id > w.lastCut {
				first := w.lastCut + 1
				w.lastCut = w.nextID
				w.mu.Unlock()
				return first
			}
		}
		w.mu.Unlock()
		select {
		case <-w.changed:
		case <-deadline:
			t.Fatal("no watch stream opened: the client did not reconnect")
		}
	}
}

// arm makes the next frame written to a watch opened as minID or later the one cut (older
// streams may be dying from an earlier cut); the returned channel is closed once it has
// been.
func (w *watchTracker) arm(minID int) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = make(chan struct{})
	w.armMin = minID
	return w.armed
}

// take reports whether the writer of watch id must cut its next frame, and disarms.
func (w *watchTracker) take(id int) (chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed == nil || id < w.armMin {
		return nil, false
	}
	c := w.armed
	w.armed = nil
	return c, true
}

// cutWriter is the ResponseWriter of one watch stream at the front: when armed it writes
// the start of an event frame, flushes it, and aborts the connection.
type cutWriter struct {
	http.ResponseWriter
	t  *watchTracker
	id int
}

func (c *cutWriter) Write(p []byte) (int, error) {
	// Cut inside an event frame (a write may also be a keep-alive or a frame's end): just
	// after the start of its "type" field.
	if at := bytes.Index(p, []byte(`"type"`)); at >= 0 {
		if done, ok := c.t.take(c.id); ok {
			c.ResponseWriter.Write(p[:at+3])
			http.NewResponseController(c.ResponseWriter).Flush()
			close(done)
			panic(http.ErrAbortHandler) // the server closes the connection mid-chunk
		}
	}
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (c *cutWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
