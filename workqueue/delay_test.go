package workqueue

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/informer-go/informer/clock"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// newFakeQueue returns a queue on a fake clock, shut down when the test ends.
func newFakeQueue(t *testing.T) (*Queue[string], *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	q := New(Options[string]{Clock: clk})
	t.Cleanup(q.ShutDown)
	return q, clk
}

// after is one AddAfter call.
type after struct {
	item string
	d    time.Duration
}

// TestAddAfter checks which items a fake-clock step releases, and in which order (the
// delaying queue: due items in due order, an earlier add of the same item wins). The timer is armed inside AddAfter and re-armed
// before the delay goroutine releases the queue lock, so a test can step right after
// AddAfter or Get without waiting for the goroutine.
func TestAddAfter(t *testing.T) {
	type step struct {
		by   time.Duration
		want []string // items released by this step, in order
	}
	tests := []struct {
		name  string
		adds  []after
		steps []step
	}{
		{
			name: "ordered by ready time, not by call",
			adds: []after{{"c", 3 * time.Second}, {"a", time.Second}, {"b", 2 * time.Second}},
			steps: []step{
				{999 * time.Millisecond, nil},
				{time.Millisecond, []string{"a"}},
				{time.Second, []string{"b"}},
				{time.Second, []string{"c"}},
			},
		},
		{
			name: "one step releases every due item in ready-time order",
			adds: []after{{"c", 3 * time.Second}, {"a", time.Second}, {"b", 2 * time.Second}, {"d", time.Hour}},
			steps: []step{
				{10 * time.Second, []string{"a", "b", "c"}},
				{time.Hour, []string{"d"}},
			},
		},
		{
			name: "equal ready times come out in call order",
			adds: []after{{"x", time.Second}, {"y", time.Second}, {"w", time.Second}},
			steps: []step{
				{time.Second, []string{"x", "y", "w"}},
			},
		},
		{
			name: "earlier ready time wins: a later AddAfter does not postpone",
			adds: []after{{"a", time.Second}, {"a", 5 * time.Second}, {"z", 5 * time.Second}},
			steps: []step{
				{time.Second, []string{"a"}},
				{4 * time.Second, []string{"z"}}, // not a again
			},
		},
		{
			name: "earlier ready time wins: a sooner AddAfter brings forward",
			adds: []after{{"a", 5 * time.Second}, {"b", 2 * time.Second}, {"a", time.Second}, {"z", 5 * time.Second}},
			steps: []step{
				{time.Second, []string{"a"}},
				{time.Second, []string{"b"}},
				{3 * time.Second, []string{"z"}}, // the stale a at 5 s is skipped
			},
		},
		{
			name: "d <= 0 adds at once",
			adds: []after{{"later", time.Second}, {"now", 0}, {"past", -time.Hour}},
			steps: []step{
				{0, []string{"now", "past"}},
				{time.Second, []string{"later"}},
			},
		},
		{
			name: "overflowing delay never fires",
			adds: []after{{"never", math.MaxInt64}, {"z", time.Second}},
			steps: []step{
				{time.Second, []string{"z"}},
				{100 * 365 * 24 * time.Hour, nil},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, clk := newFakeQueue(t)
			for _, a := range tt.adds {
				q.AddAfter(a.item, a.d)
			}
			for i, s := range tt.steps {
				clk.Step(s.by)
				for _, want := range s.want {
					if got := mustGet(t, q); got != want {
						t.Fatalf("step %d (+%v): Get = %q, want %q", i, s.by, got, want)
					}
					q.Done(want)
				}
				// Every due item was added in one critical section, before the Get of the
				// first of them returned: anything left now was released too early.
				if n := q.Len(); n != 0 {
					t.Fatalf("step %d (+%v): %d more items released", i, s.by, n)
				}
			}
		})
	}
}

// TestAddAfterImmediateStartsNoGoroutine checks that adds that need no wait never start
// the delay goroutine.
func TestAddAfterImmediateStartsNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	q := New(Options[string]{})
	q.AddAfter("a", 0)
	q.AddAfter("b", -time.Second)
	if q.delay.timer != nil {
		t.Fatal("delay goroutine started for adds that need no wait")
	}
	run(t, q, []string{"#2", "<a", "<b"})
	q.ShutDown()
}

// TestAddAfterShutDown checks that ShutDown drops waiting items, stops the one delay
// goroutine before returning, and that later AddAfter calls are ignored.
func TestAddAfterShutDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	clk := clock.NewFake(epoch)
	q := New(Options[string]{Clock: clk})
	for i := range 100 {
		q.AddAfter(string(rune('a'+i%26))+string(rune('a'+i/26)), time.Duration(i+1)*time.Second)
	}
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d timers armed for 100 waiting items, want 1 (one goroutine, one timer)", n)
	}
	q.ShutDown() // returns after the goroutine exits; VerifyNone checks it
	if n := clk.Waiters(); n != 0 {
		t.Fatalf("%d timers still armed after ShutDown", n)
	}
	q.AddAfter("x", time.Second)
	clk.Step(time.Hour)
	run(t, q, []string{"#0", "."})
}

// TestAddAfterCompactsStaleEntries checks that bringing one item forward again and again
// does not grow the heap without bound.
func TestAddAfterCompactsStaleEntries(t *testing.T) {
	q, clk := newFakeQueue(t)
	const moves = 10000
	for i := range moves {
		q.AddAfter("a", time.Duration(moves-i)*time.Second)
	}
	q.dmu.Lock()
	size := len(q.delay.heap)
	q.dmu.Unlock()
	if size > 2*compactMin+1 {
		t.Fatalf("heap holds %d entries for one waiting item", size)
	}
	clk.Step(time.Second)
	run(t, q, []string{"<a", "-a", "#0"})
	q.dmu.Lock()
	defer q.dmu.Unlock()
	if n := q.delay.waiting.n; n != 0 {
		t.Fatalf("%d items still waiting", n)
	}
}

// TestDelayHeapOrder checks the heap against a sorted model with random ready times,
// many ties and random bring-forward updates.
func TestDelayHeapOrder(t *testing.T) {
	var w delayed[int]
	r := rand.New(rand.NewPCG(3, 4))
	want := map[int]time.Duration{}
	for range 20000 {
		item := r.IntN(3000)
		h := hashOf(item)
		at := time.Duration(r.IntN(500))
		i, added := w.waiting.insert(h, item)
		if !added {
			if w.waiting.slots[i].val.at <= at {
				continue
			}
			w.stale++
		}
		w.seq++
		w.waiting.slots[i].val = waitRef{at: at, seq: w.seq}
		w.push(waitEntry[int]{at: at, seq: w.seq, hash: h, item: item})
		want[item] = at
		if w.stale >= compactMin && w.stale > len(w.heap)/2 {
			w.compact()
		}
	}
	type out struct {
		at  time.Duration
		seq uint64
	}
	var got []out
	for len(w.heap) > 0 {
		e := w.pop()
		if i := w.waiting.find(e.hash, e.item); i < 0 || w.waiting.slots[i].val.seq != e.seq {
			continue // stale
		}
		got = append(got, out{e.at, e.seq})
		if e.at != want[e.item] {
			t.Fatalf("item %d released at %v, want %v", e.item, e.at, want[e.item])
		}
		delete(want, e.item)
	}
	if len(want) != 0 {
		t.Fatalf("%d items never released", len(want))
	}
	if !slices.IsSortedFunc(got, func(a, b out) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return int(a.seq) - int(b.seq)
	}) {
		t.Fatal("entries not released in (ready time, call order)")
	}
}

// TestDelayHeapShrinks checks that the heap gives memory back after a burst, once it has
// been used lightly for a while.
func TestDelayHeapShrinks(t *testing.T) {
	var w delayed[int]
	for i := range 10000 {
		w.push(waitEntry[int]{at: time.Duration(i), seq: uint64(i), item: i})
	}
	for len(w.heap) > 0 {
		w.pop()
	}
	peak := cap(w.heap)
	for i := range 4 * peak {
		w.push(waitEntry[int]{at: time.Duration(i), seq: uint64(i), item: i})
		w.pop()
	}
	if c := cap(w.heap); c > ringMinSize {
		t.Fatalf("heap capacity %d after light use, want at most %d (peak was %d)", c, ringMinSize, peak)
	}
}

// TestAddAfterConcurrent delays items from many goroutines on the real clock while workers
// drain the queue, under -race: every item comes out exactly once, and ShutDown leaves no
// goroutine behind (TestMain checks).
func TestAddAfterConcurrent(t *testing.T) {
	const (
		producers = 8
		each      = 500
		workers   = 4
	)
	q := New(Options[int]{})
	var (
		seen    [producers * each]atomic.Int32
		count   atomic.Int32
		all     = make(chan struct{})
		workerW sync.WaitGroup
	)
	for range workers {
		workerW.Go(func() {
			for {
				item, shutdown := q.Get()
				if shutdown {
					return
				}
				seen[item].Add(1)
				q.Done(item)
				if count.Add(1) == producers*each {
					close(all)
				}
			}
		})
	}
	var producerW sync.WaitGroup
	for p := range producers {
		producerW.Go(func() {
			for i := range each {
				item := p*each + i
				q.AddAfter(item, time.Duration(item%7)*100*time.Microsecond) // 0 to 600µs
			}
		})
	}
	producerW.Wait()
	select {
	case <-all:
	case <-time.After(hangGuard):
		t.Fatalf("%d of %d delayed items came out", count.Load(), producers*each)
	}
	q.ShutDown()
	workerW.Wait()
	for item := range seen {
		if n := seen[item].Load(); n != 1 {
			t.Fatalf("item %d came out %d times", item, n)
		}
	}
}
