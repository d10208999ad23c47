package informer_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
)

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
