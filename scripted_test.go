package informer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/informer-go/informer/internal/testkit"
)

// scripted is a minimal source for the package's own tests: a fixed list, then the events
// sent on a channel.
type scripted struct {
	items  []string
	rev    string
	events chan Event[string]
}

func (s *scripted) List(ctx context.Context, opts ListOptions) (List[string], error) {
	return List[string]{Items: slices.Clone(s.items), Revision: s.rev}, nil
}

func (s *scripted) Watch(ctx context.Context, opts WatchOptions) (Watch[string], error) {
	return ChanWatch(ctx, s.events, nil), nil
}

// The order of notifications end to end on a scripted source: the handler sees the list, then each event, in
// order, and the cache follows.
func TestInformer_ScriptedSource(t *testing.T) {
	src := &scripted{items: []string{"a=1", "b=1"}, rev: "2", events: make(chan Event[string])}
	key := func(s string) (string, error) { return s[:1], nil }
	inf, err := New[string, string](src, Options[string, string]{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	inf.AddHandler(r, HandlerOptions{})
	runSynced(t, inf)
	if got := inf.Stats().ReceivedRevision; got != "2" { // received before the cache had the list
		t.Fatalf("ReceivedRevision = %q once synced, want the list's 2", got)
	}
	src.events <- Event[string]{Type: Modified, Object: "a=2", Revision: "3"}
	src.events <- Event[string]{Type: Added, Object: "c=1", Revision: "4"}
	src.events <- Event[string]{Type: Deleted, Object: "b=1", Revision: "5"}
	r.Expect(t, "add*a=1", "add*b=1", "update a=1→2", "add c=1", "delete b=1")
	if got := ReadList(inf); !slices.Equal(got, []string{"a=2", "c=1"}) {
		t.Fatalf("cache %q", got)
	}
	if inf.Stats().ReceivedRevision != "5" {
		t.Fatalf("revision %q", inf.Stats().ReceivedRevision)
	}
}

// A source that does not know a deleted object's last state sends the key alone with
// LastStateUnknown: OnDelete receives the state the handler was last given, as an
// observed delete (finalStateUnknown false), and no index function sees the key-only
// object. A key the cache never held is not notified.
func TestInformer_DeleteOfKeyAloneGetsCachedState(t *testing.T) {
	src := &scripted{items: []string{"a=1", "b=1"}, rev: "2", events: make(chan Event[string])}
	var reported []error
	var mu sync.Mutex
	inf, err := New[string, string](src, Options[string, string]{
		Key: func(s string) (string, error) { return s[:1], nil },
		Indexers: Indexers[string]{"val": IndexBy(func(s string) (string, error) {
			if len(s) < 3 {
				return "", fmt.Errorf("%q has no value", s)
			}
			return s[2:], nil
		})},
		ErrorHandler: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	inf.AddHandler(r, HandlerOptions{})
	runSynced(t, inf)
	src.events <- Event[string]{Type: Modified, Object: "a=2", Revision: "3"}
	src.events <- Event[string]{Type: Deleted, Object: "a=", Revision: "4", LastStateUnknown: true}
	src.events <- Event[string]{Type: Deleted, Object: "z=", Revision: "5", LastStateUnknown: true}
	src.events <- Event[string]{Type: Deleted, Object: "b=1", Revision: "6"}
	r.Expect(t, "add*a=1", "add*b=1", "update a=1→2", "delete a=2", "delete b=1")
	r.ExpectNoMore(t)
	if got := ReadList(inf); len(got) != 0 {
		t.Fatalf("cache %q, want empty", got)
	}
	if vals, err := inf.IndexValues("val"); err != nil || len(slices.Collect(vals)) != 0 {
		t.Fatalf("index values %q (%v), want none", slices.Collect(vals), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 0 {
		t.Fatalf("reported %v", reported)
	}
}

// Bad input: a list whose pages report different revisions is reported (ErrBadInput) and
// listed again; the cache is never filled from the inconsistent list.
func TestReflector_MalformedPageRelists(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	lw := ListerWatcherFuncs[string]{
		ListFunc: func(ctx context.Context, opts ListOptions) (List[string], error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			switch {
			case calls == 1: // first page of the bad list
				return List[string]{Items: []string{"a=1"}, Revision: "5", Continue: "p2"}, nil
			case calls == 2: // its second page claims another revision
				return List[string]{Items: []string{"b=1"}, Revision: "9"}, nil
			case opts.Continue == "":
				return List[string]{Items: []string{"a=2"}, Revision: "10", Continue: "p2"}, nil
			default:
				return List[string]{Items: []string{"b=2"}, Revision: "10"}, nil
			}
		},
		WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[string], error) {
			return ChanWatch[string](ctx, nil, nil), nil
		},
	}
	var reported testkit.Errors
	inf, _ := New[string, string](lw, Options[string, string]{
		Key:          func(s string) (string, error) { return s[:1], nil },
		Backoff:      Backoff{Initial: time.Millisecond, Max: time.Millisecond, Jitter: -1},
		ErrorHandler: reported.Report,
	})
	runSynced(t, inf)
	if got := ReadList(inf); !slices.Equal(got, []string{"a=2", "b=2"}) {
		t.Fatalf("cache %q, want the consistent relist", got)
	}
	if got := reported.All(); len(got) != 1 || !errors.Is(got[0], ErrBadInput) {
		t.Fatalf("reported %v", got)
	}
	if inf.Stats().SourceErrors != 1 {
		t.Fatal("not counted")
	}
}

// reportingSource is a scripted source that reports errors it finds without failing a
// call, through the sink New gives it.
type reportingSource struct {
	scripted
	sinks []func(error)
}

func (s *reportingSource) ReportErrorsTo(report func(error)) { s.sinks = append(s.sinks, report) }

// New hands a source that implements ErrorReporting the informer's error sink: what the
// source reports reaches ErrorHandler and Stats with no wiring by the user. Key returns the
// informer's key.
func TestInformer_SourceReportsThroughTheInformer(t *testing.T) {
	src := &reportingSource{}
	var got []error
	inf, err := New[string, string](src, Options[string, string]{
		Name:         "mirror",
		Key:          func(s string) (string, error) { return "k/" + s, nil },
		ErrorHandler: func(err error) { got = append(got, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(src.sinks) != 1 {
		t.Fatalf("New called ReportErrorsTo %d times, want 1", len(src.sinks))
	}
	bad := fmt.Errorf("etcd: key /x: %w", ErrDecode)
	src.sinks[0](bad)
	if len(got) != 1 || got[0] != bad || inf.Stats().DecodeErrors != 1 {
		t.Fatalf("reported %v, DecodeErrors %d", got, inf.Stats().DecodeErrors)
	}
	if k, err := inf.Key("a"); k != "k/a" || err != nil {
		t.Fatalf("Key = %q, %v", k, err)
	}
}

// While changes are queued, each read of an Informer first gives way to the informer's
// goroutines (one runtime.Gosched), so that readers in a tight loop do not starve the
// writer; a read with nothing queued does not.
func TestInformer_ReadsGiveWayWhileChangesAreQueued(t *testing.T) {
	var yields atomic.Int64
	giveWay = func() { yields.Add(1) }
	t.Cleanup(func() { giveWay = runtime.Gosched })

	src := &scripted{items: []string{"a=1"}, rev: "1", events: make(chan Event[string])}
	key := func(s string) (string, error) { return s[:1], nil }
	inf, err := New[string, string](src, Options[string, string]{Key: key, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder().Hold()
	if _, err := inf.AddHandler(r, HandlerOptions{QueueLength: 1, Policy: Block}); err != nil {
		t.Fatal(err)
	}
	runSynced(t, inf, r.Release)
	if inf.Get("a"); yields.Load() != 0 {
		t.Fatalf("a read with nothing queued gave way %d times", yields.Load())
	}

	// The handler holds its first call, so the informer stalls once the handler's queue
	// is full: of the six adds, the last ones stay queued. The reflector asks for an
	// event only after it queued the one before, so when the last send returns, "f" is
	// queued at least.
	for i, k := range []string{"b", "c", "d", "e", "f", "g"} {
		src.events <- Event[string]{Type: Added, Object: k + "=1", Revision: strconv.Itoa(i + 2)}
	}
	inf.Get("a")
	inf.Len()
	ReadByIndex(inf, "none", "x") // an error, after giving way
	if got := yields.Load(); got != 3 {
		t.Fatalf("three reads with changes queued gave way %d times, want 3", got)
	}

	// Once the handler has seen the last add, its key was popped: nothing is queued.
	r.Release()
	r.Expect(t, "add*a=1", "add b=1", "add c=1", "add d=1", "add e=1", "add f=1", "add g=1")
	before := yields.Load()
	if _, ok := inf.Get("g"); !ok {
		t.Fatal(`"g" is not cached after the handler saw it`)
	}
	if got := yields.Load() - before; got != 0 {
		t.Fatalf("a read after the queue drained gave way %d times", got)
	}
}

// Batch sizes: Options.MaxBatch keys; when it is left to the informer, 1024, or, while
// goroutines read the cache, up to 16384 keys as far as every Coalesce handler's queue has
// room for their deltas (a Block handler takes any batch whole), and 1024 at least.
func TestInformer_BatchLimits(t *testing.T) {
	const unlimited = math.MaxInt
	key := func(s string) (string, error) { return s, nil }
	for _, c := range []struct {
		name       string
		maxBatch   int
		handlers   []HandlerOptions
		reading    bool
		keys, dels int
	}{
		{"no readers", 0, nil, false, 1024, unlimited},
		{"readers, no handler", 0, nil, true, 16384, unlimited},
		{"readers, Block handlers", 0, []HandlerOptions{{Policy: Block}, {Policy: Block, QueueLength: 1}}, true, 16384, unlimited},
		{"readers, a Coalesce handler with room for 5000", 0, []HandlerOptions{{Policy: Block}, {QueueLength: 5000}}, true, 16384, 5000},
		{"readers, the smallest room decides", 0, []HandlerOptions{{QueueLength: 5000}, {QueueLength: 3000}}, true, 16384, 3000},
		{"readers, a Coalesce handler with room for less than 1024", 0, []HandlerOptions{{QueueLength: 100}}, true, 1024, unlimited},
		{"MaxBatch set, readers", 10, []HandlerOptions{{Policy: Block}}, true, 10, unlimited},
		{"MaxBatch set, no readers", 10, nil, false, 10, unlimited},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &scripted{rev: "1", events: make(chan Event[string])}
			inf, err := New[string, string](src, Options[string, string]{Key: key, MaxBatch: c.maxBatch})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range c.handlers {
				if _, err := inf.AddHandler(newRecorder(), o); err != nil {
					t.Fatal(err)
				}
			}
			inf.store.reading.Store(c.reading)
			if keys, dels := inf.write.batchLimits(); keys != c.keys || dels != c.dels {
				t.Fatalf("batchLimits() = %d keys, %d deltas; want %d, %d", keys, dels, c.keys, c.dels)
			}
		})
	}
}

// runSynced runs inf until the end of the test (testkit.Run) and waits for its first sync.
func runSynced[K comparable, V any](t testing.TB, inf *Informer[K, V], release ...func()) {
	t.Helper()
	if WaitForCacheSync(testkit.Run(t, inf, release...), inf) != nil {
		t.Fatal("no sync")
	}
}

// A source that outlives the informers built over it does not keep them: the function New
// hands it holds the informer weakly, so a stopped informer and its cache are collected
// once the program drops them, and what the source reports after that goes nowhere.
func TestInformer_SourceDoesNotKeepTheInformer(t *testing.T) {
	src := &reportingSource{scripted: scripted{items: []string{"a=1"}, rev: "1", events: make(chan Event[string])}}
	collected := func() weak.Pointer[Informer[string, string]] {
		inf, err := New[string, string](src, Options[string, string]{Key: func(s string) (string, error) { return s[:1], nil }})
		if err != nil {
			t.Fatal(err)
		}
		testkit.SyncThenStop(t, inf)
		return weak.Make(inf)
	}()
	if !testkit.Collected(collected) {
		t.Fatal("the informer is still reachable after it stopped and the program dropped it: the source keeps it")
	}
	src.sinks[0](fmt.Errorf("etcd: key /x: %w", ErrDecode)) // reaches no one, and does not panic
}

// An informer that stopped hears no more from its source, though the program keeps it: what
// the source reports afterwards comes from the calls of other informers over it, and
// reaches neither the stopped one's ErrorHandler nor its Stats.
func TestInformer_StoppedInformerHearsNoMoreFromItsSource(t *testing.T) {
	src := &reportingSource{scripted: scripted{items: []string{"a=1"}, rev: "1", events: make(chan Event[string])}}
	var reported testkit.Errors
	inf, err := New[string, string](src, Options[string, string]{Key: func(s string) (string, error) { return s[:1], nil }, ErrorHandler: reported.Report})
	if err != nil {
		t.Fatal(err)
	}
	testkit.SyncThenStop(t, inf)
	src.sinks[0](fmt.Errorf("etcd: key /x: %w", ErrDecode)) // another informer's list, say
	if got := reported.All(); len(got) != 0 || inf.Stats().DecodeErrors != 0 {
		t.Fatalf("the stopped informer was told %v (DecodeErrors %d), want nothing", got, inf.Stats().DecodeErrors)
	}
}
