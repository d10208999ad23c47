package workqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hangGuard bounds every blocking call in these tests. Tests never wait for it to order
// events; it only turns a bug that would hang into a failure.
const hangGuard = 10 * time.Second

// mustGet returns the next item of q, failing the test if Get reports shutdown or blocks
// for longer than hangGuard.
func mustGet[T comparable](t *testing.T, q *Queue[T]) T {
	t.Helper()
	item, shutdown, ok := getWithin(q, hangGuard)
	if !ok {
		t.Fatalf("Get: nothing after %v", hangGuard)
	}
	if shutdown {
		t.Fatal("Get: shutdown, want an item")
	}
	return item
}

func getWithin[T comparable](q *Queue[T], d time.Duration) (item T, shutdown, ok bool) {
	type result struct {
		item     T
		shutdown bool
	}
	ch := make(chan result, 1)
	go func() {
		item, shutdown := q.Get()
		ch <- result{item, shutdown}
	}()
	select {
	case r := <-ch:
		return r.item, r.shutdown, true
	case <-time.After(d):
		return item, false, false
	}
}

// run applies a script of queue operations and checks each result. Operations:
//
//	+x  Add(x)
//	<x  Get, which must return x
//	-x  Done(x)
//	#n  Len must be n
//	!   ShutDown
//	.   Get must report shutdown
func run(t *testing.T, q *Queue[string], script []string) {
	t.Helper()
	for i, op := range script {
		arg := op[1:]
		switch op[0] {
		case '+':
			q.Add(arg)
		case '<':
			if got := mustGet(t, q); got != arg {
				t.Fatalf("step %d %q: Get = %q", i, op, got)
			}
		case '-':
			q.Done(arg)
		case '#':
			if got := fmt.Sprint(q.Len()); got != arg {
				t.Fatalf("step %d %q: Len = %s", i, op, got)
			}
		case '!':
			q.ShutDown()
		case '.':
			item, shutdown, ok := getWithin(q, hangGuard)
			if !ok || !shutdown {
				t.Fatalf("step %d %q: Get = %q, shutdown %v, returned %v; want shutdown", i, op, item, shutdown, ok)
			}
		default:
			t.Fatalf("bad op %q", op)
		}
	}
}

// TestSequences checks the exact order in which items come out of the queue: FIFO,
// merging of duplicate adds, and the handling of an item added while it is processed
// (the workqueue's core semantics: fair, stingy, never two workers on one item).
func TestSequences(t *testing.T) {
	tests := []struct {
		name   string
		script []string
	}{
		{"fifo", []string{"+a", "+b", "+c", "#3", "<a", "<b", "<c", "#0"}},
		{"dedup while queued keeps the first position", []string{"+a", "+b", "+a", "+c", "+b", "#3", "<a", "<b", "<c", "#0"}},
		{"re-add while processing is queued on Done", []string{"+a", "<a", "+a", "#0", "-a", "#1", "<a", "-a", "#0"}},
		{"re-add while processing goes to the back", []string{"+a", "+b", "<a", "+a", "+c", "-a", "<b", "<c", "<a"}},
		{"repeated re-adds while processing merge", []string{"+a", "<a", "+a", "+a", "+a", "-a", "#1", "<a", "-a", "#0"}},
		{"item being processed is not handed out again", []string{"+a", "<a", "+a", "+b", "<b", "#0", "-a", "<a"}},
		{"Len counts queued items only", []string{"+a", "+b", "<a", "#1", "+a", "#1", "<b", "#0"}},
		{"Done without Get does nothing", []string{"-a", "#0", "+a", "-a", "#1", "<a", "-a", "#0"}},
		{"Done twice does nothing the second time", []string{"+a", "<a", "-a", "-a", "#0", "+a", "#1"}},
		{"Add after Done queues again", []string{"+a", "<a", "-a", "+a", "<a"}},
		{"shutdown drains before reporting", []string{"+a", "+b", "!", "+c", "#2", "<a", "<b", "."}},
		{"Done after shutdown requeues an accepted re-add", []string{"+a", "<a", "+a", "!", "+b", "#0", "-a", "#1", "<a", "-a", "."}},
		{"shutdown twice", []string{"+a", "!", "!", "<a", "."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New(Options[string]{})
			t.Cleanup(q.ShutDown)
			run(t, q, tt.script)
		})
	}
}

// TestZeroQueue checks that the zero Queue works without New.
func TestZeroQueue(t *testing.T) {
	var q Queue[int]
	t.Cleanup(q.ShutDown)
	if q.Len() != 0 || q.ShuttingDown() {
		t.Fatal("zero queue not empty or shut down")
	}
	q.Done(1) // before any Add: nothing to do, no panic
	q.Add(1)
	q.AddAfter(2, time.Hour)
	if got := mustGet(t, &q); got != 1 {
		t.Fatalf("Get = %d, want 1", got)
	}
	q.Done(1)
	if n := q.NumRequeues(3); n != 0 {
		t.Fatalf("NumRequeues = %d", n)
	}
}

// TestShutDownReleasesBlockedGet checks that a Get blocked on an empty queue returns
// shutdown once the queue is shut down.
func TestShutDownReleasesBlockedGet(t *testing.T) {
	q := New(Options[string]{})
	const workers = 4
	results := make(chan bool, workers)
	for range workers {
		go func() {
			_, shutdown := q.Get()
			results <- shutdown
		}()
	}
	if q.ShuttingDown() {
		t.Fatal("ShuttingDown before ShutDown")
	}
	q.ShutDown()
	if !q.ShuttingDown() {
		t.Fatal("ShuttingDown after ShutDown = false")
	}
	for range workers {
		select {
		case shutdown := <-results:
			if !shutdown {
				t.Fatal("Get returned an item from an empty queue")
			}
		case <-time.After(hangGuard):
			t.Fatal("Get still blocked after ShutDown")
		}
	}
}

// TestShutDownIgnoresAdds checks every way of adding after shutdown.
func TestShutDownIgnoresAdds(t *testing.T) {
	q := New(Options[string]{})
	q.ShutDown()
	q.Add("a")
	q.AddAfter("b", 0)
	q.AddAfter("c", time.Second)
	q.AddRateLimited("d")
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d after adds to a shut-down queue", n)
	}
	if n := q.NumRequeues("d"); n != 0 {
		t.Fatalf("NumRequeues = %d: the limiter was consulted after shutdown", n)
	}
	if q.delay.timer != nil {
		t.Fatal("AddAfter after shutdown started the delay goroutine")
	}
	run(t, q, []string{"."})
}

func TestShutDownWithDrain(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()

	t.Run("empty queue returns at once", func(t *testing.T) {
		q := New(Options[string]{})
		if err := q.ShutDownWithDrain(canceled); err != nil {
			t.Fatalf("ShutDownWithDrain = %v, want nil", err)
		}
		if !q.ShuttingDown() {
			t.Fatal("not shutting down")
		}
	})

	t.Run("honours the context", func(t *testing.T) {
		q := New(Options[string]{})
		t.Cleanup(q.ShutDown)
		run(t, q, []string{"+a", "<a"})
		if err := q.ShutDownWithDrain(canceled); !errors.Is(err, context.Canceled) {
			t.Fatalf("ShutDownWithDrain(canceled) = %v, want context.Canceled", err)
		}
		if err := q.ShutDownWithDrain(expired); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ShutDownWithDrain(expired) = %v, want context.DeadlineExceeded", err)
		}
		q.Done("a")
		if err := q.ShutDownWithDrain(canceled); err != nil {
			t.Fatalf("ShutDownWithDrain after Done = %v, want nil", err)
		}
	})

	t.Run("waits for Done of in-flight and queued items", func(t *testing.T) {
		q := New(Options[string]{})
		// a is processed and added again, b is queued and not taken yet.
		run(t, q, []string{"+a", "<a", "+a", "+b"})
		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrain(context.Background()) }()
		steps := []string{"-a", "<b", "<a", "-b"} // after each, work remains
		for _, op := range steps {
			run(t, q, []string{op})
			select {
			case err := <-drained:
				t.Fatalf("ShutDownWithDrain returned %v after %q, with work left", err, op)
			default:
			}
		}
		run(t, q, []string{"-a"})
		select {
		case err := <-drained:
			if err != nil {
				t.Fatalf("ShutDownWithDrain = %v", err)
			}
		case <-time.After(hangGuard):
			t.Fatal("ShutDownWithDrain did not return once drained")
		}
		run(t, q, []string{"."})
	})

	t.Run("concurrent drains all return", func(t *testing.T) {
		q := New(Options[string]{})
		run(t, q, []string{"+a", "<a"})
		const n = 3
		errs := make(chan error, n)
		for range n {
			go func() { errs <- q.ShutDownWithDrain(context.Background()) }()
		}
		// Whether each drain is already waiting or starts after Done, it returns nil.
		q.Done("a")
		for range n {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(hangGuard):
				t.Fatal("a ShutDownWithDrain did not return")
			}
		}
	})
}

// TestConcurrentStingy hammers one queue from many producers and workers, under -race,
// and checks the two concurrency guarantees: an item is never processed by two workers at
// once, and the last add of every item is followed by a Get of it.
func TestConcurrentStingy(t *testing.T) {
	const (
		producers = 8
		workers   = 16
		keys      = 50
		addsEach  = 5000
	)
	q := New(Options[int]{})

	var (
		adds     [keys]atomic.Int64 // incremented before each Add
		seen     [keys]atomic.Int64 // the largest adds[k] a worker read after Get
		inflight [keys]atomic.Bool
		overlap  atomic.Int64
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				if inflight[k].Swap(true) {
					overlap.Add(1)
				}
				n := adds[k].Load()
				for {
					old := seen[k].Load()
					if n <= old || seen[k].CompareAndSwap(old, n) {
						break
					}
				}
				if w%2 == 0 {
					runtime.Gosched()
				}
				inflight[k].Store(false)
				q.Done(k)
			}
		})
	}
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(p), 1))
			for range addsEach {
				k := r.IntN(keys)
				adds[k].Add(1)
				q.Add(k)
			}
		})
	}
	pwg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := q.ShutDownWithDrain(ctx); err != nil {
		t.Fatalf("ShutDownWithDrain: %v", err)
	}
	wg.Wait()

	if n := overlap.Load(); n != 0 {
		t.Errorf("%d times an item was handed to a second worker while being processed", n)
	}
	for k := range keys {
		if a, s := adds[k].Load(), seen[k].Load(); a != s {
			t.Errorf("key %d: %d adds, but the last Get saw only %d: an add was lost", k, a, s)
		}
	}
}

// TestRing checks the FIFO buffer through growth, wrap-around and shrinking against a
// slice model.
func TestRing(t *testing.T) {
	var r ring[int]
	var model []int
	rnd := rand.New(rand.NewPCG(1, 2))
	next := 0
	for step := range 200000 {
		// Grow to a few thousand elements, then drain, twice, so shrinking is exercised.
		pushBias := 60
		if (step/50000)%2 == 1 {
			pushBias = 40
		}
		if len(model) == 0 || rnd.IntN(100) < pushBias {
			r.push(next)
			model = append(model, next)
			next++
		} else {
			got := r.pop()
			if got != model[0] {
				t.Fatalf("step %d: pop = %d, want %d", step, got, model[0])
			}
			model = model[1:]
		}
		if r.len() != len(model) {
			t.Fatalf("step %d: len = %d, want %d", step, r.len(), len(model))
		}
		if len(r.buf)&(len(r.buf)-1) != 0 {
			t.Fatalf("step %d: buffer size %d is not a power of two", step, len(r.buf))
		}
	}
	// Drained and then used lightly, the buffer gives its memory back.
	for r.len() > 0 {
		r.pop()
	}
	peak := len(r.buf)
	for i := range 4 * peak {
		r.push(i)
		r.pop()
	}
	if len(r.buf) != ringMinSize {
		t.Fatalf("buffer of %d slots after light use, want %d (peak was %d)", len(r.buf), ringMinSize, peak)
	}
}
