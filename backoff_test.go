package informer_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// A failed list is reported and retried after a backoff that doubles from Initial (jitter
// off here, so the delays are exact on the fake clock).
func TestReflector_ListFailureBacksOffExactly(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	src := newSource(memory.Options{Clock: fc})
	src.Put(newObj("a", "g", "1"))
	boom := errors.New("list failed")
	src.FailNext(2, memory.OpList, boom)
	var reported testkit.Errors
	inf, _ := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		Clock:        fc,
		Backoff:      informer.Backoff{Initial: time.Second, Max: time.Minute, Jitter: -1},
		ErrorHandler: reported.Report,
	})
	ctx := informertest.Run(t, inf)

	lists := func() int { return countOps(src, memory.OpList) }
	// First list fails; the reflector waits 1s (one timer armed).
	fc.WaitForWaiters(1, ctx.Done())
	if lists() != 1 || len(reported.Matching(boom)) == 0 {
		t.Fatalf("lists %d, reported %v", lists(), reported.All())
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
	if informer.WaitForCacheSync(sctx, inf) != nil || lists() != 3 {
		t.Fatalf("synced=%v after %d lists", inf.Stats().Synced, lists())
	}
	if n := inf.Stats().ListErrors; n != 2 {
		t.Fatalf("ListErrors = %d", n)
	}
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
	ctx, _ := runStoppable(t, inf)
	fc.WaitForWaiters(1, ctx.Done())
	fc.Step(29 * time.Second)
	if n := countOps(src, memory.OpList); n != 1 {
		t.Fatalf("relisted after 29s: %d lists, want 1 (Retry-After 30s)", n)
	}
	fc.Step(time.Second)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if informer.WaitForCacheSync(sctx, inf) != nil {
		t.Fatal("no sync after the Retry-After")
	}
}

// A list page that never returns (a source that stalls after its headers) is ended after
// Options.ProgressTimeout: the list in progress shows in Stats while it waits, then
// LastError and a Warn say that the source made no progress, and the informer lists again
// and syncs once the source answers.
func TestReflector_StalledListEndsAfterProgressTimeout(t *testing.T) {
	var calls atomic.Int64
	entered := make(chan struct{})
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
			if calls.Add(1) == 1 {
				close(entered)
				<-ctx.Done() // stalled: nothing more comes until the call is ended
				return informer.List[*obj]{}, ctx.Err()
			}
			return informer.List[*obj]{Items: []*obj{newObj("a", "", "1")}, Revision: "5"}, nil
		},
		WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
			return newChanWatch(ctx, make(chan watchResult)), nil
		},
	}
	logs := &testkit.LogBuffer{}
	var reported atomic.Pointer[error]
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{
		Key:             objKeyErr,
		Name:            "stalled-list",
		ProgressTimeout: 200 * time.Millisecond,
		Logger:          logs.Logger(slog.LevelWarn),
		ErrorHandler: func(err error) {
			if errors.Is(err, informer.ErrNoProgress) {
				reported.Store(&err)
			}
		},
		Backoff: fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	<-entered
	if st := inf.Stats(); st.ListStarted.IsZero() {
		t.Fatalf("a list is in progress but Stats.ListStarted is zero: %+v", st)
	}
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	if p := reported.Load(); p == nil {
		t.Fatal("the stalled list was not reported with ErrNoProgress")
	} else if msg := (*p).Error(); !strings.Contains(msg, `"stalled-list"`) || !strings.Contains(msg, "ProgressTimeout") {
		t.Fatalf("the error does not name the informer and the timeout: %v", msg)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "no progress") {
		t.Fatalf("no Warn says the list made no progress: %q", out)
	}
	if st := inf.Stats(); !st.ListStarted.IsZero() || st.ListErrors != 1 {
		t.Fatalf("after the sync: ListStarted %v (want zero), ListErrors %d (want 1)", st.ListStarted, st.ListErrors)
	}
	t.Logf("reported: %v", *reported.Load())
}

// A watch that delivers nothing, long past the timeout it was asked to end at, is ended
// and watched again from the same revision (no relist), with LastError saying so.
func TestReflector_SilentWatchEndsAfterProgressTimeout(t *testing.T) {
	var lists, watches atomic.Int64
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
			lists.Add(1)
			return informer.List[*obj]{Items: []*obj{newObj("a", "", "1")}, Revision: "5"}, nil
		},
		WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
			watches.Add(1)
			return newChanWatch(ctx, make(chan watchResult)), nil // never sends, never ends
		},
	}
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{
		Key:             objKeyErr,
		Name:            "silent-watch",
		MinWatchTimeout: 20 * time.Millisecond,
		ProgressTimeout: 50 * time.Millisecond,
		Logger:          quiet,
		ErrorHandler:    func(error) {},
		Backoff:         fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	informertest.Run(t, inf)
	waitUntil(t, func() bool { return watches.Load() >= 3 })
	lastErr := inf.Stats().LastError
	if !errors.Is(lastErr, informer.ErrNoProgress) || !strings.Contains(lastErr.Error(), "delivered nothing") {
		t.Fatalf("LastError after silent watches: %v", lastErr)
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("a silent watch is watched again from the same revision, but the informer listed %d times", n)
	}
	t.Logf("LastError: %v", lastErr)
}

// Backoff: a list that succeeded resets the backoff. A quiet source (no change between
// compactions) expires every watch before it delivers anything; each expiry is followed
// by a successful relist, so the wait before the next relist stays at Backoff.Initial and
// does not grow cycle after cycle. The wait is read on a fake clock: the time it has to
// be stepped before the reflector's timer fires.
func TestReflector_SuccessfulListResetsBackoff(t *testing.T) {
	const (
		initial = 800 * time.Millisecond
		step    = 50 * time.Millisecond
		cycles  = 10
	)
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	var lists atomic.Int64
	listed := make(chan struct{}, cycles+2)
	watches := make(chan chan watchResult, cycles+2)
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
			n := lists.Add(1)
			listed <- struct{}{}
			return informer.List[*obj]{Items: []*obj{newObj("a", "", "1")}, Revision: strconv.FormatInt(100*n, 10)}, nil
		},
		WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
			next := make(chan watchResult, 1)
			watches <- next
			return newChanWatch(ctx, next), nil
		},
	}
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{
		Key:          objKeyErr,
		Clock:        clk,
		Logger:       quiet,
		ErrorHandler: func(error) {},
		Backoff:      informer.Backoff{Initial: initial, Max: 30 * time.Second, Jitter: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	timeout := time.After(30 * time.Second)
	var waits []time.Duration
	for cycle := range cycles {
		select {
		case <-listed:
		case <-timeout:
			t.Fatalf("cycle %d: no list", cycle)
		}
		var next chan watchResult
		select {
		case next = <-watches:
		case <-timeout:
			t.Fatalf("cycle %d: no watch", cycle)
		}
		// The source compacted past the watch's revision: nothing was delivered.
		next <- watchResult{err: informer.ErrExpired}
		if !clk.WaitForWaiters(1, ctx.Done()) {
			t.Fatal("stopped")
		}
		var waited time.Duration
		for clk.Waiters() > 0 {
			clk.Step(step)
			waited += step
			if waited > time.Minute {
				t.Fatalf("cycle %d: the reflector's timer did not fire after %v", cycle, waited)
			}
		}
		waits = append(waits, waited)
	}
	t.Logf("waits before each relist: %v", waits)
	for i, w := range waits {
		if w > initial+step {
			t.Fatalf("cycle %d waited %v before relisting (all: %v): the backoff grew although every list succeeded (want at most %v)", i, w, waits, initial)
		}
	}
}
