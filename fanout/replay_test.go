package fanout

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/informer-go/informer/internal/wiretest"

	httpsource "github.com/informer-go/informer/source/http"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

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
