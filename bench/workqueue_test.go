package bench

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/informer-go/informer/workqueue"
)

// This file compares github.com/informer-go/informer/workqueue with client-go's
// util/workqueue rate-limiting queue, each built with its default rate limiter and driven
// through the same interface by the same harness: one producer goroutine (the benchmark
// itself) and wqWorkers workers that loop Get, Done. The clock runs from the start of the
// workers until they have exited after ShutDown, having drained the queue.
//
//   - AddGetDone/distinct-bursts: b.N adds of distinct keys in bursts of wqBurst (the shape
//     of an informer's initial list or relist); the producer waits for each burst to be
//     processed, so the backlog stays under wqBurst items.
//   - AddGetDone/distinct-backlog: b.N adds of distinct keys without waiting: the producer
//     outruns the workers and the backlog grows to a large part of b.N.
//   - AddGetDone/repeating: b.N adds cycling over wqRepeatingKeys keys, so most adds merge
//     with a queued or in-flight key.
//   - AddAfterChurn: b.N AddAfter calls with distinct keys and pseudo-random delays in
//     [1µs, 1ms); the producer waits until every key has been processed.
//
// items/s is b.N adds per second of wall time; gets/add is how many items the workers got
// per add (1 for distinct keys; less when adds merge). Keys are strings ("ns-3/obj-1234"),
// taken from a pool built before the clock starts; a pool key is reused only after its
// previous add has been processed (gets/add would show otherwise).

const (
	wqWorkers       = 4
	wqBurst         = 1000
	wqPool          = 1 << 20 // distinct keys available
	wqRepeatingKeys = 64
)

// wqQueue is the part of both queues that the benchmarks drive.
type wqQueue interface {
	Add(item string)
	AddAfter(item string, d time.Duration)
	Get() (item string, shutdown bool)
	Done(item string)
	ShutDown()
}

var wqImpls = []struct {
	name string
	new  func() wqQueue
}{
	{"informer", func() wqQueue { return workqueue.New(workqueue.Options[string]{}) }},
	{"client-go", func() wqQueue {
		return kworkqueue.NewTypedRateLimitingQueue(kworkqueue.DefaultTypedControllerRateLimiter[string]())
	}},
}

var wqKeys = sync.OnceValue(func() []string {
	keys := make([]string, wqPool)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns-%d/obj-%d", i%100, i)
	}
	return keys
})

// wqDrive starts the workers, each calling after (if not nil) once per item it has
// processed, calls produce, shuts the queue down and waits for the workers to exit.
func wqDrive(b *testing.B, q wqQueue, after func(), produce func()) {
	var (
		wg   sync.WaitGroup
		gets atomic.Int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range wqWorkers {
		wg.Go(func() {
			for {
				item, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(item)
				gets.Add(1)
				if after != nil {
					after()
				}
			}
		})
	}
	produce()
	q.ShutDown()
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "items/s")
	b.ReportMetric(float64(gets.Load())/float64(b.N), "gets/add")
}

func BenchmarkWorkqueueAddGetDone(b *testing.B) {
	keys := wqKeys()
	for _, impl := range wqImpls {
		b.Run("distinct-bursts/"+impl.name, func(b *testing.B) {
			q := impl.new()
			var burst sync.WaitGroup
			wqDrive(b, q, burst.Done, func() {
				for i := 0; i < b.N; i += wqBurst {
					n := min(wqBurst, b.N-i)
					burst.Add(n)
					for j := i; j < i+n; j++ {
						q.Add(keys[j%wqPool])
					}
					burst.Wait()
				}
			})
		})
	}
	for _, backlog := range []struct {
		name string
		keys int
	}{{"distinct-backlog", wqPool}, {"repeating", wqRepeatingKeys}} {
		for _, impl := range wqImpls {
			b.Run(backlog.name+"/"+impl.name, func(b *testing.B) {
				q := impl.new()
				wqDrive(b, q, nil, func() {
					for i := range b.N {
						q.Add(keys[i%backlog.keys])
					}
				})
			})
		}
	}
}

func BenchmarkWorkqueueAddAfterChurn(b *testing.B) {
	keys := wqKeys()
	for _, impl := range wqImpls {
		b.Run(impl.name, func(b *testing.B) {
			delays := make([]time.Duration, b.N)
			x := uint64(0x9E3779B97F4A7C15)
			for i := range delays {
				x ^= x << 13 // xorshift64: the same pseudo-random delays for both queues
				x ^= x >> 7
				x ^= x << 17
				delays[i] = time.Microsecond + time.Duration(x%uint64(time.Millisecond-time.Microsecond))
			}
			q := impl.new()
			var processed atomic.Int64
			all := make(chan struct{})
			wqDrive(b, q,
				func() {
					if processed.Add(1) == int64(b.N) {
						close(all)
					}
				},
				func() {
					for i, d := range delays {
						q.AddAfter(keys[i%wqPool], d)
					}
					<-all
				})
		})
	}
}
