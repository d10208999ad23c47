package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/workqueue"
)

// A controller's shape: event handlers Add keys, workers Get, process and call Done.
// Duplicate adds of a key that is still waiting are merged.
func Example() {
	q := workqueue.New(workqueue.Options[string]{Name: "pods"})

	for _, key := range []string{"default/a", "default/b", "default/a", "kube-system/c"} {
		q.Add(key)
	}
	q.ShutDown() // no more adds; the worker drains what is queued, then stops

	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			key, shutdown := q.Get()
			if shutdown {
				return
			}
			fmt.Println("reconcile", key)
			q.Done(key)
		}
	})
	wg.Wait()
	// Output:
	// reconcile default/a
	// reconcile default/b
	// reconcile kube-system/c
}

// A worker that retries failures with backoff and forgets a key once it succeeds.
func ExampleQueue_AddRateLimited() {
	q := workqueue.New(workqueue.Options[string]{
		// Retry at once twice, then every 10 ms. The default is exponential from 5 ms.
		RateLimiter: workqueue.NewFastSlowRateLimiter[string](0, 10*time.Millisecond, 2),
	})
	defer q.ShutDown()

	attempts := 0
	reconcile := func(string) error {
		attempts++
		if attempts < 4 {
			return errors.New("not yet")
		}
		return nil
	}

	q.Add("default/a")
	for {
		key, _ := q.Get()
		err := reconcile(key)
		if err != nil {
			fmt.Printf("%s: %v (retry %d)\n", key, err, q.NumRequeues(key)+1)
			q.AddRateLimited(key)
			q.Done(key)
			continue
		}
		q.Forget(key) // success: the next failure starts the backoff over
		q.Done(key)
		fmt.Printf("%s: done after %d attempts, requeues now %d\n", key, attempts, q.NumRequeues(key))
		break
	}
	// Output:
	// default/a: not yet (retry 1)
	// default/a: not yet (retry 2)
	// default/a: not yet (retry 3)
	// default/a: done after 4 attempts, requeues now 0
}

// AddAfter under a fake clock: items come out in ready-time order when time is stepped,
// and a second AddAfter can only bring an item forward.
func ExampleQueue_AddAfter() {
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	q := workqueue.New(workqueue.Options[string]{Clock: clk})
	defer q.ShutDown()

	q.AddAfter("in-3s", 3*time.Second)
	q.AddAfter("in-1s", time.Second)
	q.AddAfter("in-1s", time.Hour) // ignored: already waiting, for less
	q.AddAfter("now", 0)

	start := clk.Now()
	get := func() { // Get blocks until the delay goroutine has added the item
		item, _ := q.Get()
		fmt.Printf("t=%v %s\n", clk.Since(start), item)
		q.Done(item)
	}
	get() // "now" needs no step
	clk.Step(time.Second)
	get()
	clk.Step(2 * time.Second)
	get()
	// Output:
	// t=0s now
	// t=1s in-1s
	// t=3s in-3s
}

// Stopping a controller: stop accepting work, let the workers finish what was accepted,
// but give up after a deadline.
func ExampleQueue_ShutDownWithDrain() {
	q := workqueue.New(workqueue.Options[int]{})
	for i := range 3 {
		q.Add(i)
	}

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				item, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(item)
			}
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := q.ShutDownWithDrain(ctx)
	wg.Wait()
	fmt.Println("drained:", err == nil, "left:", q.Len())
	// Output:
	// drained: true left: 0
}

func ExampleExponentialRateLimiter() {
	r := workqueue.NewExponentialRateLimiter[string](time.Second, 10*time.Second)
	var delays []time.Duration
	for range 6 {
		delays = append(delays, r.When("a"))
	}
	fmt.Println(delays)
	r.Forget("a")
	fmt.Println(r.When("a"), r.NumRequeues("a"))
	// Output:
	// [1s 2s 4s 8s 10s 10s]
	// 1s 1
}

// MaxOf combines a per-item backoff with an overall bucket, which is what
// DefaultRateLimiter does; a fake clock makes the bucket's delays exact.
func ExampleMaxOf() {
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	r := workqueue.MaxOf(
		workqueue.NewExponentialRateLimiter[string](time.Millisecond, time.Minute),
		workqueue.NewBucketRateLimiter[string](1, 2, clk), // 1 retry/s, burst 2
	)
	for _, key := range []string{"a", "b", "c", "a"} {
		fmt.Println(key, r.When(key))
	}
	// Output:
	// a 1ms
	// b 1ms
	// c 1s
	// a 2s
}
