package informer_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
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

// gatedHandler records calls as events does, each once it takes a token from allow (or
// allow is closed).
type gatedHandler struct {
	allow chan struct{}
	ev    *events
}

func newGated() *gatedHandler { return &gatedHandler{allow: make(chan struct{}), ev: newEvents()} }

func (h *gatedHandler) OnAdd(o *obj, initial bool) { <-h.allow; h.ev.OnAdd(o, initial) }
func (h *gatedHandler) OnUpdate(old, new *obj)     { <-h.allow; h.ev.OnUpdate(old, new) }
func (h *gatedHandler) OnDelete(o *obj, unknown bool) {
	<-h.allow
	h.ev.OnDelete(o, unknown)
}

// newQuiet returns an informer over src with opts, its Key and a silent ErrorHandler set
// here.
func newQuiet(t *testing.T, src *memory.Source[string, *obj], opts informer.Options[string, *obj]) *informer.Informer[string, *obj] {
	t.Helper()
	opts.Key = objKeyErr
	opts.ErrorHandler = func(error) {}
	inf, err := informer.New[string, *obj](src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

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

// Only an add that comes from the first list is initial: an object of that list deleted
// and created again while the handler has not yet seen the list (it is stalled on its
// first call) is added the second time with initial false.
func TestInformer_InitialOnlyForTheFirstListsAdds(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	for _, k := range []string{"a", "b", "c", "d"} {
		src.Put(newObj(k, "", "1"))
	}
	inf := newQuiet(t, src, informer.Options[string, *obj]{MaxBatch: 1})
	h := newGated()
	if _, err := inf.AddHandler(h, informer.HandlerOptions{QueueLength: 1, Policy: informer.Block}); err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(func() { close(h.allow) })
	informertest.Run(t, inf, release)
	// The list is in the cache, its adds queued to the handler, which holds a: d is
	// deleted and created again before the handler has seen the list's add of d. (Whether
	// the writer is then waiting for room in the handler's queue depends on how soon the
	// handler's goroutine took the list's adds; either way the calls are the same.)
	waitUntil(t, func() bool { return inf.Stats().Synced })
	src.Delete("d")
	rev := src.Put(newObj("d", "", "2"))
	waitUntil(t, func() bool { return inf.Stats().ReceivedRevision == strconv.FormatInt(rev, 10) })
	release()
	h.ev.Expect(t, "add*a=1", "add*b=1", "add*c=1", "add*d=1", "delete d=1", "add d=2")
}

// Errors read once and name what failed: the informer, the function, the object by key
// (or the object itself when its key failed), the handler; a malformed revision passed to
// WaitForRevision is the caller's error, not bad input from the source.
func TestInformer_ErrorsNameInformerAndObject(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	src.Put(&obj{Key: "nokey"})
	src.Put(newObj("badindex", "boom", "1"))
	src.Put(newObj("ok", "g", "1"))
	var mu sync.Mutex
	var got []error
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Name: "payments",
		Key: func(o *obj) (string, error) {
			if o.Key == "nokey" {
				return "", errors.New("no name")
			}
			return o.Key, nil
		},
		Indexers: informer.Indexers[*obj]{"group": informer.IndexBy(func(o *obj) (string, error) {
			if o.Group == "boom" {
				return "", errors.New("bad group")
			}
			return o.Group, nil
		})},
		ErrorHandler: func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	panicked := make(chan struct{})
	if _, err := inf.AddHandler(informer.HandlerFuncs[*obj]{AddFunc: func(o *obj, _ bool) {
		if o.Key == "ok" {
			defer close(panicked)
			panic("handler bug")
		}
	}}, informer.HandlerOptions{Name: "audit"}); err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	<-panicked
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })
	mu.Lock()
	var msgs []string
	for _, err := range got {
		msgs = append(msgs, err.Error())
	}
	mu.Unlock()
	want := []string{
		`informer "payments": key of object &{Key:nokey Group: Val: Rev:}: no name (the object is skipped until it changes)`,
		`informer "payments": index group of the object with key badindex: bad group (the object is skipped until it changes)`,
		`informer "payments": handler "audit" panicked on key ok (notification skipped): handler bug`,
	}
	if !slices.Equal(msgs, want) {
		t.Fatalf("errors:\n got  %q\n want %q", msgs, want)
	}
	var hp *informer.HandlerPanicError
	if !errors.As(got[2], &hp) || !strings.Contains(string(hp.Stack), "TestInformer_ErrorsNameInformerAndObject") {
		t.Fatalf("HandlerPanicError without the handler's stack: %v", got[2])
	}
	err = inf.WaitForRevision(ctx, "junk")
	if err == nil || errors.Is(err, informer.ErrBadInput) || !strings.HasPrefix(err.Error(), `informer "payments": WaitForRevision("junk"): not a revision of this source`) {
		t.Fatalf("WaitForRevision(junk) = %v", err)
	}
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

// stalledHandler blocks in each call until allowed; it counts the calls it completed and
// records each key's last state.
type stalledHandler struct {
	allow     chan struct{}
	processed atomic.Int64
	mu        sync.Mutex
	last      map[string]string
}

func (h *stalledHandler) see(key, val string) {
	<-h.allow
	h.mu.Lock()
	h.last[key] = val
	h.mu.Unlock()
	h.processed.Add(1)
}
func (h *stalledHandler) OnAdd(o *obj, _ bool)    { h.see(o.Key, o.Val) }
func (h *stalledHandler) OnUpdate(_, o *obj)      { h.see(o.Key, o.Val) }
func (h *stalledHandler) OnDelete(o *obj, _ bool) { h.see(o.Key, "<deleted>") }

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

// Run returns within Options.StopTimeout after its context ends even if a handler never
// returns, and a Warn names the handler and the key of its call.
func TestInformer_RunReturnsDespiteStuckHandler(t *testing.T) {
	const bound = 100 * time.Millisecond
	src := memory.New[string, *obj](objKey, memory.Options{})
	src.Put(newObj("stuck-key", "", "1"))
	logs := &testkit.LogBuffer{}
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          objKeyErr,
		Name:         "stopping",
		StopTimeout:  bound,
		Logger:       logs.Logger(slog.LevelWarn),
		ErrorHandler: func(error) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) }) // the handler's goroutine ends with its call
	var once sync.Once
	h := informer.HandlerFuncs[*obj]{AddFunc: func(*obj, bool) {
		once.Do(func() { close(entered) })
		<-release
	}}
	if _, err := inf.AddHandler(h, informer.HandlerOptions{Name: "never-returns"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the handler was never called")
	}
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10 s after its context ended, with a stuck handler and StopTimeout 100 ms")
	}
	took := time.Since(start)
	out := logs.String()
	t.Logf("Run returned %v after cancel; log: %s", took, out)
	if took < bound {
		t.Fatalf("Run returned after %v, before StopTimeout (%v), while a handler was in a call", took, bound)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "handler=never-returns") || !strings.Contains(out, "key=stuck-key") || !strings.Contains(out, "informer=stopping") {
		t.Fatalf("no Warn naming the informer, the handler and its key: %q", out)
	}
}

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

// A handler added to a running informer gets the cache replayed as initial
// adds, then live changes; its own Synced closes after the replay.
func TestInformer_LateHandlerReplayAndPerHandlerSync(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("b", "g", "1"))
	f := start(t, src, informer.Options[string, *obj]{})
	late := newEvents()
	reg, err := f.inf.AddHandler(late, informer.HandlerOptions{Name: "late"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("late handler never synced")
	}
	if got := late.Calls(); !slices.Equal(got, []string{"add*a=1", "add*b=1"}) {
		t.Fatalf("replay %q", got)
	}
	src.Put(newObj("a", "g", "2"))
	late.Expect(t, "add*a=1", "add*b=1", "update a=1→2")
	if reg.Name() != "late" {
		t.Fatal(reg.Name())
	}
}

// RemoveHandler waits for the handler's goroutine; the handler gets nothing afterwards.
func TestInformer_RemoveHandler(t *testing.T) {
	src := newSource(memory.Options{})
	keep, gone := newEvents(), newEvents()
	f := start(t, src, informer.Options[string, *obj]{})
	regKeep, _ := f.inf.AddHandler(keep, informer.HandlerOptions{})
	reg, _ := f.inf.AddHandler(gone, informer.HandlerOptions{})
	src.Put(newObj("a", "g", "1"))
	gone.Expect(t, "add a=1")
	if !f.inf.RemoveHandler(reg) || f.inf.RemoveHandler(reg) {
		t.Fatal("RemoveHandler must report true once")
	}
	src.Put(newObj("b", "g", "1"))
	keep.Expect(t, "add a=1", "add b=1")
	if got := gone.Calls(); !slices.Equal(got, []string{"add a=1"}) {
		t.Fatalf("removed handler got %q", got)
	}
	_ = regKeep
}

// A panicking handler does not affect another handler or the informer.
func TestInformer_HandlerPanicIsolated(t *testing.T) {
	src := newSource(memory.Options{})
	good := newEvents()
	bad := informer.HandlerFuncs[*obj]{AddFunc: func(o *obj, _ bool) { panic("handler bug") }}
	f := start(t, src, informer.Options[string, *obj]{}, bad, good)
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("b", "g", "1"))
	good.Expect(t, "add a=1", "add b=1")
	waitUntil(t, func() bool { return f.inf.Stats().HandlerPanics == 2 })
	var pe *informer.HandlerPanicError
	if reported := f.errs.All(); !errors.As(reported[0], &pe) || pe.Value != "handler bug" {
		t.Fatalf("reported %v", reported)
	}
}

// Per-handler resync periods on a fake clock; a resync is
// OnUpdate(obj, obj), only to the handlers that are due.
func TestInformer_PerHandlerResync(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	src := newSource(memory.Options{Clock: fc})
	src.Put(newObj("a", "g", "1"))
	fast, slow, never := newEvents(), newEvents(), newEvents()
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		ResyncPeriod: 10 * time.Second,
		Clock:        fc,
	})
	if err != nil {
		t.Fatal(err)
	}
	inf.AddHandler(fast, informer.HandlerOptions{ResyncPeriod: 2 * time.Second})
	inf.AddHandler(slow, informer.HandlerOptions{})
	inf.AddHandler(never, informer.HandlerOptions{ResyncPeriod: -1})
	ctx := informertest.Run(t, inf)
	_ = informer.WaitForCacheSync(ctx, inf)
	fast.Expect(t, "add*a=1")
	slow.Expect(t, "add*a=1")
	// Timers armed: the watch timeout and the resync timer (period lowered to the shortest handler's, 2s).
	fc.WaitForWaiters(2, ctx.Done())
	for i := 1; i <= 5; i++ {
		fc.Step(2 * time.Second)
		want := []string{"add*a=1"}
		for range i {
			want = append(want, "resync a=1")
		}
		fast.Expect(t, want...)
		fc.WaitForWaiters(2, ctx.Done())
	}
	slow.Expect(t, "add*a=1", "resync a=1")
	never.Expect(t, "add*a=1") // waits for its own goroutine's call; fails on any resync
}

// On an informer with resync 0, no handler ever resyncs.
func TestInformer_NoResyncWhenInformerHasNone(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	src := newSource(memory.Options{Clock: fc})
	src.Put(newObj("a", "g", "1"))
	ev := newEvents()
	inf, _ := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key: func(o *obj) (string, error) { return o.Key, nil }, Clock: fc,
	})
	inf.AddHandler(ev, informer.HandlerOptions{ResyncPeriod: time.Second})
	ctx := informertest.Run(t, inf)
	ev.Expect(t, "add*a=1")
	fc.WaitForWaiters(1, ctx.Done()) // the watch timeout only
	fc.Step(5 * time.Second)
	src.Put(newObj("b", "g", "1"))
	ev.Expect(t, "add*a=1", "add b=1")
}

// With an object-revision function, an object listed again unchanged is a resync
// (not sent to handlers that are not syncing), and a changed one is an update.
func TestInformer_ReplacedWithSameRevisionIsResync(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(&obj{Key: "a", Group: "g", Val: "1", Rev: "r1"})
	src.Put(&obj{Key: "b", Group: "g", Val: "1", Rev: "r1"})
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{Revision: func(o *obj) string { return o.Rev }}, ev)
	ev.Expect(t, "add*a=1", "add*b=1")
	src.WaitForWatches(context.Background(), 1)
	src.Put(&obj{Key: "b", Group: "g", Val: "2", Rev: "r2"})
	ev.Expect(t, "add*a=1", "add*b=1", "update b=1→2")
	// Force a relist: a and b are unchanged, so they are resyncs, which reach only handlers
	// due for a resync (unlike client-go, on purpose): this handler hears nothing of them.
	src.FailNext(1, memory.OpWatch, informer.ErrExpired)
	src.DropWatches(informer.ErrExpired)
	waitUntil(t, func() bool { return countOps(src, memory.OpList) >= 2 })
	src.Put(&obj{Key: "c", Group: "g", Val: "1", Rev: "r1"})
	got := ev.WaitFor(t, 4)
	want := []string{"add*a=1", "add*b=1", "update b=1→2", "add c=1"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	assertCache(t, f)
}

// Plain handlers (no OnRevision) added to a running, synced informer get the replay and
// the live changes, and nothing is reported: no panic, no error.
func TestInformer_LatePlainHandlers(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	f := start(t, src, informer.Options[string, *obj]{})
	var mu sync.Mutex
	var calls []string
	record := func(s string) { mu.Lock(); calls = append(calls, s); mu.Unlock() }
	var regs []*informer.Registration
	for i := range 3 {
		name := fmt.Sprintf("late%d", i)
		reg, err := f.inf.AddHandler(informer.HandlerFuncs[*obj]{
			AddFunc:    func(o *obj, initial bool) { record(fmt.Sprintf("%s add %s=%s %v", name, o.Key, o.Val, initial)) },
			UpdateFunc: func(_, o *obj) { record(fmt.Sprintf("%s update %s=%s", name, o.Key, o.Val)) },
		}, informer.HandlerOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	src.Put(newObj("a", "g", "2"))
	waitUntil(t, func() bool {
		for _, reg := range regs {
			if st := reg.Stats(); !st.Synced || st.Delivered < 2 || st.Queued > 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	got := slices.Clone(calls)
	mu.Unlock()
	for i := range regs {
		name := fmt.Sprintf("late%d", i)
		var mine []string
		for _, c := range got {
			if strings.HasPrefix(c, name+" ") {
				mine = append(mine, c)
			}
		}
		if want := []string{name + " add a=1 true", name + " update a=2"}; !slices.Equal(mine, want) {
			t.Errorf("%s got %q, want %q", name, mine, want)
		}
		if p := regs[i].Stats().Panics; p != 0 {
			t.Errorf("%s: %d panics", name, p)
		}
	}
	if n := f.inf.Stats().HandlerPanics; n != 0 {
		t.Errorf("Stats().HandlerPanics = %d", n)
	}
	if reported := f.errs.All(); len(reported) != 0 {
		t.Errorf("errors reported: %v", reported)
	}
}

func TestInformer_Handlers(t *testing.T) {
	inf, err := informer.New[string, *obj](newSource(memory.Options{}), informer.Options[string, *obj]{Key: func(o *obj) (string, error) { return o.Key, nil }})
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := inf.AddHandler(newEvents(), informer.HandlerOptions{Name: "one"})
	r2, _ := inf.AddHandler(newEvents(), informer.HandlerOptions{})
	names := func() (out []string) {
		for _, r := range inf.Stats().Handlers {
			out = append(out, r.Name())
		}
		return out
	}
	if got := names(); !slices.Equal(got, []string{"one", "handler-2"}) || inf.Stats().Handlers[0] != r1 || inf.Stats().Handlers[1] != r2 {
		t.Fatalf("Handlers = %q, want the registrations in order", got)
	}
	inf.RemoveHandler(r1)
	if got := names(); !slices.Equal(got, []string{"handler-2"}) {
		t.Fatalf("after RemoveHandler: %q", got)
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
