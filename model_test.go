package informer_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

var (
	modelSeeds = flag.Int("model.seeds", 200, "number of seeded runs of TestModel (raise for soak runs)")
	modelOps   = flag.Int("model.ops", 120, "operations per run of TestModel")
	modelSeed  = flag.Uint64("model.seed", 0, "run only this seed of TestModel (to reproduce a failure)")
)

// deleted marks a delete in a key's history.
const deleted = informertest.Deleted

// view is one handler of the model: informertest's life-cycle checker, which keeps the
// states it saw per key, with faults of its own (slow, panicking on one state).
type view struct {
	*informertest.LifeCycle[*obj]
	name    string
	panicOn string // record, then panic, on objects with this value
	slow    bool
}

func newView(name string) *view { return &view{name: name} }

func (v *view) maybe(o *obj) {
	if v.slow {
		time.Sleep(50 * time.Microsecond) // a slow handler: the point of the test, not synchronisation
	}
	if v.panicOn != "" && o.Val == v.panicOn {
		panic("model handler panic on " + o.Val)
	}
}

func (v *view) OnAdd(o *obj, initial bool) { v.LifeCycle.OnAdd(o, initial); v.maybe(o) }
func (v *view) OnUpdate(old, new *obj)     { v.LifeCycle.OnUpdate(old, new); v.maybe(new) }
func (v *view) OnDelete(o *obj, unknown bool) {
	v.LifeCycle.OnDelete(o, unknown)
	v.maybe(o)
}

// TestModel runs seeded random scenarios against the in-memory source and checks the
// guarantees of doc.go: the cache converges to the source; each handler sees, per key, a
// subsequence of the key's real states, in order, with a valid life cycle (no add on top
// of an add, no update or delete of a key it was not told of), ending at the final state;
// WaitForRevision never returns before its revision is visible; HasSynced never comes
// before the initial list is in the cache. A failing seed is printed; rerun it with
// -model.seed=N.
func TestModel(t *testing.T) {
	for _, seed := range testkit.Seeds(*modelSeeds, 10, 0, *modelSeed) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, *modelOps)
		})
	}
}

func runModel(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (rerun with -run TestModel -model.seed=%d): %s", seed, seed, fmt.Sprintf(format, args...))
	}
	src := memory.New[string, *obj](objKey, memory.Options{StreamingList: rng.IntN(4) == 0})
	history := map[string][]string{}
	put := func(key string) int64 {
		val := fmt.Sprintf("%s.%d", key, len(history[key]))
		history[key] = append(history[key], val)
		return src.Put(newObj(key, "g"+strconv.Itoa(rng.IntN(3)), val))
	}
	del := func(key string) {
		if _, ok := src.Delete(key); ok {
			history[key] = append(history[key], deleted)
		}
	}
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	for range rng.IntN(8) {
		put(keys[rng.IntN(len(keys))])
	}
	initial := map[string]string{}
	for _, o := range src.Items() {
		initial[o.Key] = o.Val
	}

	var reportedMu sync.Mutex
	var reported []error
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key: func(o *obj) (string, error) { return o.Key, nil },
		Indexers: informer.Indexers[*obj]{
			"group": informer.IndexBy(func(o *obj) (string, error) { return o.Group, nil }),
		},
		Revision: func(o *obj) string { return o.Val },
		Backoff:  informer.Backoff{Initial: 100 * time.Microsecond, Max: time.Millisecond, Jitter: -1},
		ErrorHandler: func(err error) {
			reportedMu.Lock()
			reported = append(reported, err)
			reportedMu.Unlock()
		},
		MaxBatch:   1 + rng.IntN(8),
		MaxPending: 4 + rng.IntN(64),
	})
	if err != nil {
		t.Fatal(err)
	}
	type reg struct {
		v   *view
		r   *informer.Registration
		out bool
	}
	var regs []*reg
	addHandler := func(name string, opts informer.HandlerOptions, v *view) {
		v.LifeCycle = informertest.NewLifeCycle(func(o *obj) (string, string) { return o.Key, o.Val },
			informertest.LifeCycleOptions{Coalesce: opts.Policy == informer.Coalesce})
		r, err := inf.AddHandler(v, opts)
		if err != nil {
			fail("AddHandler: %v", err)
		}
		regs = append(regs, &reg{v: v, r: r})
	}
	addHandler("block", informer.HandlerOptions{Policy: informer.Block, QueueLength: 1 + rng.IntN(4)}, newView("block"))
	slow := newView("slow-coalesce")
	slow.slow = true
	addHandler("slow", informer.HandlerOptions{QueueLength: 1 + rng.IntN(3)}, slow)
	panicky := newView("panicky")
	panicky.panicOn = keys[0] + ".1"
	addHandler("panicky", informer.HandlerOptions{}, panicky)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if informer.WaitForCacheSync(sctx, inf) != nil {
		fail("no sync")
	}
	// HasSynced: the initial list is in the cache (no write happened yet).
	sn := inf.Snapshot()
	if sn.Len() != len(initial) {
		fail("synced with %d objects, the initial list has %d", sn.Len(), len(initial))
	}
	for k, v := range initial {
		if o, ok := sn.Get(k); !ok || o.Val != v {
			fail("synced without %s=%s", k, v)
		}
	}

	for op := 0; op < ops; op++ {
		key := keys[rng.IntN(len(keys))]
		switch r := rng.IntN(100); {
		case r < 50:
			put(key)
		case r < 70:
			del(key)
		case r < 74:
			src.Compact(src.Revision())
		case r < 78:
			errs := []error{nil, informer.ErrUnavailable, informer.ErrExpired, informer.ErrTooManyRequests}
			src.DropWatches(errs[rng.IntN(len(errs))])
		case r < 80:
			src.FailNext(1+rng.IntN(2), []memory.Op{memory.OpList, memory.OpWatch}[rng.IntN(2)], informer.ErrUnavailable)
		case r < 82:
			name := fmt.Sprintf("late-%d", op)
			addHandler(name, informer.HandlerOptions{QueueLength: 1 + rng.IntN(8), Policy: informer.QueuePolicy(rng.IntN(2))}, newView(name))
		case r < 84:
			if i := rng.IntN(len(regs)); !regs[i].out && i >= 3 {
				inf.RemoveHandler(regs[i].r)
				regs[i].out = true
			}
		case r < 90:
			// Read-your-writes: a write's revision, once waited for, is visible.
			rev := put(key)
			wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
			err := inf.WaitForRevision(wctx, strconv.FormatInt(rev, 10))
			wcancel()
			if err != nil {
				fail("WaitForRevision(%d): %v", rev, err)
			}
			want := history[key][len(history[key])-1]
			if o, ok := inf.Get(key); !ok || o.Val != want {
				fail("after WaitForRevision(%d): %s is %+v, want %s", rev, key, o, want)
			}
		default:
			// a reader on a snapshot, concurrently with the writer
			for range inf.Snapshot().All() {
			}
		}
	}

	// Writes stop. The cache must reach the source's revision, and every handler must
	// converge to the final state (eventual consistency: there is no order across keys,
	// so no single last notification can serve as a barrier).
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := inf.WaitForRevision(wctx, strconv.FormatInt(src.Revision(), 10)); err != nil {
		fail("final WaitForRevision: %v", err)
	}
	finalState := map[string]string{}
	for _, o := range src.Items() {
		finalState[o.Key] = o.Val
	}
	for _, r := range regs {
		if r.out {
			continue
		}
		// Converged alone can hold for a moment while a handler is behind (an earlier
		// delete is the final state too): wait until its queue is empty as well. After
		// WaitForRevision every notification is queued.
		for !r.v.Converged(finalState) || r.r.Stats().Queued != 0 {
			if wctx.Err() != nil {
				break // the checks below say what is wrong
			}
			time.Sleep(100 * time.Microsecond) // polling: nothing signals "handler caught up"
		}
	}

	// The cache equals the source.
	want := src.Items()
	got := informer.ReadList(inf)
	if len(got) != len(want) {
		fail("cache has %d objects, source %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || got[i].Val != want[i].Val {
			fail("cache[%d] = %s=%s, source %s=%s", i, got[i].Key, got[i].Val, want[i].Key, want[i].Val)
		}
	}
	final := map[string]string{}
	for _, o := range want {
		final[o.Key] = o.Val
	}
	for _, r := range regs {
		want := final
		if r.out {
			want = nil // a removed handler's last states are not final
		}
		for _, problem := range r.v.Check(history, want) {
			fail("handler %s: %s", r.v.name, problem)
		}
	}
	reportedMu.Lock()
	defer reportedMu.Unlock()
	for _, err := range reported {
		var pe *informer.HandlerPanicError
		switch {
		case errors.As(err, &pe), errors.Is(err, informer.ErrRetryable), errors.Is(err, informer.ErrExpired),
			strings.Contains(err.Error(), "very short watch"), strings.Contains(err.Error(), "stream ended"):
		default:
			fail("unexpected error reported: %v", err)
		}
	}
}
