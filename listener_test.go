package informer_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
)

// A stalled Block handler delays nobody but the source: while the informer waits for room
// in its queue, Handlers, AddHandler and RemoveHandler of other handlers, reads and a
// metrics scrape all return.
func TestInformer_StalledBlockHandlerDelaysOnlyTheSource(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	inf := newQuiet(t, src, informer.Options[string, *obj]{
		Name:     "stalled",
		MaxBatch: 1, // a notification a batch: the handler's queue must fill
	})
	stalled := newGated()
	reg, err := inf.AddHandler(stalled, informer.HandlerOptions{QueueLength: 2, Policy: informer.Block, Name: "stalled"})
	if err != nil {
		t.Fatal(err)
	}
	other := newEvents()
	otherReg, err := inf.AddHandler(other, informer.HandlerOptions{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	promReg := prometheus.NewRegistry()
	if _, err := metrics.RegisterInformer(promReg, inf); err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf, func() { close(stalled.allow) })
	if informer.WaitForCacheSync(ctx, inf) != nil {
		t.Fatal("no sync")
	}
	// Fill the stalled handler's queue: the informer then waits for room.
	for i := range 10 {
		src.Put(newObj("k"+strconv.Itoa(i), "", "v"))
	}
	waitUntil(t, func() bool { return reg.Stats().Blocked > 0 })

	within := func(what string, f func()) {
		t.Helper()
		ch := make(chan struct{})
		go func() { defer close(ch); f() }()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not return while a Block handler was stalled", what)
		}
	}
	within("Handlers", func() {
		if n := len(inf.Stats().Handlers); n != 2 {
			t.Errorf("Handlers: %d, want 2", n)
		}
	})
	within("Get", func() { inf.Get("k0") })
	within("All", func() { informer.ReadList(inf) })
	within("metrics gather", func() {
		if _, err := promReg.Gather(); err != nil {
			t.Errorf("gather: %v", err)
		}
	})
	var late *informer.Registration
	lateEvents := newEvents()
	within("AddHandler", func() {
		late, err = inf.AddHandler(lateEvents, informer.HandlerOptions{Name: "late"})
		if err != nil {
			t.Error(err)
		}
	})
	within("RemoveHandler of another handler", func() {
		if !inf.RemoveHandler(otherReg) {
			t.Error("RemoveHandler: not registered")
		}
	})
	within("RemoveHandler of the late handler", func() {
		if !inf.RemoveHandler(late) {
			t.Error("RemoveHandler: not registered")
		}
	})
}

// revisionRecorder is a handler that waits for gate in every change and records the
// revisions it is told of.
type revisionRecorder struct {
	gate    chan struct{}
	changes atomic.Int64
	rev     atomic.Pointer[string]
}

func (h *revisionRecorder) wait()                 { <-h.gate; h.changes.Add(1) }
func (h *revisionRecorder) OnAdd(*obj, bool)      { h.wait() }
func (h *revisionRecorder) OnUpdate(_, _ *obj)    { h.wait() }
func (h *revisionRecorder) OnDelete(*obj, bool)   { h.wait() }
func (h *revisionRecorder) OnRevision(rev string) { h.rev.Store(&rev) }
func (h *revisionRecorder) revision() (r string) {
	if p := h.rev.Load(); p != nil {
		r = *p
	}
	return r
}

// A Coalesce handler whose queue overflows still learns the newest revision: when the
// overflow drains, the marker of the last revision it holds is delivered, even if the
// source is quiet from then on and no later batch brings another marker.
func TestProcessor_CoalesceOverflowKeepsRevisionMarker(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	inf := newQuiet(t, src, informer.Options[string, *obj]{Name: "marker"})
	h := &revisionRecorder{gate: make(chan struct{})}
	if _, err := inf.AddHandler(h, informer.HandlerOptions{QueueLength: 4, Policy: informer.Coalesce}); err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(func() { close(h.gate) })
	ctx := informertest.Run(t, inf, release)
	if informer.WaitForCacheSync(ctx, inf) != nil {
		t.Fatal("no sync")
	}
	for i := range 500 {
		src.Put(newObj("k"+strconv.Itoa(i%50), "", strconv.Itoa(i)))
	}
	last := strconv.FormatInt(src.Revision(), 10)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := inf.WaitForRevision(wctx, last); err != nil {
		t.Fatalf("WaitForRevision: %v", err)
	}
	release() // the source stays quiet from now on
	for h.revision() != last {
		if wctx.Err() != nil {
			t.Fatalf("after an overflow of a Coalesce handler and a quiet source, the handler's last revision is %q, want %q (%d changes delivered)", h.revision(), last, h.changes.Load())
		}
		time.Sleep(time.Millisecond) // polling: the handler's state has no signal of its own
	}
}

// stalledRun is an informer over a new source with one stalledHandler, synced.
type stalledRun struct {
	src     *memory.Source[string, *obj]
	inf     *informer.Informer[string, *obj]
	h       *stalledHandler
	release func() // lets the handler go; idempotent, and called at the end of the test
	ctx     context.Context
}

// startStalled starts an informer with opts (its Key and a silent ErrorHandler set here)
// over a new source, with a stalledHandler added with hopts, and waits for its sync (the
// source is empty: the handler is not called).
func startStalled(t *testing.T, opts informer.Options[string, *obj], hopts informer.HandlerOptions) stalledRun {
	t.Helper()
	r := stalledRun{src: memory.New[string, *obj](objKey, memory.Options{})}
	inf := newQuiet(t, r.src, opts)
	r.inf = inf
	r.h = &stalledHandler{allow: make(chan struct{}), last: map[string]string{}}
	if _, err := inf.AddHandler(r.h, hopts); err != nil {
		t.Fatal(err)
	}
	r.release = sync.OnceFunc(func() { close(r.h.allow) })
	r.ctx = informertest.Run(t, inf, r.release)
	if informer.WaitForCacheSync(r.ctx, inf) != nil {
		t.Fatal("no sync")
	}
	return r
}

// drain lets the handler go, waits up to a minute for the informer to reach the source's
// revision and for the handler to have processed n calls, and fails the test with what
// and the count otherwise.
func (r stalledRun) drain(t *testing.T, n int, what string) {
	t.Helper()
	r.release()
	wctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	if err := r.inf.WaitForRevision(wctx, strconv.FormatInt(r.src.Revision(), 10)); err != nil {
		t.Fatalf("WaitForRevision: %v", err)
	}
	for r.h.processed.Load() < int64(n) {
		if wctx.Err() != nil {
			t.Fatalf("%s: processed %d of %d", what, r.h.processed.Load(), n)
		}
		time.Sleep(time.Millisecond) // polling: nothing signals "handler caught up"
	}
}

// Memory: with the Coalesce policy a stalled handler costs memory bounded by the number of
// keys, not by the number of events. 1,000,000 updates over 300 keys go through while the
// handler is stalled; the live heap must stay far below what 1M queued notifications would
// take, and the handler, once released, converges to the final states.
func TestMemory_CoalesceStalledHandlerBoundedByKeys(t *testing.T) {
	events, keys := 1_000_000, 300
	if testing.Short() || raceEnabled {
		events = 100_000 // the same bound, checked on a smaller run
	}
	r := startStalled(t, informer.Options[string, *obj]{
		Backoff: informer.Backoff{Initial: 100 * time.Microsecond, Max: time.Millisecond, Jitter: -1},
	}, informer.HandlerOptions{QueueLength: 64, Policy: informer.Coalesce})
	src, inf, h, release, ctx := r.src, r.inf, r.h, r.release, r.ctx
	rev0 := src.Revision()
	base := testkit.LiveHeap()
	start := time.Now()
	objs := make([]obj, keys) // reused values: the objects themselves are not what is measured
	for i := range events {
		k := i % keys
		objs[k] = obj{Key: "k" + strconv.Itoa(k), Val: strconv.Itoa(i)}
		o := objs[k]
		src.Put(&o)
		if i%10_000 == 9_999 {
			// Keep the source's own event log short, but only up to what the informer has
			// read: every event goes through the watch, none is skipped by a relist.
			// (Each Put is one revision, so the events read say how far the watch is.)
			st := inf.Stats()
			src.Compact(rev0 + int64(st.Added+st.Modified))
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := inf.WaitForRevision(wctx, strconv.FormatInt(src.Revision(), 10)); err != nil {
		t.Fatalf("WaitForRevision: %v", err)
	}
	elapsed := time.Since(start)
	src.Compact(src.Revision()) // the source's history is not what is measured
	peak := testkit.LiveHeap()
	grown := int64(peak) - int64(base)
	// 1M queued notifications would take well over 50 MB (notification, object, state);
	// coalesced, the queue holds at most one state per key. The ceiling allows 8 KB per
	// key plus 4 MB of slack for the source, the cache and the runtime.
	ceiling := int64(4<<20 + keys*8<<10)
	st := inf.Stats()
	t.Logf("%d events over %d keys in %v with the handler stalled: heap %d → %d bytes (grew %d, ceiling %d); handler processed %d; informer read %d watch events, %d relists",
		events, keys, elapsed, base, peak, grown, ceiling, h.processed.Load(), st.Added+st.Modified, st.Relists)
	if got := st.Added + st.Modified; got < uint64(events)*9/10 {
		t.Fatalf("only %d of %d events went through the watch: the test did not load the handler's queue", got, events)
	}
	if grown > ceiling {
		t.Fatalf("heap grew by %d bytes under a stalled Coalesce handler, ceiling %d", grown, ceiling)
	}
	if h.processed.Load() != 0 {
		t.Fatalf("the handler was stalled but processed %d", h.processed.Load())
	}
	// Released, the handler converges to every key's final state.
	release()
	final := map[string]string{}
	for _, o := range src.Items() {
		final[o.Key] = o.Val
	}
	for {
		h.mu.Lock()
		ok := len(h.last) == len(final)
		for k, v := range final {
			ok = ok && h.last[k] == v
		}
		h.mu.Unlock()
		if ok {
			break
		}
		if wctx.Err() != nil {
			t.Fatal("the released handler did not converge to the final states")
		}
		time.Sleep(time.Millisecond) // polling: nothing signals "handler caught up"
	}
}

// Backpressure: with the Block policy the source is not read faster than the handler
// drains. While the handler is stalled, the events the informer has read from the source
// (Stats Added+Modified) never exceed what the handler processed plus what the pipeline can
// hold: its queue, the delta queue (MaxPending), one batch in delivery (at most MaxPending
// deltas) and the event in hand.
func TestMemory_BlockBackpressure(t *testing.T) {
	const (
		keys        = 300
		queueLength = 32
		maxPending  = 64
		maxBatch    = 16
		steps       = 5
		perStep     = 50 // calls the handler is allowed per step
	)
	events := 20_000
	if raceEnabled {
		events = 5_000
	}
	r := startStalled(t, informer.Options[string, *obj]{
		MaxPending: maxPending,
		MaxBatch:   maxBatch,
	}, informer.HandlerOptions{QueueLength: queueLength, Policy: informer.Block})
	src, inf, h := r.src, r.inf, r.h
	for i := range events {
		src.Put(newObj("k"+strconv.Itoa(i%keys), "", strconv.Itoa(i)))
	}
	read := func() uint64 { return inf.Stats().Added + inf.Stats().Modified }
	// settle waits until the informer stops reading (it is blocked on the stalled handler).
	settle := func() uint64 {
		prev, still := read(), 0
		for still < 20 {
			time.Sleep(10 * time.Millisecond) // polling: "nothing more is read" has no signal
			if cur := read(); cur == prev {
				still++
			} else {
				prev, still = cur, 0
			}
		}
		return prev
	}
	// A batch being delivered holds up to MaxPending deltas (popping it frees the delta
	// queue), the delta queue refills to MaxPending, the handler's queue and the call in
	// progress, and the event the reflector holds while add blocks.
	const slack = queueLength + 2*maxPending + 2
	for step := 0; step <= steps; step++ {
		got := settle()
		processed := h.processed.Load()
		t.Logf("step %d: handler processed %d, informer read %d of %d events (bound %d)", step, processed, got, events, uint64(processed)+slack)
		if got > uint64(processed)+slack {
			t.Fatalf("step %d: the informer read %d events while the handler processed %d: more than the pipeline holds (%d)", step, got, processed, slack)
		}
		if got >= uint64(events) {
			t.Fatalf("step %d: every event was read: no backpressure", step)
		}
		for range perStep {
			h.allow <- struct{}{}
		}
	}
	r.drain(t, events, "a Block handler must see every change")
}

// Memory: the delta queue lets go of every object it no longer holds. One key is updated
// with 1 MB objects while the writer is stalled on a Block handler, so that the key's
// pending deltas outgrow their share of the queue's spare room and move to a larger
// buffer; once everything is applied and the source compacted, the live heap holds the
// newest object (cache and handler share it) and not the old ones left in the room the
// deltas moved out of.
func TestMemory_DeltaQueueLetsGoOfOldObjects(t *testing.T) {
	const size = 1 << 20
	updates := 200
	if raceEnabled {
		updates = 60
	}
	r := startStalled(t, informer.Options[string, *obj]{
		Name: "large",
	}, informer.HandlerOptions{QueueLength: 1, Policy: informer.Block})
	src, inf := r.src, r.inf
	rev0 := src.Revision()
	base := testkit.LiveHeap()
	for i := range updates {
		src.Put(&obj{Key: "k", Val: strings.Repeat(strconv.Itoa(i%10), size)})
		if i%16 == 15 {
			// The source's own history is not what is measured: keep it to what the
			// informer has not read yet.
			st := inf.Stats()
			src.Compact(rev0 + int64(st.Added+st.Modified))
		}
	}
	r.drain(t, updates, "the handler must see every update")
	src.Compact(src.Revision())
	grown := int64(testkit.LiveHeap()) - int64(base)
	// The newest object (1 MB, shared by the source, the cache and the handler) and
	// slack for the runtime; a single old object left in the queue is another 1 MB.
	const ceiling = size + size/2
	t.Logf("%d updates of %d bytes: live heap grew by %d bytes (ceiling %d)", updates, size, grown, ceiling)
	if grown > ceiling {
		t.Fatalf("live heap grew by %d bytes after %d updates of one key with 1 MB objects: the delta queue keeps old objects alive (ceiling %d)", grown, updates, ceiling)
	}
}

// gate is a handler whose OnAdd of key "a" waits until released.
type gate struct {
	*events
	release chan struct{}
}

func (g gate) OnAdd(o *obj, initial bool) {
	if o.Key == "a" {
		<-g.release
	}
	g.events.OnAdd(o, initial)
}

// MeasureLatency: a notification that waited two (fake) seconds behind a blocked call is
// recorded in the 2.5 s bucket; one delivered at once in the first bucket.
func TestHandler_MeasureLatency(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	src := newSource(memory.Options{})
	g := gate{events: newEvents(), release: make(chan struct{})}
	f := start(t, src, informer.Options[string, *obj]{Clock: fc})
	reg, err := f.inf.AddHandler(g, informer.HandlerOptions{MeasureLatency: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := f.inf.AddHandler(newEvents(), informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.Put(newObj("a", "g", "1")) // the handler blocks in OnAdd(a)
	src.Put(newObj("b", "g", "1"))
	waitUntil(t, func() bool { return reg.Stats().Queued == 2 && reg.Stats().Delivered == 1 })
	fc.Step(2 * time.Second)
	close(g.release)
	g.Expect(t, "add a=1", "add b=1")
	lat := reg.Stats().Latency
	bucket := slices.Index(lat.Bounds, 2.5)
	if lat.Count != 2 || lat.Counts[0] != 1 || lat.Counts[bucket] != 1 || lat.Sum != 2 {
		t.Fatalf("latency %+v: want a at 0 s (first bucket) and b at 2 s (2.5 s bucket)", lat)
	}
	if s := plain.Stats().Latency; s.Bounds != nil {
		t.Fatalf("a handler without MeasureLatency has a latency histogram: %+v", s)
	}
}

// A stalled handler delays neither the cache nor the other handlers; its own queue
// coalesces (the default policy) and it catches up with the newest states.
func TestInformer_StalledHandlerIsolated(t *testing.T) {
	src := newSource(memory.Options{})
	gate := make(chan struct{})
	stalled := newEvents()
	stuck := informer.HandlerFuncs[*obj]{AddFunc: func(o *obj, initial bool) {
		<-gate
		stalled.OnAdd(o, initial)
	}, UpdateFunc: stalled.OnUpdate}
	fast := newEvents()
	f := start(t, src, informer.Options[string, *obj]{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // runs before the informer stops, even when the test fails
	reg, _ := f.inf.AddHandler(stuck, informer.HandlerOptions{QueueLength: 2})
	f.inf.AddHandler(fast, informer.HandlerOptions{})
	src.Put(newObj("a", "g", "0")) // the stalled handler blocks inside this add
	for i := 1; i <= 200; i++ {
		src.Put(newObj("a", "g", strconv.Itoa(i)))
		src.Put(newObj("b", "g", strconv.Itoa(i)))
	}
	rev := src.Put(newObj("c", "g", "last"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.inf.WaitForRevision(ctx, strconv.FormatInt(rev, 10)); err != nil {
		t.Fatal(err)
	}
	// a: add + 200 updates; b: add + 199 updates; c: add.
	got := fast.WaitFor(t, 402)
	if len(got) != 402 || got[len(got)-1] != "add c=last" {
		t.Fatalf("fast handler: %d calls, last %q", len(got), got[len(got)-1])
	}
	if st := reg.Stats(); st.Queued > 8 || st.Coalesced == 0 {
		t.Fatalf("stalled handler's queue: %+v (want bounded and coalescing)", st)
	}
	release()
	waitUntil(t, func() bool {
		calls := stalled.Calls()
		return len(calls) > 0 && calls[len(calls)-1] == "add c=last"
	})
	// Its calls depend on how the writes were batched, but it ends at every key's final
	// state, in few calls (the overflow kept one entry per key).
	calls := stalled.Calls()
	final := map[string]string{}
	for _, c := range calls {
		key, val, _ := strings.Cut(strings.SplitN(c, " ", 2)[1], "=")
		if i := strings.LastIndex(val, "→"); i >= 0 {
			val = val[i+len("→"):]
		}
		final[key] = val
	}
	if len(calls) > 8 || final["a"] != "200" || final["b"] != "200" || final["c"] != "last" {
		t.Fatalf("stalled handler after catching up: %q", calls)
	}
	assertCache(t, f)
}
