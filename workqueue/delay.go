package workqueue

import (
	"math"
	"time"

	"github.com/informer-go/informer/clock"
)

// AddAfter adds item to the queue once d has passed, as Add would then. A d of zero or less
// adds it at once. If item is already waiting for a delay, the earlier of the two ready
// times is kept: a later AddAfter can bring an item forward but never pushes it back.
// Items that become ready at the same instant are added in the order of their AddAfter
// calls. AddAfter is ignored once the queue is shutting down, and items still waiting at
// shutdown are dropped.
//
// A waiting item is independent of the queue proper: AddAfter does not look at whether
// item is queued or being processed, and an Add meanwhile does not cancel the delayed add.
//
// The first AddAfter that has to wait starts the queue's delay goroutine; it runs until
// ShutDown. Each call costs O(log n) in the number of waiting items and allocates nothing
// once the heap has grown.
func (q *Queue[T]) AddAfter(item T, d time.Duration) {
	if d <= 0 {
		q.Add(item)
		return
	}
	if q.closed.Load() {
		return
	}
	h := hashOf(item)
	q.dmu.Lock()
	if !q.delay.stopped {
		q.addAfterLocked(item, h, d)
	}
	q.dmu.Unlock()
}

// delayed holds the items waiting for AddAfter: a binary min-heap ordered by ready time,
// and for each item its one live heap entry. An item whose ready time moves earlier gets a
// new entry; the old one goes stale, is skipped when it reaches the top and is swept by
// compact when stale entries outnumber live ones. Times are offsets from epoch, on the
// queue's clock, so that comparisons are integer comparisons. It is guarded by Queue.dmu.
type delayed[T comparable] struct {
	epoch   time.Time // set by the first AddAfter that waits, with timer
	stopped bool      // the queue is shutting down: nothing more waits
	heap    []waitEntry[T]
	waiting table[T, waitRef] // the live entry of each waiting item
	seq     uint64            // sequence number of the last entry; breaks ties FIFO
	stale   int               // entries in heap that are no longer live
	quiet   int               // pops in a row with the heap under 1/8 of its capacity

	timer   clock.Timer   // nil until the first item has to wait
	armed   bool          // timer is set to fire at armedAt
	armedAt time.Duration //
	quit    chan struct{} // closed by stop to end the goroutine
}

type waitEntry[T any] struct {
	at   time.Duration
	seq  uint64
	hash uint64 // of item
	item T
}

type waitRef struct {
	at  time.Duration
	seq uint64
}

// compactMin is the number of stale heap entries below which compact is not worth it.
const compactMin = 64

// now returns the current time as an offset from the delay epoch. Called with q.dmu held.
func (q *Queue[T]) now() time.Duration {
	return q.clock().Since(q.delay.epoch)
}

// addAfterLocked makes item, whose hash is h, wait for d > 0. Called with q.dmu held.
func (q *Queue[T]) addAfterLocked(item T, h uint64, d time.Duration) {
	w := &q.delay
	if w.timer == nil { // the first item to wait; the timer is created below
		w.epoch = q.clock().Now()
	}
	now := q.now()
	at := now + d
	if at < now { // overflow: wait forever, in practice
		at = math.MaxInt64
	}
	i, added := w.waiting.insert(h, item)
	ref := &w.waiting.slots[i].val
	if !added {
		if ref.at <= at {
			return
		}
		w.stale++ // the entry for the later time stays in the heap, dead
	}
	w.seq++
	*ref = waitRef{at: at, seq: w.seq}
	w.push(waitEntry[T]{at: at, seq: w.seq, hash: h, item: item})
	if w.stale >= compactMin && w.stale > len(w.heap)/2 {
		w.compact()
	}

	switch {
	case w.timer == nil:
		w.timer = q.clock().NewTimer(at - now)
		w.armed, w.armedAt = true, at
		w.quit = make(chan struct{})
		q.wg.Add(1)
		go q.waitLoop(w.timer, w.quit)
	case !w.armed || at < w.armedAt:
		// Re-arm here, under the lock and in the caller's goroutine, rather than waking
		// the delay goroutine to do it: no wake-up can be lost, and a test that calls
		// AddAfter and then steps a fake clock sees the new deadline already armed.
		w.timer.Reset(at - now)
		w.armed, w.armedAt = true, at
	}
}

// waitLoop is the delay goroutine: it sleeps until the earliest ready time, then adds every
// item that is due, in ready-time order and under one acquisition of the queue lock. It
// exits when quit is closed.
func (q *Queue[T]) waitLoop(timer clock.Timer, quit <-chan struct{}) {
	defer q.wg.Done()
	var due []waitEntry[T] // reused from round to round
	for {
		select {
		case <-quit:
			return
		case <-timer.C():
		}
		q.dmu.Lock()
		if !q.delay.stopped {
			due = q.takeDueLocked(due[:0])
		}
		q.dmu.Unlock()
		if len(due) == 0 {
			continue
		}
		q.mu.Lock()
		if !q.shuttingDown {
			for _, e := range due {
				q.addLocked(e.item, e.hash)
			}
		}
		q.mu.Unlock()
		clear(due)
	}
}

// takeDueLocked removes every waiting item whose ready time has come, appending it to due,
// and re-arms the timer for the next one before the caller adds any of them, so that a
// test that has seen the first of them come out of Get can step a fake clock at once. A
// tick for a deadline that has since changed is harmless: nothing is due and the timer is
// re-armed for the earliest ready time. Called with q.dmu held.
func (q *Queue[T]) takeDueLocked(due []waitEntry[T]) []waitEntry[T] {
	w := &q.delay
	w.armed = false
	now := q.now()
	for len(w.heap) > 0 {
		top := &w.heap[0]
		i := w.waiting.find(top.hash, top.item)
		live := i >= 0 && w.waiting.slots[i].val.seq == top.seq
		if live && top.at > now {
			break
		}
		e := w.pop()
		if !live {
			w.stale--
			continue
		}
		w.waiting.remove(i)
		due = append(due, e)
	}
	if len(w.heap) > 0 {
		w.armed, w.armedAt = true, w.heap[0].at
		w.timer.Reset(w.armedAt - now)
	}
	return due
}

// stopDelays drops the waiting items and stops the delay goroutine, if any, waiting for it
// to exit.
func (q *Queue[T]) stopDelays() {
	q.dmu.Lock()
	if !q.delay.stopped {
		q.delay.stopped = true
		q.delay.stop()
	}
	q.dmu.Unlock()
	q.wg.Wait()
}

// stop ends the delay goroutine, if any, and drops every waiting item.
func (w *delayed[T]) stop() {
	if w.timer != nil {
		w.timer.Stop()
		close(w.quit)
	}
	w.heap, w.waiting, w.stale, w.armed = nil, table[T, waitRef]{}, 0, false
}

func (w *delayed[T]) less(i, j int) bool {
	a, b := &w.heap[i], &w.heap[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (w *delayed[T]) push(e waitEntry[T]) {
	w.heap = append(w.heap, e)
	w.up(len(w.heap) - 1)
	if 4*len(w.heap) >= cap(w.heap) {
		w.quiet = 0
	}
}

// pop removes and returns the earliest entry. The heap must not be empty.
func (w *delayed[T]) pop() waitEntry[T] {
	n := len(w.heap) - 1
	e := w.heap[0]
	w.heap[0] = w.heap[n]
	w.heap[n] = waitEntry[T]{} // let the item be collected
	w.heap = w.heap[:n]
	if n > 0 {
		w.down(0)
	}
	// Give memory back as the ring and the table do: after as many pops at low
	// occupancy as the heap has capacity, without having been a quarter full meanwhile.
	if c := cap(w.heap); c > ringMinSize && 8*n < c {
		if w.quiet++; w.quiet >= c {
			w.quiet = 0
			w.heap = append(make([]waitEntry[T], 0, c/2), w.heap...)
		}
	}
	return e
}

func (w *delayed[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !w.less(i, p) {
			return
		}
		w.heap[i], w.heap[p] = w.heap[p], w.heap[i]
		i = p
	}
}

func (w *delayed[T]) down(i int) {
	n := len(w.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && w.less(r, c) {
			c = r
		}
		if !w.less(c, i) {
			return
		}
		w.heap[i], w.heap[c] = w.heap[c], w.heap[i]
		i = c
	}
}

// compact removes the stale entries and restores the heap order, in O(n).
func (w *delayed[T]) compact() {
	live := w.heap[:0]
	for _, e := range w.heap {
		if i := w.waiting.find(e.hash, e.item); i >= 0 && w.waiting.slots[i].val.seq == e.seq {
			live = append(live, e)
		}
	}
	clear(w.heap[len(live):])
	w.heap = live
	w.stale = 0
	for i := len(w.heap)/2 - 1; i >= 0; i-- {
		w.down(i)
	}
}
