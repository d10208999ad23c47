package informer

import (
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/histogram"
)

// Handler receives an informer's notifications. Each handler has its own goroutine and
// queue: its methods are called one at a time, in the order of the changes, and a slow
// handler delays no other handler and not the cache.
type Handler[V any] interface {
	// OnAdd is called for an object that appeared. initial is true while the handler is
	// receiving the state that existed when it started: the initial list, or the cache
	// replayed to a handler added later.
	OnAdd(obj V, initial bool)
	// OnUpdate is called for an object that changed, and on a resync with old and new the
	// same object.
	OnUpdate(old, new V)
	// OnDelete is called for an object that went away, with its last known state. When
	// finalStateUnknown is true the delete was not observed (it happened while the
	// informer was disconnected and a relist found the object gone): obj is the last state
	// the informer knew, which may be older than the object's real final state.
	OnDelete(obj V, finalStateUnknown bool)
}

// RevisionHandler is implemented by a Handler that wants to know which revision of the
// source its notifications add up to. OnRevision(rev) is called on the handler's
// goroutine, in order with its other calls, whenever the notifications received so far
// make exactly the source's state at rev: after a batch that left no change queued (the
// cache then holds every change up to rev and none newer), after a restore, and after the
// replay to a handler added to a running informer whose cache was then exact. It is not
// called after a batch that left changes queued, nor while the handler's queue coalesces
// (Coalesce policy, queue full); when the coalesced changes are delivered, the newest
// revision they make exactly is delivered after them, so that a handler is never left
// without the revision its state reached. It costs one queued marker per batch, and
// nothing for handlers that do not implement it.
type RevisionHandler interface {
	// OnRevision reports that the notifications so far are the source's state at rev.
	OnRevision(rev string)
}

// HandlerFuncs adapts functions into a Handler. Nil functions are skipped.
type HandlerFuncs[V any] struct {
	// AddFunc serves OnAdd.
	AddFunc func(obj V, initial bool)
	// UpdateFunc serves OnUpdate.
	UpdateFunc func(old, new V)
	// DeleteFunc serves OnDelete.
	DeleteFunc func(obj V, finalStateUnknown bool)
}

// OnAdd calls AddFunc if it is set.
func (h HandlerFuncs[V]) OnAdd(obj V, initial bool) {
	if h.AddFunc != nil {
		h.AddFunc(obj, initial)
	}
}

// OnUpdate calls UpdateFunc if it is set.
func (h HandlerFuncs[V]) OnUpdate(old, new V) {
	if h.UpdateFunc != nil {
		h.UpdateFunc(old, new)
	}
}

// OnDelete calls DeleteFunc if it is set.
func (h HandlerFuncs[V]) OnDelete(obj V, finalStateUnknown bool) {
	if h.DeleteFunc != nil {
		h.DeleteFunc(obj, finalStateUnknown)
	}
}

// QueuePolicy says what a handler's queue does when it is full.
type QueuePolicy uint8

const (
	// Coalesce keeps, once the queue is full, only the newest state per key: a handler that
	// falls behind skips intermediate states but sees every key's latest state, in order,
	// and memory stays bounded by the number of keys. It is the default: a stalled
	// handler can never exhaust memory or slow anyone else.
	Coalesce QueuePolicy = iota
	// Block makes the informer wait when the queue is full, so the handler sees every
	// change; the wait propagates back to the source, which is then read no faster than the
	// slowest blocking handler drains. Other handlers stop receiving too while it waits.
	Block
)

// DefaultQueueLength is the queue length of a handler whose HandlerOptions.QueueLength is 0.
const DefaultQueueLength = 4096

// HandlerOptions configures one handler.
type HandlerOptions struct {
	// ResyncPeriod asks for a resync of every cached object (OnUpdate(obj, obj)) at this
	// period; 0 means the informer's resync period and a negative value means never. It is
	// raised to at least one second, and has no effect on an informer built with resync 0
	//. Only a handler due for a resync receives resync notifications, which
	// include objects that a relist found unchanged (see Options.Revision).
	ResyncPeriod time.Duration
	// QueueLength bounds the notifications waiting for this handler; 0 means
	// DefaultQueueLength.
	QueueLength int
	// Policy says what happens when the queue is full; the zero value is Coalesce.
	Policy QueuePolicy
	// Name identifies the handler in errors, logs and metrics.
	Name string
	// MeasureLatency keeps a histogram of the time notifications wait in the handler's
	// queue, from the informer queueing one to the handler being called with it
	// (HandlerStats.Latency). It costs a clock reading per call. For notifications merged
	// while the queue was full (Coalesce), the wait is counted from the moment it filled.
	MeasureLatency bool
}

// idleBufferCap is the largest queue buffer an idle handler keeps.
const idleBufferCap = 256

// minimumResyncPeriod is the floor on a handler's resync period.
const minimumResyncPeriod = time.Second

type notifyKind uint8

const (
	notifyAdd notifyKind = iota + 1
	notifyUpdate
	notifyDelete
	notifySynced   // marker: the handler has been given the whole initial state
	notifyRevision // marker: the notifications so far are the state at the batch's rev (RevisionHandler)
)

// notification is one call to make on a handler. kind is never zero for a real one: the
// queue never uses a zero value as "nothing".
type notification[K comparable, V any] struct {
	kind    notifyKind
	initial bool // OnAdd's flag
	unknown bool // OnDelete's finalStateUnknown
	sync    bool // a resync: only for listeners due for one
	key     K
	old     V
	new     V
}

// addNote is the OnAdd of obj under key.
func addNote[K comparable, V any](key K, obj V, initial bool) notification[K, V] {
	return notification[K, V]{kind: notifyAdd, key: key, new: obj, initial: initial}
}

// updateNote is the OnUpdate of key from old to obj; sync: a resync.
func updateNote[K comparable, V any](key K, old, obj V, sync bool) notification[K, V] {
	return notification[K, V]{kind: notifyUpdate, key: key, old: old, new: obj, sync: sync}
}

// deleteNote is the OnDelete of key, last seen as obj.
func deleteNote[K comparable, V any](key K, obj V, unknown bool) notification[K, V] {
	return notification[K, V]{kind: notifyDelete, key: key, old: obj, unknown: unknown}
}

// Empty reports whether n is no notification (the zero value).
func (n *notification[K, V]) Empty() bool { return n.kind == 0 }

// Registration is a handler added to an informer.
type Registration struct {
	l listenerControl
}

type listenerControl interface {
	hasSynced() bool
	syncedChan() <-chan struct{}
	stats() HandlerStats
	name() string
}

// HasSynced reports whether the handler has been called for the whole initial state: the
// initial list, or for a handler added later the cache as it was then. It is per handler:
// other handlers may still be behind (unlike client-go's informer-wide HasSynced).
func (r *Registration) HasSynced() bool { return r.l.hasSynced() }

// Synced returns a channel closed once HasSynced is true.
func (r *Registration) Synced() <-chan struct{} { return r.l.syncedChan() }

// Stats returns the handler's delivery counters.
func (r *Registration) Stats() HandlerStats { return r.l.stats() }

// Name returns the handler's name from HandlerOptions (or a generated one).
func (r *Registration) Name() string { return r.l.name() }

// HandlerStats are counters of one handler.
type HandlerStats struct {
	// Queued is the number of notifications waiting.
	Queued int
	// Delivered counts calls made to the handler.
	Delivered uint64
	// Coalesced counts notifications merged into a newer one because the queue was full.
	Coalesced uint64
	// Blocked counts the times the informer waited for room in this handler's queue.
	Blocked uint64
	// Panics counts handler calls that panicked (recovered; the notification is skipped).
	Panics uint64
	// Latency is the distribution of the time notifications waited in the queue, in
	// seconds; empty (nil Bounds) unless HandlerOptions.MeasureLatency is set.
	Latency Histogram
}

// listener delivers to one handler: the informer appends to pending; the listener's
// goroutine swaps pending out and calls the handler with no lock held (with a
// bound). Once pending is full (Coalesce policy) notifications go to the overflow, which
// keeps at most a delete and an add per key; while the overflow is not empty everything new
// goes there too, so per-key order is kept.
type listener[K comparable, V any] struct {
	reg     *Registration
	handler Handler[V]
	revs    RevisionHandler // handler, if it implements RevisionHandler
	opts    HandlerOptions
	onPanic func(p *HandlerPanicError)

	mu      sync.Mutex
	space   *sync.Cond      // Block policy: signalled when the listener takes pending
	pending []segment[K, V] // runs of shared batches, in order
	queued  int             // notifications in pending
	spare   []segment[K, V]
	drained *noteBatch[K, V] // the listener's own batch for overflow drains, kept for reuse

	// latency measurement (MeasureLatency): the clock, and when the overflow began
	latency       *histogram.Histogram
	clk           interface{ Now() time.Time }
	overflowSince time.Time

	overflow map[K]*coalesced[K, V]
	order    []overflowSlot[K]
	// overflowRev is the revision of the last RevisionHandler marker merged into the
	// overflow when no change was merged after it: the overflow then ends in the exact
	// state at that revision, and its drain ends with that marker. "" otherwise.
	overflowRev string
	stopped     atomic.Bool // set under mu; the delivery loop reads it without
	wake        chan struct{}
	done        chan struct{}

	// resync state, guarded by the processor's lock
	resyncPeriod time.Duration
	nextResync   time.Time
	syncing      bool

	// the call in progress, for the stop's report of a handler that does not return
	callMu  sync.Mutex
	calling bool
	callKey K

	synced    atomic.Bool
	syncedCh  chan struct{}
	delivered atomic.Uint64
	coalesce  atomic.Uint64
	blocked   atomic.Uint64
	panics    atomic.Uint64
	inFlight  atomic.Int64
}

// noteBatch holds the notifications of one applied batch. It is shared, not copied: every
// listener it is queued to holds a reference per segment, and the last release clears it
// and returns it to its pool. A batch made for one listener (a replay, an overflow drain)
// or for the listeners not due for a resync has no pool, and release does nothing.
type noteBatch[K comparable, V any] struct {
	notes []notification[K, V]
	refs  atomic.Int32
	pool  *batchPool[K, V]
	rev   string // the revision of its notifyRevision marker, if it has one
}

// batchPool keeps free batches for reuse: up to keptBatches, of at most maxPooledNotes
// notifications, and only small ones (idleBufferCap) while traffic is low, so that an
// informer whose traffic fell lets a burst's buffers go.
type batchPool[K comparable, V any] struct {
	free chan *noteBatch[K, V]
	low  atomic.Bool // the last batch was small
}

const (
	maxPooledNotes = 8192
	keptBatches    = 8
)

func newBatchPool[K comparable, V any]() *batchPool[K, V] {
	return &batchPool[K, V]{free: make(chan *noteBatch[K, V], keptBatches)}
}

// get returns an empty batch holding one reference, the caller's.
func (p *batchPool[K, V]) get() *noteBatch[K, V] {
	var b *noteBatch[K, V]
	select {
	case b = <-p.free:
	default:
		b = &noteBatch[K, V]{pool: p}
	}
	b.refs.Store(1)
	return b
}

func newNoteBatch[K comparable, V any](notes []notification[K, V]) *noteBatch[K, V] {
	b := &noteBatch[K, V]{notes: notes}
	b.refs.Store(1)
	return b
}

func (b *noteBatch[K, V]) release() {
	if b.pool == nil || b.refs.Add(-1) != 0 {
		return
	}
	clear(b.notes)
	b.notes = b.notes[:0]
	if c := cap(b.notes); c > maxPooledNotes || c > idleBufferCap && b.pool.low.Load() {
		return
	}
	select {
	case b.pool.free <- b:
	default: // enough kept
	}
}

// segment is the part notes[lo:hi] of a batch, queued to one listener at the time at (set
// only when the listener measures latency).
type segment[K comparable, V any] struct {
	b      *noteBatch[K, V]
	lo, hi int
	at     time.Time
}

type overflowSlot[K comparable] struct {
	key    K
	marker bool // the synced marker
	// revision holds the place of a RevisionHandler marker (see listener.overflowRev) in
	// an overflow that has nothing else; the drain skips it.
	revision bool
}

// coalesced is what the overflow holds for one key: the merge of its notifications, and
// after a delete, the add that followed it.
type coalesced[K comparable, V any] struct {
	first  notification[K, V]
	second notification[K, V] // kind 0: none
}

func newListener[K comparable, V any](h Handler[V], opts HandlerOptions, clk interface{ Now() time.Time }, onPanic func(*HandlerPanicError)) *listener[K, V] {
	if opts.QueueLength <= 0 {
		opts.QueueLength = DefaultQueueLength
	}
	l := &listener[K, V]{
		reg:      &Registration{},
		handler:  h,
		opts:     opts,
		onPanic:  onPanic,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		syncedCh: make(chan struct{}),
		// Unlike client-go, on purpose: client-go counts every listener as syncing until the
		// first resync check, so an object relisted unchanged reaches handlers that never
		// asked for resyncs. Here only a handler due for a resync receives resyncs.
		syncing: false,
	}
	l.reg.l = l
	l.revs, _ = h.(RevisionHandler)
	if opts.MeasureLatency {
		l.latency = histogram.New(histogram.DurationBuckets...)
		l.clk = clk
	}
	l.space = sync.NewCond(&l.mu)
	return l
}

func (l *listener[K, V]) name() string { return l.opts.Name }

func (l *listener[K, V]) hasSynced() bool { return l.synced.Load() }

func (l *listener[K, V]) syncedChan() <-chan struct{} { return l.syncedCh }

func (l *listener[K, V]) stats() HandlerStats {
	l.mu.Lock()
	q := l.queued + len(l.order)
	l.mu.Unlock()
	return HandlerStats{
		Queued:    q + int(l.inFlight.Load()),
		Delivered: l.delivered.Load(),
		Coalesced: l.coalesce.Load(),
		Blocked:   l.blocked.Load(),
		Panics:    l.panics.Load(),
		Latency:   Histogram(l.latency.Snapshot()),
	}
}

// enqueue queues the notifications of b for this listener, sharing b (a reference per
// segment). It never waits: a Block listener takes the whole batch even beyond its
// QueueLength (the writer then waits for room with waitForRoom, outside every lock but
// the listener's own), a Coalesce listener merges what does not fit into its overflow.
// force queues everything whatever the policy: a replay, or the synced marker.
func (l *listener[K, V]) enqueue(b *noteBatch[K, V], force bool) {
	ns := b.notes
	if len(ns) == 0 {
		return
	}
	force = force || l.opts.Policy == Block
	var now time.Time
	if l.latency != nil {
		now = l.clk.Now()
	}
	lo := 0
	l.mu.Lock()
	for lo < len(ns) && !l.stopped.Load() {
		switch {
		case len(l.order) > 0:
			l.coalesceLocked(ns[lo], b.rev)
			lo++
		case l.queued < l.opts.QueueLength || force:
			room := len(ns) - lo
			if !force {
				room = min(room, l.opts.QueueLength-l.queued)
			}
			b.refs.Add(1)
			l.pending = append(l.pending, segment[K, V]{b: b, lo: lo, hi: lo + room, at: now})
			l.queued += room
			lo += room
		default:
			if len(l.order) == 0 {
				l.overflowSince = now
			}
			l.coalesceLocked(ns[lo], b.rev)
			lo++
		}
	}
	l.mu.Unlock()
	l.signal()
}

// full reports whether a Block listener's queue has no room: the writer must wait before
// it queues more.
func (l *listener[K, V]) full() bool {
	if l.opts.Policy != Block {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queued >= l.opts.QueueLength && !l.stopped.Load()
}

// waitForRoom waits until a Block listener's queue has room again, the listener stops,
// or abort is set (the informer is stopping). It holds only the listener's lock, and
// releases it while it waits.
func (l *listener[K, V]) waitForRoom(abort *atomic.Bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counted := false
	for l.queued >= l.opts.QueueLength && !l.stopped.Load() && !abort.Load() {
		if !counted {
			l.blocked.Add(1)
			counted = true
		}
		l.space.Wait()
	}
}

// wakeWaiters wakes a writer waiting in waitForRoom, to look at abort again.
func (l *listener[K, V]) wakeWaiters() {
	l.mu.Lock()
	l.space.Broadcast()
	l.mu.Unlock()
}

func (l *listener[K, V]) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// coalesceLocked merges n into the overflow. The handler has seen, or will have seen
// before the overflow, everything in pending; the overflow only has to end each key in
// its newest state with a valid sequence (no add on top of an add, no update after a
// delete).
//
// A RevisionHandler marker is never lost: the overflow reorders, so a marker followed by
// changes says nothing exact and is dropped, but the marker of the newest revision, when
// no change follows it, ends the overflow's drain (the overflow then holds every key's
// state at that revision).
func (l *listener[K, V]) coalesceLocked(n notification[K, V], rev string) {
	if n.kind == notifySynced {
		l.order = append(l.order, overflowSlot[K]{marker: true})
		return
	}
	if n.kind == notifyRevision {
		if len(l.order) == 0 {
			l.order = append(l.order, overflowSlot[K]{revision: true})
		}
		l.overflowRev = rev
		return
	}
	l.overflowRev = "" // a change after the last marker: no exact revision until the next
	if l.overflow == nil {
		l.overflow = make(map[K]*coalesced[K, V])
	}
	c, ok := l.overflow[n.key]
	if !ok {
		l.overflow[n.key] = &coalesced[K, V]{first: n}
		l.order = append(l.order, overflowSlot[K]{key: n.key})
		return
	}
	l.coalesce.Add(1)
	last := &c.first
	if c.second.kind != 0 {
		last = &c.second
	}
	switch {
	case last.kind == notifyDelete && n.kind == notifyAdd:
		// Only first can be a delete (second only ever holds the add that followed it).
		c.second = n
	case n.kind == notifyUpdate && last.kind == notifyAdd:
		last.new, last.sync = n.new, false
	case n.kind == notifyUpdate && last.kind == notifyUpdate:
		last.new, last.sync = n.new, last.sync && n.sync
	case n.kind == notifyDelete && last.kind == notifyAdd:
		if last == &c.second {
			c.second = notification[K, V]{} // delete, add, delete → delete
		} else {
			// added and deleted while queued: the handler never needs to hear of it.
			c.first = notification[K, V]{}
		}
	case n.kind == notifyDelete && last.kind == notifyUpdate:
		*last = n
	default:
		// Anything else (an update after a delete, say) is not a valid sequence from the
		// cache; keep the newer notification rather than lose it.
		*last = n
	}
}

// run is the listener's goroutine: it takes pending (or the overflow) and calls the
// handler for each notification, with no lock held.
func (l *listener[K, V]) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && len(l.order) == 0 && !l.stopped.Load() {
			if cap(l.spare) > idleBufferCap {
				l.spare = nil // idle: do not hold a burst's buffer
			}
			if cap(l.pending) > idleBufferCap {
				l.pending = nil
			}
			if l.drained != nil && cap(l.drained.notes) > idleBufferCap {
				l.drained = nil
			}
			l.mu.Unlock()
			<-l.wake
			l.mu.Lock()
		}
		if l.stopped.Load() {
			l.mu.Unlock()
			return // What is still queued is dropped
		}
		var segs []segment[K, V]
		var drained *noteBatch[K, V] // the overflow, in a batch of this listener's own
		n := l.queued
		if len(l.pending) > 0 {
			segs = l.pending
			l.pending = l.spare[:0]
			l.queued = 0
		} else {
			drained = l.drained
			if drained == nil {
				drained = newNoteBatch[K, V](nil)
			}
			l.drained = nil
			drained.rev = l.overflowRev
			drained.notes = l.drainOverflowLocked(drained.notes[:0])
			l.overflowRev = ""
			n = len(drained.notes)
			segs = append(l.spare[:0], segment[K, V]{b: drained, hi: n, at: l.overflowSince})
		}
		l.inFlight.Store(int64(n))
		l.space.Broadcast()
		l.mu.Unlock()

		for i := range segs {
			sg := &segs[i]
			for j := sg.lo; j < sg.hi && !l.stopped.Load(); j++ {
				n := &sg.b.notes[j]
				if l.latency != nil && n.kind < notifySynced {
					l.latency.ObserveDuration(l.clk.Now().Sub(sg.at))
				}
				l.deliver(n, sg.b.rev)
				l.inFlight.Add(-1)
			}
			sg.b.release() // a no-op for drained, which has no pool
		}
		clear(segs)
		if drained != nil {
			clear(drained.notes)
			drained.notes = drained.notes[:0]
			if cap(drained.notes) > 2*l.opts.QueueLength {
				drained = nil // do not keep a large drain's peak size
			}
		}
		l.mu.Lock()
		l.spare = segs[:0]
		l.drained = drained
		l.mu.Unlock()
	}
}

func (l *listener[K, V]) drainOverflowLocked(out []notification[K, V]) []notification[K, V] {
	for _, slot := range l.order {
		if slot.marker {
			out = append(out, notification[K, V]{kind: notifySynced})
			continue
		}
		if slot.revision {
			continue
		}
		c := l.overflow[slot.key]
		if c.first.kind != 0 {
			out = append(out, c.first)
		}
		if c.second.kind != 0 {
			out = append(out, c.second)
		}
		delete(l.overflow, slot.key)
	}
	if l.overflowRev != "" {
		out = append(out, notification[K, V]{kind: notifyRevision})
	}
	clear(l.order)
	l.order = l.order[:0]
	return out
}

// deliver calls the handler; a panic is recovered, counted and reported, and the
// notification is skipped (by choice: the process survives).
func (l *listener[K, V]) deliver(n *notification[K, V], rev string) {
	l.callMu.Lock()
	l.calling, l.callKey = true, n.key
	l.callMu.Unlock()
	defer func() {
		l.callMu.Lock()
		var zero K
		l.calling, l.callKey = false, zero
		l.callMu.Unlock()
		if r := recover(); r != nil {
			l.panics.Add(1)
			if l.onPanic != nil {
				l.onPanic(&HandlerPanicError{Handler: l.opts.Name, Key: n.key, Value: r, Stack: debug.Stack()})
			}
		}
	}()
	switch n.kind {
	case notifyAdd:
		l.delivered.Add(1)
		l.handler.OnAdd(n.new, n.initial)
	case notifyUpdate:
		l.delivered.Add(1)
		l.handler.OnUpdate(n.old, n.new)
	case notifyDelete:
		l.delivered.Add(1)
		l.handler.OnDelete(n.old, n.unknown)
	case notifySynced:
		if !l.synced.Swap(true) {
			close(l.syncedCh)
		}
	case notifyRevision:
		l.revs.OnRevision(rev)
	}
}

// stop ends the listener; wait for done to know the goroutine returned.
func (l *listener[K, V]) stop() {
	l.mu.Lock()
	l.stopped.Store(true)
	l.space.Broadcast()
	l.mu.Unlock()
	l.signal()
}

// shouldResync reports whether the listener is due for a resync at now, and if so
// schedules the next one.
func (l *listener[K, V]) shouldResync(now time.Time) bool {
	if l.resyncPeriod <= 0 {
		return false
	}
	if now.Before(l.nextResync) {
		return false
	}
	l.nextResync = now.Add(l.resyncPeriod)
	return true
}

// processor fans notifications out to the listeners, one per handler. Its lock orders
// handler registration against batches: a batch is written to the cache and queued to the
// listeners under it, so a handler added meanwhile sees that batch either in its replay of
// the cache or as notifications, never both. The lock is held only while queueing, which
// never waits: a writer that must wait for a Block handler's queue does so after releasing
// it, so registrations, removals and reads go on while a handler is stalled.
type processor[K comparable, V any] struct {
	clock         clock.Clock
	defaultResync time.Duration            // the informer's resync period; 0: never
	onPanic       func(*HandlerPanicError) // reports a handler's panic

	mu          sync.Mutex
	listeners   []*listener[K, V]
	started     bool
	stopped     bool
	seq         int
	resyncCheck time.Duration // how often the reflector asks whether a resync is due

	regs     atomic.Pointer[[]*Registration] // the registrations, for Handlers without the lock
	aborting atomic.Bool                     // the informer is stopping: no more waiting for room
	wg       sync.WaitGroup
	batches  *batchPool[K, V]
	blocking []*listener[K, V] // Block listeners whose queues the last Deliver left full
	next     *noteBatch[K, V]  // the batch Buffer handed out, for Deliver
}

func newProcessor[K comparable, V any](clk clock.Clock, resync time.Duration, onPanic func(*HandlerPanicError)) *processor[K, V] {
	p := &processor[K, V]{clock: clk, defaultResync: resync, resyncCheck: resync, onPanic: onPanic, batches: newBatchPool[K, V]()}
	p.regs.Store(&[]*Registration{})
	return p
}

// Add registers a handler. If the processor runs, replay gives what brings the new handler
// up to date: the cache as it is now, and the markers that follow it (queued as after a
// batch, by queueMarks: synced, and the revision the replay is exactly the source's state
// at, if any). The caller calls Add between two batches. Add fails with ErrStopped once
// the processor stopped.
func (p *processor[K, V]) Add(h Handler[V], opts HandlerOptions, replay func() (notes []notification[K, V], synced bool, rev string)) (*Registration, error) {
	l := newListener[K, V](h, opts, p.clock, p.onPanic)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, ErrStopped
	}
	p.seq++
	if l.opts.Name == "" {
		l.opts.Name = fmt.Sprintf("handler-%d", p.seq)
	}
	p.setResyncLocked(l, opts.ResyncPeriod)
	p.listeners = append(p.listeners, l)
	p.publishLocked()
	if p.started {
		p.startLocked(l)
		notes, synced, rev := replay()
		l.enqueue(newNoteBatch(notes), true)
		queueMarks([]*listener[K, V]{l}, marks{synced: synced, rev: rev}, true)
	}
	return l.reg, nil
}

// marks are the markers that follow a batch's notifications (or a replay) in a handler's
// queue: synced, the initial state is complete; rev, if not empty, the revision the
// notifications so far are exactly the source's state at.
type marks struct {
	synced bool
	rev    string
}

// queueMarks queues m's markers to the listeners, after what they were given last. It is
// the one place that decides which handler gets which marker: every handler the synced
// marker, only a RevisionHandler the revision marker. A replay forces the revision
// marker in as it forces the replay; after a batch, a Coalesce handler whose queue is
// full drops it (what it then holds is no exact state). Called under the lock.
func queueMarks[K comparable, V any](ls []*listener[K, V], m marks, replay bool) {
	if m.synced {
		marker := newNoteBatch([]notification[K, V]{{kind: notifySynced}})
		for _, l := range ls {
			l.enqueue(marker, true)
		}
	}
	if m.rev == "" {
		return
	}
	var b *noteBatch[K, V]
	for _, l := range ls {
		if l.revs == nil {
			continue
		}
		if b == nil {
			b = newNoteBatch([]notification[K, V]{{kind: notifyRevision}})
			b.rev = m.rev
		}
		l.enqueue(b, replay)
	}
}

// CoalesceRoom returns the fewest notifications a Coalesce handler's queue takes before
// it is full (0 for one already merging; math.MaxInt with no Coalesce handler): a batch of
// at most that many merges nothing in a handler that kept up.
func (p *processor[K, V]) CoalesceRoom() int {
	limit := math.MaxInt
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.listeners {
		if l.opts.Policy == Block {
			continue
		}
		l.mu.Lock()
		free := l.opts.QueueLength - l.queued
		if len(l.order) > 0 {
			free = 0
		}
		l.mu.Unlock()
		limit = min(limit, max(free, 0))
	}
	return limit
}

// setResyncLocked sets a new listener's resync period: the informer's when it asks for 0,
// never when negative or when the informer has no resync, at least minimumResyncPeriod. A
// period shorter than the informer's check period lowers the check period before the
// start, and is raised to it after.
func (p *processor[K, V]) setResyncLocked(l *listener[K, V], requested time.Duration) {
	if requested == 0 {
		requested = p.defaultResync
	}
	if requested < 0 || p.defaultResync == 0 {
		requested = 0
	}
	if requested > 0 && requested < minimumResyncPeriod {
		requested = minimumResyncPeriod
	}
	if requested > 0 && requested < p.resyncCheck {
		if p.started {
			requested = p.resyncCheck
		} else {
			p.resyncCheck = requested
		}
	}
	l.resyncPeriod = requested
	if requested > 0 {
		l.nextResync = p.clock.Now().Add(requested)
	}
}

// Remove unregisters the handler of reg and waits until its goroutine has returned. It
// reports whether the handler was registered.
func (p *processor[K, V]) Remove(reg *Registration) bool {
	l, ok := reg.l.(*listener[K, V])
	if !ok {
		return false
	}
	l.stop() // first, so that a writer waiting for room in its queue goes on
	p.mu.Lock()
	i := slices.Index(p.listeners, l)
	if i >= 0 {
		p.listeners = slices.Delete(p.listeners, i, i+1)
		p.publishLocked()
	}
	started := p.started
	p.mu.Unlock()
	if i >= 0 && started {
		<-l.done
	}
	return i >= 0
}

// publishLocked updates the registrations that handlers reads.
func (p *processor[K, V]) publishLocked() {
	regs := make([]*Registration, len(p.listeners))
	for i, l := range p.listeners {
		regs[i] = l.reg
	}
	p.regs.Store(&regs)
}

// Handlers returns the registered handlers in the order they were added, without waiting
// for anything.
func (p *processor[K, V]) Handlers() []*Registration {
	return slices.Clone(*p.regs.Load())
}

// Buffer returns an empty buffer for a batch's notifications, to be filled and passed to
// Deliver. It and Deliver are called by one goroutine, the writer's.
func (p *processor[K, V]) Buffer() []notification[K, V] {
	p.next = p.batches.get()
	return p.next.notes
}

// Deliver hands notes, the notifications of a batch in the buffer Buffer returned, to
// every listener, followed by the markers (see queueMarks): synced, the initial state is
// complete; rev, if not empty, the revision the state is then exactly the source's at.
// Listeners share the notifications; resyncs go only to listeners due for one, and those
// not due share a filtered copy. It never waits: call WaitForRoom next, after publishing
// what the batch reached, so that the source is read no faster than a Block handler
// drains.
func (p *processor[K, V]) Deliver(notes []notification[K, V], synced bool, rev string) {
	m := marks{synced: synced, rev: rev}
	p.mu.Lock()
	b := p.next
	p.next = nil
	b.notes = notes
	hasSync := false
	for i := range b.notes {
		if b.notes[i].sync {
			hasSync = true
			break
		}
	}
	var filtered *noteBatch[K, V] // made once, shared by the listeners not due
	for _, l := range p.listeners {
		if !hasSync || l.syncing {
			l.enqueue(b, false)
			continue
		}
		if filtered == nil {
			filtered = newNoteBatch[K, V](nil)
			for i := range b.notes {
				if !b.notes[i].sync {
					filtered.notes = append(filtered.notes, b.notes[i])
				}
			}
		}
		l.enqueue(filtered, false)
	}
	p.batches.low.Store(len(b.notes) < idleBufferCap)
	b.release()
	queueMarks(p.listeners, m, false)
	blocking := p.blocking[:0]
	for _, l := range p.listeners {
		if l.full() {
			blocking = append(blocking, l)
		}
	}
	p.blocking = blocking
	p.mu.Unlock()
}

// WaitForRoom waits while a Block listener the last Deliver left full has no room in its
// queue, holding no lock of the processor: registrations, removals and reads go on.
func (p *processor[K, V]) WaitForRoom() {
	for i, l := range p.blocking {
		l.waitForRoom(&p.aborting)
		p.blocking[i] = nil
	}
	p.blocking = p.blocking[:0]
}

// ResyncPeriod is how often the reflector should ask ShouldResync; 0 means never.
func (p *processor[K, V]) ResyncPeriod() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resyncCheck
}

// ShouldResync marks the listeners due for a resync now and reports whether any is; the
// resync notifications of the next batches go to those only.
func (p *processor[K, V]) ShouldResync() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	due := false
	for _, l := range p.listeners {
		l.syncing = l.shouldResync(now)
		due = due || l.syncing
	}
	return due
}

// Start starts the goroutine of every registered listener, and of every listener added
// from now on.
func (p *processor[K, V]) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = true
	for _, l := range p.listeners {
		p.startLocked(l)
	}
}

func (p *processor[K, V]) startLocked(l *listener[K, V]) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		l.run()
	}()
}

// AbortWaits makes a writer waiting for room in a Block listener's queue give up: the
// informer is stopping, and a stalled handler must not hold its stop.
func (p *processor[K, V]) AbortWaits() {
	p.aborting.Store(true)
	p.mu.Lock()
	ls := slices.Clone(p.listeners)
	p.mu.Unlock()
	for _, l := range ls {
		l.wakeWaiters()
	}
}

// Stop stops every listener (what is still queued is dropped) and waits for their
// goroutines, at most bound (no bound if bound <= 0); later adds fail with ErrStopped. If
// the bound passes first, stuck is called for each listener still in a handler call, with
// the handler's name and the key of the call, and stop returns: the goroutines of those
// handlers are left running, and return once their call does.
func (p *processor[K, V]) Stop(bound time.Duration, stuck func(handler string, key K)) {
	p.mu.Lock()
	p.stopped = true
	ls := slices.Clone(p.listeners)
	for _, l := range ls {
		l.stop()
	}
	p.mu.Unlock()
	if bound <= 0 {
		p.wg.Wait()
		return
	}
	waited := make(chan struct{})
	go func() { p.wg.Wait(); close(waited) }() // returns once every handler call has
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-waited:
		return
	case <-t.C:
	}
	for _, l := range ls {
		select {
		case <-l.done:
			continue
		default:
		}
		l.callMu.Lock()
		calling, key := l.calling, l.callKey
		l.callMu.Unlock()
		if calling {
			stuck(l.opts.Name, key)
		}
	}
}
