package informer_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

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
	opts.Key = objKeyErr
	opts.ErrorHandler = func(error) {}
	inf, err := informer.New[string, *obj](r.src, opts)
	if err != nil {
		t.Fatal(err)
	}
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
	src, inf, h, release, ctx := r.src, r.inf, r.h, r.release, r.ctx
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
	release()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := inf.WaitForRevision(wctx, strconv.FormatInt(src.Revision(), 10)); err != nil {
		t.Fatalf("WaitForRevision: %v", err)
	}
	for h.processed.Load() < int64(events) {
		if wctx.Err() != nil {
			t.Fatalf("a Block handler must see every change: processed %d of %d", h.processed.Load(), events)
		}
		time.Sleep(time.Millisecond) // polling: nothing signals "handler caught up"
	}
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
	src, inf, h, release, ctx := r.src, r.inf, r.h, r.release, r.ctx
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
	release()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := inf.WaitForRevision(wctx, strconv.FormatInt(src.Revision(), 10)); err != nil {
		t.Fatalf("WaitForRevision: %v", err)
	}
	for h.processed.Load() < int64(updates) {
		if wctx.Err() != nil {
			t.Fatalf("the handler processed %d of %d updates", h.processed.Load(), updates)
		}
		time.Sleep(time.Millisecond) // polling: nothing signals "handler caught up"
	}
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
