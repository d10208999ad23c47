package informer_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/source/memory"
)

// O-8: a failed list is reported and retried after a backoff that doubles from
// Initial (jitter off here, so the delays are exact on the fake clock).
func TestReflector_R1_ListFailureBacksOffExactly(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	src := newSource(memory.Options{Clock: fc})
	src.Put(newObj("a", "g", "1"))
	boom := errors.New("list failed")
	src.FailNext(2, memory.OpList, boom)
	var reported errs
	inf, _ := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		Clock:        fc,
		Backoff:      informer.Backoff{Initial: time.Second, Max: time.Minute, Jitter: -1},
		ErrorHandler: reported.handle,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()

	lists := func() int { return countOps(src, memory.OpList) }
	// First list fails; the reflector waits 1s (one timer armed).
	fc.WaitForWaiters(1, ctx.Done())
	if lists() != 1 || !reported.any(boom) {
		t.Fatalf("lists %d, reported %v", lists(), reported.list)
	}
	fc.Step(999 * time.Millisecond)
	if lists() != 1 {
		t.Fatal("relisted before the backoff elapsed")
	}
	fc.Step(time.Millisecond)
	waitUntil(t, func() bool { return lists() == 2 })
	// Second failure: the delay doubles to 2s.
	fc.WaitForWaiters(1, ctx.Done())
	fc.Step(1999 * time.Millisecond)
	if lists() != 2 {
		t.Fatal("relisted before the doubled backoff elapsed")
	}
	fc.Step(time.Millisecond)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if !inf.WaitForCacheSync(sctx) || lists() != 3 {
		t.Fatalf("synced=%v after %d lists", inf.HasSynced(), lists())
	}
	if n := inf.Stats().ListErrors; n != 2 {
		t.Fatalf("ListErrors = %d", n)
	}
}

// PL-10, PL-2: a stalled handler delays neither the cache nor the other handlers; its own
// queue coalesces (the default policy) and it catches up with the newest states.
func TestInformer_PL10_StalledHandlerIsolated(t *testing.T) {
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

// A list that fails with a Retry-After is retried no sooner than the source asked, even
// when the backoff is shorter.
func TestReflector_ListRetryAfterHonoured(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	src := newSource(memory.Options{Clock: fc})
	src.Put(newObj("a", "g", "1"))
	src.FailNext(1, memory.OpList, informer.RetryAfter(informer.ErrTooManyRequests, 30*time.Second))
	inf, _ := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:     func(o *obj) (string, error) { return o.Key, nil },
		Clock:   fc,
		Backoff: informer.Backoff{Initial: time.Second, Jitter: -1},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	fc.WaitForWaiters(1, ctx.Done())
	fc.Step(29 * time.Second)
	if n := countOps(src, memory.OpList); n != 1 {
		t.Fatalf("relisted after 29s: %d lists, want 1 (Retry-After 30s)", n)
	}
	fc.Step(time.Second)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if !inf.WaitForCacheSync(sctx) {
		t.Fatal("no sync after the Retry-After")
	}
}
