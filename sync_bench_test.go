package informer_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
)

// BenchmarkInitialSync measures what the informer adds to a first list: 100,000 objects
// handed out by a source that costs nothing (the items are built before timing), from Run
// until WaitForCacheSync returns, with no handler, as a cache-only informer is started.
// The list comes in pages of 50,000, as source/etcd's default pages do.
func BenchmarkInitialSync(b *testing.B) {
	const n, page = 100_000, 50_000
	items := make([]*benchObj, n)
	for i := range items {
		ns, name := fmt.Sprintf("ns-%03d", i%benchNS), fmt.Sprintf("obj-%07d", i)
		items[i] = &benchObj{Key: "/bench/sync/" + fmt.Sprintf("%06d", i), Namespace: ns, Name: name, Revision: "7", Payload: make([]byte, 64)}
	}
	lw := informer.ListerWatcherFuncs[*benchObj]{
		ListFunc: func(_ context.Context, opts informer.ListOptions) (informer.List[*benchObj], error) {
			from := 0
			if opts.Continue != "" {
				fmt.Sscan(opts.Continue, &from)
			}
			to := min(from+page, n)
			l := informer.List[*benchObj]{Items: append([]*benchObj(nil), items[from:to]...), Revision: "7"}
			if to < n {
				l.Continue = fmt.Sprint(to)
			}
			return l, nil
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*benchObj], error) {
			return informer.ChanWatch[*benchObj](ctx, nil, nil), nil
		},
	}
	b.ReportAllocs()
	for range b.N {
		inf, err := informer.New[string, *benchObj](lw, informer.Options[string, *benchObj]{Key: func(o *benchObj) (string, error) { return o.Key, nil }, PageSize: page})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- inf.Run(ctx) }()
		if err := informer.WaitForCacheSync(ctx, inf); err != nil || inf.Len() != n {
			b.Fatalf("synced %d of %d: %v", inf.Len(), n, err)
		}
		cancel()
		<-done
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
}

// A key listed twice in a first list: an initial add, then an update by the later
// object, as for any list, and the cache keeps the later one.
func TestInformer_FirstListWithADuplicateKey(t *testing.T) {
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(context.Context, informer.ListOptions) (informer.List[*obj], error) {
			return informer.List[*obj]{Items: []*obj{newObj("b", "g", "1"), newObj("a", "g", "1"), newObj("b", "g", "2")}, Revision: "3"}, nil
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*obj], error) {
			return informer.ChanWatch[*obj](ctx, nil, nil), nil
		},
	}
	reported := make(chan error, 10)
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{Key: objKeyErr, Name: "dups", ErrorHandler: func(err error) { reported <- err }})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := runRecorded(t, inf)
	ev.Expect(t, "add*b=1", "add*a=1", "update b=1→2")
	if got, _ := inf.Get("b"); got == nil || got.Val != "2" || inf.Len() != 2 {
		t.Fatalf("cache: b=%+v, %d objects; want b=2 and 2 objects", got, inf.Len())
	}
	if d := inf.Stats().Duplicates; d != 1 {
		t.Fatalf("Stats.Duplicates %d, want 1", d)
	}
	expectDuplicateReported(t, reported, `informer "dups"`, `"b"`)
}

// expectDuplicateReported waits for the one error a list with a duplicate key reports,
// and checks that it names the informer and the key and that no other error came.
func expectDuplicateReported(t *testing.T, reported <-chan error, informerName, key string) {
	t.Helper()
	select {
	case err := <-reported:
		if msg := err.Error(); !errors.Is(err, informer.ErrBadInput) || !strings.Contains(msg, informerName) || !strings.Contains(msg, key) {
			t.Fatalf("reported %q; want an ErrBadInput naming %s and the key %s", msg, informerName, key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error reported for the duplicate key")
	}
	select {
	case err := <-reported:
		t.Fatalf("a second error reported: %v", err)
	default:
	}
}

// A relist that holds keys more than once, and an ADDED event for a cached key: each is
// applied (the last state wins) and counted in Stats.Duplicates; the list reports once,
// naming its first duplicate key, however many keys repeat.
func TestInformer_RelistAndAddedDuplicates(t *testing.T) {
	var lists atomic.Int32
	events := make(chan informer.Event[*obj], 1)
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(context.Context, informer.ListOptions) (informer.List[*obj], error) {
			if lists.Add(1) == 1 {
				return informer.List[*obj]{Items: []*obj{newObj("a", "g", "1")}, Revision: "1"}, nil
			}
			items := []*obj{newObj("a", "g", "2"), newObj("c", "g", "1"), newObj("a", "g", "3"), newObj("c", "g", "2"), newObj("c", "g", "3")}
			return informer.List[*obj]{Items: items, Revision: "5"}, nil
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*obj], error) {
			if lists.Load() == 1 {
				return informer.ChanWatch[*obj](ctx, events, nil), nil
			}
			return informer.ChanWatch[*obj](ctx, nil, nil), nil
		},
	}
	reported := make(chan error, 10)
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{Key: objKeyErr, Name: "dups", Backoff: fastBackoff, ErrorHandler: func(err error) { reported <- err }})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := runRecorded(t, inf)
	ev.Expect(t, "add*a=1")
	events <- informer.Event[*obj]{Type: informer.Added, Object: newObj("a", "g", "9"), Revision: "2"}
	ev.Expect(t, "add*a=1", "update a=1→9")
	if d := inf.Stats().Duplicates; d != 1 {
		t.Fatalf("Stats.Duplicates %d after an ADDED of a cached key, want 1", d)
	}
	select {
	case err := <-reported:
		t.Fatalf("an ADDED of a cached key reported %v; it is only counted", err)
	default:
	}
	events <- informer.Event[*obj]{Type: informer.Added, Revision: "3"} // nil object: the watch fails, the informer relists
	<-reported                                                          // the nil object
	ev.Expect(t, "add*a=1", "update a=1→9", "update a=9→2", "update a=2→3", "add c=1", "update c=1→2", "update c=2→3")
	if d := inf.Stats().Duplicates; d != 4 {
		t.Fatalf("Stats.Duplicates %d, want 4 (one ADDED, three listed again)", d)
	}
	expectDuplicateReported(t, reported, `informer "dups"`, `"a"`)
}

// A first list read by pages that fails after its first page: the handlers have that
// page's objects as initial adds, and the next list brings the cache to its state, with
// an update, an add and a delete for what changed in between.
func TestInformer_FirstListFailingAfterAPage(t *testing.T) {
	var lists atomic.Int32
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(_ context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
			switch n := lists.Add(1); {
			case n == 1:
				return informer.List[*obj]{Items: []*obj{newObj("a", "g", "1"), newObj("b", "g", "1")}, Revision: "3", Continue: "next"}, nil
			case n == 2:
				return informer.List[*obj]{}, errors.New("connection reset")
			default:
				return informer.List[*obj]{Items: []*obj{newObj("a", "g", "2"), newObj("c", "g", "1")}, Revision: "5"}, nil
			}
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*obj], error) {
			return informer.ChanWatch[*obj](ctx, nil, nil), nil
		},
	}
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{Key: objKeyErr, PageSize: 2, Backoff: fastBackoff, ErrorHandler: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	ev, ctx := runRecorded(t, inf)
	ev.Expect(t, "add*a=1", "add*b=1", "update a=1→2", "add*c=1", "delete?b=1")
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	if keys := informer.ReadKeys(inf); len(keys) != 2 || keys[0] != "a" || keys[1] != "c" || inf.Snapshot().Revision() != "5" {
		t.Fatalf("cache %v at %q; want [a c] at 5", keys, inf.Snapshot().Revision())
	}
}

// txnWatch sends two changes of one revision, the second only once released, and says
// that the first is followed by more of its revision. asked is closed when the second is
// asked for: the first has been queued.
type txnWatch struct {
	ctx     context.Context
	sent    int
	asked   chan struct{}
	release chan struct{}
}

func (w *txnWatch) Next() (informer.Event[*obj], error) {
	w.sent++
	switch w.sent {
	case 1:
		return informer.Event[*obj]{Type: informer.Added, Object: newObj("a", "g", "1"), Revision: "5"}, nil
	case 2:
		close(w.asked)
		select {
		case <-w.release:
			return informer.Event[*obj]{Type: informer.Added, Object: newObj("b", "g", "1"), Revision: "5"}, nil
		case <-w.ctx.Done():
			return informer.Event[*obj]{}, w.ctx.Err()
		}
	}
	<-w.ctx.Done()
	return informer.Event[*obj]{}, w.ctx.Err()
}

func (w *txnWatch) MoreAtRevision() bool { return w.sent == 1 }

func (w *txnWatch) Stop() {}

// A transaction's changes share a revision: with the first of two queued, neither is in
// the cache and the revision is not reached (WaitForRevision, Snapshot.Revision); with
// both queued, both are in and it is.
func TestInformer_TransactionRevisionReachedWhole(t *testing.T) {
	release, asked := make(chan struct{}), make(chan struct{})
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(context.Context, informer.ListOptions) (informer.List[*obj], error) {
			return informer.List[*obj]{Revision: "4"}, nil
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*obj], error) {
			return &txnWatch{ctx: ctx, asked: asked, release: release}, nil
		},
	}
	ordered := struct {
		informer.ListerWatcher[*obj]
		informer.RevisionComparer
	}{lw, numericRevisions{}}
	inf, err := informer.New[string, *obj](ordered, informer.Options[string, *obj]{Key: objKeyErr})
	if err != nil {
		t.Fatal(err)
	}
	runRecorded(t, inf)
	<-asked
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if err := inf.WaitForRevision(stopped, "5"); err == nil || inf.Snapshot().Revision() == "5" {
		t.Fatalf("revision 5 reached with one of its two changes queued (WaitForRevision: %v, snapshot at %q)", err, inf.Snapshot().Revision())
	}
	if _, ok := inf.Get("a"); ok {
		t.Fatal("the first change of revision 5 is in the cache before the second arrived")
	}
	close(release)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := inf.WaitForRevision(wctx, "5"); err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.Get("b"); !ok {
		t.Fatal("revision 5 reached without its second change")
	}
}

// runRecorded adds a recorder to inf as its handler and runs inf until the test ends; it
// returns the recorder and the context inf runs with.
func runRecorded(t *testing.T, inf *informer.Informer[string, *obj]) (*events, context.Context) {
	t.Helper()
	ev := newEvents()
	if _, err := inf.AddHandler(ev, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ev, ctx
}

// numericRevisions orders decimal revisions.
type numericRevisions struct{}

func (numericRevisions) CompareRevisions(a, b string) (int, error) {
	x, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return 0, err
	}
	y, err := strconv.ParseInt(b, 10, 64)
	if err != nil {
		return 0, err
	}
	return cmp.Compare(x, y), nil
}

// batchWatch sends its events, each but the last said to be followed by more of its
// revision, then ends with end, or (end nil) waits for the end of ctx.
type batchWatch struct {
	ctx    context.Context
	events []informer.Event[*obj]
	end    error
	sent   int
}

func (w *batchWatch) Next() (informer.Event[*obj], error) {
	if w.sent < len(w.events) {
		w.sent++
		return w.events[w.sent-1], nil
	}
	if w.end != nil {
		return informer.Event[*obj]{}, w.end
	}
	<-w.ctx.Done()
	return informer.Event[*obj]{}, w.ctx.Err()
}

func (w *batchWatch) MoreAtRevision() bool { return w.sent < len(w.events) }

func (w *batchWatch) Stop() {}

// A transaction whose last change the informer leaves out (its Transform fails) is still
// applied and its revision reached: the change left out ends it.
func TestInformer_TransactionWithItsLastChangeLeftOut(t *testing.T) {
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(context.Context, informer.ListOptions) (informer.List[*obj], error) {
			return informer.List[*obj]{Revision: "4"}, nil
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*obj], error) {
			return &batchWatch{ctx: ctx, events: []informer.Event[*obj]{
				{Type: informer.Added, Object: newObj("a", "g", "1"), Revision: "5"},
				{Type: informer.Added, Object: newObj("b", "g", "bad"), Revision: "5"},
			}}, nil
		},
	}
	ordered := struct {
		informer.ListerWatcher[*obj]
		informer.RevisionComparer
	}{lw, numericRevisions{}}
	reported := make(chan error, 10)
	inf, err := informer.New[string, *obj](ordered, informer.Options[string, *obj]{
		Key:          objKeyErr,
		ErrorHandler: func(err error) { reported <- err },
		Transform: func(o *obj) (*obj, error) {
			if o.Val == "bad" {
				return nil, errors.New("cannot transform")
			}
			return o, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runRecorded(t, inf)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := inf.WaitForRevision(ctx, "5"); err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.Get("a"); !ok || inf.Len() != 1 || inf.Snapshot().Revision() != "5" {
		t.Fatalf("cache %v at %q; want a alone at 5", informer.ReadKeys(inf), inf.Snapshot().Revision())
	}
	if err := <-reported; !strings.Contains(err.Error(), "cannot transform") {
		t.Fatalf("reported %v", err)
	}
}

// Two relists in a row at one revision, while a Block handler keeps the writer behind:
// both lists' objects for a key are applied in one batch, and neither list holds a key
// twice, so no duplicate is counted or reported.
func TestInformer_TwoRelistsAtOneRevisionAreNoDuplicate(t *testing.T) {
	var lists atomic.Int32
	stalled, relisted := make(chan struct{}), make(chan struct{})
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(ctx context.Context, _ informer.ListOptions) (informer.List[*obj], error) {
			if lists.Add(1) == 1 {
				return informer.List[*obj]{Items: []*obj{newObj("a", "g", "1")}, Revision: "1"}, nil
			}
			select {
			case <-stalled:
			case <-ctx.Done():
				return informer.List[*obj]{}, ctx.Err()
			}
			return informer.List[*obj]{Items: []*obj{newObj("a", "g", "2"), newObj("b", "g", "1")}, Revision: "3"}, nil
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*obj], error) {
			expired := fmt.Errorf("too old: %w", informer.ErrExpired)
			switch lists.Load() {
			case 1: // a change, then the watch expires: list again
				return &batchWatch{ctx: ctx, events: []informer.Event[*obj]{{Type: informer.Added, Object: newObj("d", "g", "1"), Revision: "2"}}, end: expired}, nil
			case 2: // the watch expires at once: list again, at the same revision
				return nil, expired
			}
			close(relisted)
			return informer.ChanWatch[*obj](ctx, nil, nil), nil
		},
	}
	reported := make(chan error, 10)
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{Key: objKeyErr, Name: "relists", Backoff: fastBackoff, ErrorHandler: func(err error) { reported <- err }})
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvents().Hold()
	if _, err := inf.AddHandler(ev, informer.HandlerOptions{Policy: informer.Block, QueueLength: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() { ev.Release(); cancel(); <-done })
	// The handler holds the first list's add, so the writer, having applied the watch's
	// change and handed it over, waits for room in the handler's queue, whether the change
	// came in the list's batch or in one of its own: both relists queue behind it.
	waitUntil(t, func() bool { _, ok := inf.Get("d"); return ok })
	close(stalled)
	<-relisted
	ev.Release()
	ev.Expect(t, "add*a=1", "add d=1", "update a=1→2", "resync a=2", "add b=1", "resync b=1", "delete?d=1")
	if d := inf.Stats().Duplicates; d != 0 {
		t.Errorf("Stats.Duplicates %d, want 0", d)
	}
	select {
	case err := <-reported:
		t.Fatalf("reported %v", err)
	default:
	}
}
