package informer

import (
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/internal/histogram"
)

// idleBufferCap is the largest queue buffer an idle handler keeps.
const idleBufferCap = 256

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

// Get returns an empty batch holding one reference, the caller's, and its empty buffer.
func (p *batchPool[K, V]) Get() (*noteBatch[K, V], []notification[K, V]) {
	var b *noteBatch[K, V]
	select {
	case b = <-p.free:
	default:
		b = &noteBatch[K, V]{pool: p}
	}
	b.refs.Store(1)
	return b, b.notes
}

func newNoteBatch[K comparable, V any](notes []notification[K, V]) *noteBatch[K, V] {
	b := &noteBatch[K, V]{notes: notes}
	b.refs.Store(1)
	return b
}

// Release drops a reference to b; the last returns b to its pool.
func (b *noteBatch[K, V]) Release() {
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
		handler:  h,
		opts:     opts,
		onPanic:  onPanic,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		syncedCh: make(chan struct{}),
	}
	l.reg = newRegistration(l)
	l.revs, _ = h.(RevisionHandler)
	if opts.MeasureLatency {
		l.latency = histogram.New(histogram.DurationBuckets...)
		l.clk = clk
	}
	l.space = sync.NewCond(&l.mu)
	return l
}

func (l *listener[K, V]) name() string { return l.opts.Name }

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
		Synced:    l.synced.Load(),
		Latency:   Histogram(l.latency.Snapshot()),
	}
}

// Enqueue queues the notifications of b for this listener, sharing b (a reference per
// segment). It never waits: a Block listener takes the whole batch even beyond its
// QueueLength (the writer then waits for room with waitForRoom, outside every lock but
// the listener's own), a Coalesce listener merges what does not fit into its overflow.
// force queues everything whatever the policy: a replay, or the synced marker.
func (l *listener[K, V]) Enqueue(b *noteBatch[K, V], force bool) {
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

// Full reports whether a Block listener's queue has no room: the writer must wait before
// it queues more.
func (l *listener[K, V]) Full() bool {
	if l.opts.Policy != Block {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queued >= l.opts.QueueLength && !l.stopped.Load()
}

// WaitForRoom waits until a Block listener's queue has room again, the listener stops,
// or abort is set (the informer is stopping). It holds only the listener's lock, and
// releases it while it waits.
func (l *listener[K, V]) WaitForRoom(abort *atomic.Bool) {
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

// WakeWaiters wakes a writer waiting in WaitForRoom, to look at abort again.
func (l *listener[K, V]) WakeWaiters() {
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

// Run is the listener's goroutine: it takes pending (or the overflow) and calls the
// handler for each notification, with no lock held.
func (l *listener[K, V]) Run() {
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
			sg.b.Release() // a no-op for drained, which has no pool
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

// Stop ends the listener; wait for done to know the goroutine returned.
func (l *listener[K, V]) Stop() {
	l.mu.Lock()
	l.stopped.Store(true)
	l.space.Broadcast()
	l.mu.Unlock()
	l.signal()
}

// The processor reaches a listener, and the batches it shares, through these methods.

// Registration returns the listener's registration.
func (l *listener[K, V]) Registration() *Registration { return l.reg }

// TakesRevisions reports whether the handler is a RevisionHandler.
func (l *listener[K, V]) TakesRevisions() bool { return l.revs != nil }

// Room returns how many notifications the queue of a Coalesce listener takes before it is
// full (0 for one already merging), and false for a Block listener.
func (l *listener[K, V]) Room() (int, bool) {
	if l.opts.Policy == Block {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.order) > 0 {
		return 0, true
	}
	return max(l.opts.QueueLength-l.queued, 0), true
}

// Done is closed once the listener's goroutine returned.
func (l *listener[K, V]) Done() <-chan struct{} { return l.done }

// Calling returns the key of the handler call in progress, if one is.
func (l *listener[K, V]) Calling() (K, bool) {
	l.callMu.Lock()
	defer l.callMu.Unlock()
	return l.callKey, l.calling
}

// SetNotes makes notes b's notifications.
func (b *noteBatch[K, V]) SetNotes(notes []notification[K, V]) { b.notes = notes }

// WithoutResyncs returns a batch of b's notifications but its resyncs, for the listeners
// not due for one: b itself if it holds no resync.
func (b *noteBatch[K, V]) WithoutResyncs() *noteBatch[K, V] {
	i := 0
	for i < len(b.notes) && !b.notes[i].sync {
		i++
	}
	if i == len(b.notes) {
		return b
	}
	notes := slices.Clone(b.notes[:i])
	for _, n := range b.notes[i+1:] {
		if !n.sync {
			notes = append(notes, n)
		}
	}
	return newNoteBatch(notes)
}

// Track records the size of the last batch: a pool keeps only small buffers while
// batches are small.
func (p *batchPool[K, V]) Track(n int) { p.low.Store(n < idleBufferCap) }

// markerBatch is a batch of one marker: the revision marker of rev, or, if rev is empty,
// the synced marker.
func markerBatch[K comparable, V any](rev string) *noteBatch[K, V] {
	if rev == "" {
		return newNoteBatch([]notification[K, V]{{kind: notifySynced}})
	}
	b := newNoteBatch([]notification[K, V]{{kind: notifyRevision}})
	b.rev = rev
	return b
}
