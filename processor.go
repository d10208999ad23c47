package informer

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/clock"
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

// Registration is a handler added to an informer.
type Registration struct {
	l listenerControl
}

// newRegistration returns the registration of the handler l runs.
func newRegistration(l listenerControl) *Registration { return &Registration{l: l} }

type listenerControl interface {
	syncedChan() <-chan struct{}
	stats() HandlerStats
	name() string
}

// Synced returns a channel closed once the handler has been called for the whole initial
// state: the initial list, or for a handler added later the cache as it was then. It is
// per handler: other handlers may still be behind (unlike client-go's informer-wide
// HasSynced). To poll instead of wait, read Stats().Synced.
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
	// Synced is true once Registration.Synced is closed: the handler has been called for
	// the whole initial state.
	Synced bool
	// Latency is the distribution of the time notifications waited in the queue, in
	// seconds; empty (nil Bounds) unless HandlerOptions.MeasureLatency is set.
	Latency Histogram
}

// minimumResyncPeriod is the floor on a handler's resync period.
const minimumResyncPeriod = time.Second

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
	listeners   []*member[K, V]
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

// member is a registered listener with its resync schedule, which the processor keeps
// under its lock.
type member[K comparable, V any] struct {
	*listener[K, V]
	resyncPeriod time.Duration // 0: never
	nextResync   time.Time
	// syncing: due for a resync at the last ShouldResync; the member takes the resync
	// notifications of the batches until the next. Unlike client-go, on purpose: client-go
	// counts every listener as syncing until the first resync check, so an object relisted
	// unchanged reaches handlers that never asked for resyncs. Here only a handler due for a
	// resync receives resyncs.
	syncing bool
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, ErrStopped
	}
	p.seq++
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("handler-%d", p.seq)
	}
	m := &member[K, V]{listener: newListener[K, V](h, opts, p.clock, p.onPanic)}
	p.setResyncLocked(m, opts.ResyncPeriod)
	p.listeners = append(p.listeners, m)
	p.publishLocked()
	if p.started {
		p.startLocked(m)
		notes, synced, rev := replay()
		m.Enqueue(newNoteBatch(notes), true)
		queueMarks([]*member[K, V]{m}, marks{synced: synced, rev: rev}, true)
	}
	return m.Registration(), nil
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
func queueMarks[K comparable, V any](ls []*member[K, V], m marks, replay bool) {
	if m.synced {
		marker := markerBatch[K, V]("")
		for _, l := range ls {
			l.Enqueue(marker, true)
		}
	}
	if m.rev == "" {
		return
	}
	var b *noteBatch[K, V]
	for _, l := range ls {
		if !l.TakesRevisions() {
			continue
		}
		if b == nil {
			b = markerBatch[K, V](m.rev)
		}
		l.Enqueue(b, replay)
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
		if free, ok := l.Room(); ok {
			limit = min(limit, free)
		}
	}
	return limit
}

// setResyncLocked sets a new listener's resync period: the informer's when it asks for 0,
// never when negative or when the informer has no resync, at least minimumResyncPeriod. A
// period shorter than the informer's check period lowers the check period before the
// start, and is raised to it after.
func (p *processor[K, V]) setResyncLocked(m *member[K, V], requested time.Duration) {
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
	m.resyncPeriod = requested
	if requested > 0 {
		m.nextResync = p.clock.Now().Add(requested)
	}
}

// Remove unregisters the handler of reg and waits until its goroutine has returned. It
// reports whether the handler was registered.
func (p *processor[K, V]) Remove(reg *Registration) bool {
	l, ok := reg.l.(*listener[K, V])
	if !ok {
		return false
	}
	l.Stop() // first, so that a writer waiting for room in its queue goes on
	p.mu.Lock()
	i := slices.IndexFunc(p.listeners, func(m *member[K, V]) bool { return m.listener == l })
	if i >= 0 {
		p.listeners = slices.Delete(p.listeners, i, i+1)
		p.publishLocked()
	}
	started := p.started
	p.mu.Unlock()
	if i >= 0 && started {
		<-l.Done()
	}
	return i >= 0
}

// publishLocked updates the registrations that handlers reads.
func (p *processor[K, V]) publishLocked() {
	regs := make([]*Registration, len(p.listeners))
	for i, l := range p.listeners {
		regs[i] = l.Registration()
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
	var buf []notification[K, V]
	p.next, buf = p.batches.Get()
	return buf
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
	b.SetNotes(notes)
	var filtered *noteBatch[K, V] // made once, shared by the listeners not due
	for _, m := range p.listeners {
		if m.syncing {
			m.Enqueue(b, false)
			continue
		}
		if filtered == nil {
			filtered = b.WithoutResyncs() // b itself if it holds no resync
		}
		m.Enqueue(filtered, false)
	}
	p.batches.Track(len(notes))
	b.Release()
	queueMarks(p.listeners, m, false)
	blocking := p.blocking[:0]
	for _, m := range p.listeners {
		if m.Full() {
			blocking = append(blocking, m.listener)
		}
	}
	p.blocking = blocking
	p.mu.Unlock()
}

// WaitForRoom waits while a Block listener the last Deliver left full has no room in its
// queue, holding no lock of the processor: registrations, removals and reads go on.
func (p *processor[K, V]) WaitForRoom() {
	for i, l := range p.blocking {
		l.WaitForRoom(&p.aborting)
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
	for _, m := range p.listeners {
		m.syncing = m.resyncPeriod > 0 && !now.Before(m.nextResync)
		if m.syncing {
			m.nextResync = now.Add(m.resyncPeriod)
			due = true
		}
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

func (p *processor[K, V]) startLocked(l *member[K, V]) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		l.Run()
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
		l.WakeWaiters()
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
		l.Stop()
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
		case <-l.Done():
			continue
		default:
		}
		if key, calling := l.Calling(); calling {
			stuck(l.Registration().Name(), key)
		}
	}
}
