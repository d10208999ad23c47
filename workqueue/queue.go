package workqueue

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/informer-go/informer/clock"
)

// Options configures a Queue. The zero Options is valid and gives the same queue as the zero
// Queue: the real clock, DefaultRateLimiter and no metrics.
type Options[T comparable] struct {
	// Name identifies the queue to Metrics; it is passed to every constructor of the
	// provider and is not used otherwise. It may be empty.
	Name string

	// Clock is the source of time for AddAfter, AddRateLimited, the default rate limiter's
	// token bucket and the metrics. Nil means clock.Real.
	Clock clock.Clock

	// RateLimiter decides how long AddRateLimited delays an item. Nil means the
	// DefaultRateLimiter policy, with its token bucket reading Clock.
	RateLimiter RateLimiter[T]

	// Metrics receives the queue's metrics. Nil means no metrics, and then the queue
	// neither reads the clock nor keeps any per-item timestamps for them.
	Metrics MetricsProvider
}

// Queue is a fair, stingy work queue of items of type T, with delayed and rate-limited adds.
// See the package documentation for the guarantees.
//
// The zero Queue is ready to use, with the defaults described in Options. A Queue must not
// be copied after first use. All methods are safe for concurrent use.
//
// A Queue that has delayed an item runs one goroutine until ShutDown or ShutDownWithDrain
// is called; a program that drops a Queue without shutting it down leaks that goroutine.
type Queue[T comparable] struct {
	mu   sync.Mutex
	cond sync.Cond // cond.L is &mu; set by init

	clk     clock.Clock // as configured; never written after New, see clock()
	metrics *queueMetrics[T]
	name    string
	onShut  ShutDownObserver // the metrics provider, if it wants to know of the shutdown

	// Every item known to the queue, waiting in fifo or being processed, and its state.
	state      table[T, itemState]
	fifo       ring[queued[T]]
	processing int // number of items in stateProcessing or stateRequeue

	shuttingDown bool
	closed       atomic.Bool   // mirrors shuttingDown for the lock-free ShuttingDown
	drained      chan struct{} // closed once shut down, empty and idle; nil until needed

	// The items waiting for AddAfter have a lock of their own, so that delaying an item
	// never waits for a worker. dmu is never held while taking mu, or the reverse.
	dmu   sync.Mutex
	delay delayed[T]     // guarded by dmu
	wg    sync.WaitGroup // the delay goroutine

	limiterOnce sync.Once
	limiter     RateLimiter[T]
}

// queued is an entry of the FIFO: an item and its hash, so that Get need not hash it.
type queued[T any] struct {
	item T
	hash uint64
}

// itemState is where an item is. An item absent from Queue.state is unknown to the queue
// (it may still wait for a delay).
type itemState uint8

const (
	stateNone       itemState = iota // the state of a freshly inserted table slot
	stateQueued                      // in fifo, waiting for Get
	stateProcessing                  // handed out by Get, Done not yet called
	stateRequeue                     // being processed and added again: queue it on Done
)

// New returns a Queue configured by cfg. It starts no goroutine. If cfg.Metrics is set,
// New calls each of its constructors once, with cfg.Name.
func New[T comparable](cfg Options[T]) *Queue[T] {
	q := &Queue[T]{clk: cfg.Clock, limiter: cfg.RateLimiter}
	q.init()
	if cfg.Metrics != nil {
		q.name = cfg.Name
		q.onShut, _ = cfg.Metrics.(ShutDownObserver)
		q.metrics = newQueueMetrics[T](cfg.Metrics, cfg.Name, q.clock())
		cfg.Metrics.NewUnfinishedWorkSecondsFunc(cfg.Name, q.unfinishedWorkSeconds)
		cfg.Metrics.NewLongestRunningProcessorSecondsFunc(cfg.Name, q.longestRunningProcessorSeconds)
	}
	return q
}

// init prepares a zero Queue for use. It is called with q.mu held (or before q is shared).
func (q *Queue[T]) init() {
	if q.cond.L == nil {
		q.cond.L = &q.mu
	}
}

// hashSeed seeds the hashes of every Queue's items. Hashes never leave the process.
var hashSeed = maphash.MakeSeed()

// hashOf returns item's hash for the state table. It is computed before taking the queue
// lock, so that the critical sections do no hashing.
func hashOf[T comparable](item T) uint64 {
	return maphash.Comparable(hashSeed, item) | hashTopBit
}

// clock returns the configured clock, or the real one.
func (q *Queue[T]) clock() clock.Clock {
	if q.clk != nil {
		return q.clk
	}
	return clock.Real{}
}

// Add queues item for processing, unless it is already queued (the adds merge and the item
// keeps its place) or the queue is shutting down (the add is ignored). If item is being
// processed, it is queued again when Done is called for it.
//
// Add never blocks on workers: the queue is unbounded.
func (q *Queue[T]) Add(item T) {
	if q.closed.Load() {
		return
	}
	h := hashOf(item)
	q.mu.Lock()
	q.init()
	if !q.shuttingDown {
		q.addLocked(item, h)
	}
	q.mu.Unlock()
}

// addLocked adds item, whose hash is h. Called with q.mu held.
func (q *Queue[T]) addLocked(item T, h uint64) {
	i, _ := q.state.insert(h, item)
	s := &q.state.slots[i]
	switch s.val {
	case stateNone:
		s.val = stateQueued
		q.fifo.push(queued[T]{item, h})
		q.cond.Signal()
		if q.metrics != nil {
			q.metrics.added(item, true)
		}
	case stateProcessing:
		s.val = stateRequeue
		if q.metrics != nil {
			q.metrics.added(item, false)
		}
	}
}

// Get blocks until an item is queued, marks it as being processed and returns it with
// shutdown false. The caller must call Done(item) when it has finished with it, whatever
// the outcome; until then the item is not handed to any other caller.
//
// After ShutDown, Get keeps returning the items still queued; once none is left it returns
// the zero T and shutdown true, and a worker should then return.
func (q *Queue[T]) Get() (item T, shutdown bool) {
	q.mu.Lock()
	q.init()
	for q.fifo.len() == 0 {
		if q.shuttingDown {
			q.mu.Unlock()
			return item, true
		}
		q.cond.Wait()
	}
	e := q.fifo.pop()
	item = e.item
	q.state.slots[q.state.find(e.hash, item)].val = stateProcessing
	q.processing++
	if q.metrics != nil {
		q.metrics.got(item)
	}
	q.mu.Unlock()
	return item, false
}

// Done marks item as processed. If it was added again while being processed, it is queued
// again, at the back, even if the queue is shutting down (the add was accepted before).
// Done for an item that is not being processed does nothing.
func (q *Queue[T]) Done(item T) {
	h := hashOf(item)
	q.mu.Lock()
	i := q.state.find(h, item)
	if i < 0 {
		q.mu.Unlock()
		return
	}
	switch q.state.slots[i].val {
	case stateProcessing:
		q.state.remove(i)
	case stateRequeue:
		q.state.slots[i].val = stateQueued
		q.fifo.push(queued[T]{item, h})
		q.cond.Signal()
		if q.metrics != nil {
			q.metrics.requeued()
		}
	default:
		q.mu.Unlock()
		return
	}
	q.processing--
	if q.metrics != nil {
		q.metrics.done(item)
	}
	if q.drained != nil && q.processing == 0 && q.fifo.len() == 0 {
		close(q.drained)
		q.drained = nil
	}
	q.mu.Unlock()
}

// Len returns the number of items queued and waiting for Get. It does not count items
// being processed (even if added again meanwhile) or items waiting for a delay. The value
// is out of date as soon as it is returned; use it for information only.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.fifo.len()
}

// ShutDown makes the queue ignore further adds, drops the items waiting for a delay, stops
// the delay goroutine and wakes every blocked Get. Items already queued are still handed
// out by Get. ShutDown does not wait for workers; see ShutDownWithDrain. It may be called
// more than once, and returns once the delay goroutine has exited.
func (q *Queue[T]) ShutDown() {
	q.mu.Lock()
	q.init()
	first := q.shutDownLocked()
	q.mu.Unlock()
	q.stopDelays()
	q.notifyShutDown(first)
}

// shutDownLocked shuts the queue down; it reports whether this call did.
func (q *Queue[T]) shutDownLocked() bool {
	if q.shuttingDown {
		return false
	}
	q.shuttingDown = true
	q.closed.Store(true)
	q.cond.Broadcast()
	return true
}

// notifyShutDown tells the metrics provider, once, that the queue has shut down.
func (q *Queue[T]) notifyShutDown(first bool) {
	if first && q.onShut != nil {
		q.onShut.QueueShutDown(q.name)
	}
}

// ShutDownWithDrain shuts the queue down as ShutDown does, then waits until every item
// accepted before the shutdown has been handed out by Get and marked Done, including
// items queued again by Done. It returns nil once the queue is drained, or ctx.Err() if ctx
// ends first; the queue stays shut down either way and workers may go on draining it.
//
// Draining needs workers that keep calling Get and Done: with none, ShutDownWithDrain
// returns only when ctx ends.
func (q *Queue[T]) ShutDownWithDrain(ctx context.Context) error {
	q.mu.Lock()
	q.init()
	first := q.shutDownLocked()
	var drained chan struct{}
	if q.processing > 0 || q.fifo.len() > 0 {
		if q.drained == nil {
			q.drained = make(chan struct{})
		}
		drained = q.drained
	}
	q.mu.Unlock()
	q.stopDelays()
	q.notifyShutDown(first)
	if drained == nil {
		return nil
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		select {
		case <-drained: // both ready: the queue did drain
			return nil
		default:
			return ctx.Err()
		}
	}
}

// ShuttingDown reports whether ShutDown or ShutDownWithDrain has been called. It takes no
// lock.
func (q *Queue[T]) ShuttingDown() bool {
	return q.closed.Load()
}
