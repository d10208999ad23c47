package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// A client informer that listed an ordered upstream at revision 0 (empty) and does not ask
// for history tags (an older Client) watches from "0", which asks the Server for a replay
// of its state: the replay is one batch at the state's revision, so WaitForRevision of
// that revision returns only once the client's cache holds the whole state (the matching
// subset, filtered), however slowly the replay arrives. (A Client that asks for tags
// watches from "0@<tag>", a revision like any other.)
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
			copts.PrepareRequest = withoutHistoryTags
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

// withoutHistoryTags is a Client's PrepareRequest that makes it ask as a Client that does
// not know history tags: its revisions are the upstream's alone.
func withoutHistoryTags(r *http.Request) error {
	r.Header.Del(httpsource.HistoryHeader)
	return nil
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

func (w *batchedWatch) Stop() {}

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

// silencer serves a handler and, once frozen, drops every byte of the responses already
// begun, as a middlebox that lost a connection without a reset: the client sees a
// server gone silent. Responses begun later are served. watches counts watch requests.
type silencer struct {
	h       http.Handler
	mu      sync.Mutex
	open    []*atomic.Bool
	watches atomic.Int64
	flushed atomic.Int64 // flushes of watches' responses that reached the client: their headers at least
}

func (s *silencer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var flushed *atomic.Int64
	if r.URL.Query().Get("watch") != "" {
		s.watches.Add(1)
		flushed = &s.flushed
	}
	mute := new(atomic.Bool)
	s.mu.Lock()
	s.open = append(s.open, mute)
	s.mu.Unlock()
	s.h.ServeHTTP(silentWriter{w, mute, flushed}, r)
}

func (s *silencer) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.open {
		m.Store(true)
	}
}

// serveSilenceable serves, behind a silencer on loopback (ConnContext installed), a Server
// with the bookmark interval over an upstream that holds a=1, and returns the silencer,
// the upstream and an informer (default Client and informer options) that has converged on a=1 and watches.
func serveSilenceable(t testing.TB, interval time.Duration) (*silencer, *upstream, *wiretest.Mirror) {
	t.Helper()
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{BookmarkInterval: interval})
	sil := &silencer{h: srv}
	ts := serveHTTP(t, srv, sil, withConnContext)
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}), "silent", nil)
	wiretest.Converge(t, d, func() string { return "a=1" })
	wiretest.Eventually(t, "the client's watch", func() bool { return srv.Stats().OpenWatches == 1 })
	// The watch's header reached the client (a freeze before it would leave the client
	// waiting for a header, not noticing a silence).
	wiretest.Eventually(t, "the client's watch's header", func() bool { return sil.flushed.Load() >= 1 })
	return sil, up, d
}

type silentWriter struct {
	http.ResponseWriter
	mute    *atomic.Bool
	flushed *atomic.Int64 // counts the flushes that reach the client; nil: not counted
}

func (w silentWriter) Write(b []byte) (int, error) {
	if w.mute.Load() {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w silentWriter) FlushError() error {
	if w.mute.Load() {
		return nil
	}
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil && w.flushed != nil {
		w.flushed.Add(1)
	}
	return err
}

func (w silentWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A server that goes silent is noticed within two of its bookmark intervals with the
// default options of Client and informer (whose watches ask for a timeout of minutes):
// the Server tells its interval (a response header), the watch ends with an error that
// matches informer.ErrRetryable, LastError has it, and the informer watches again.
func TestClientNoticesSilentServer(t *testing.T) {
	const interval = time.Second
	sil, up, d := serveSilenceable(t, interval)
	watches, seen := sil.watches.Load(), len(d.Rec.Errors())
	frozen := time.Now()
	sil.freeze()
	var noticed time.Duration
	wiretest.Eventually(t, "the silence to be noticed", func() bool {
		for _, err := range d.Rec.Errors()[seen:] {
			if errors.Is(err, informer.ErrRetryable) && strings.Contains(err.Error(), "bookmark interval") {
				noticed = time.Since(frozen)
				return true
			}
		}
		return false
	})
	t.Logf("silence noticed after %v (bookmark interval %v)", noticed, interval)
	if noticed > 2*interval+interval/2 {
		t.Errorf("silence noticed after %v, want within 2 bookmark intervals (%v)", noticed, 2*interval)
	}
	wiretest.Eventually(t, "a new watch", func() bool { return sil.watches.Load() > watches })
	wiretest.Put(up.src, "a", "2")
	wiretest.Converge(t, d, func() string { return "a=2" })
}
