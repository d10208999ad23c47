package informer

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// deltaType is the kind of one change queued for a key.
type deltaType uint8

// The kinds of deltas.
const (
	deltaAdded deltaType = iota + 1
	deltaUpdated
	deltaDeleted
	// deltaReplaced is queued for every object of a list.
	deltaReplaced
	// deltaSync is queued by a resync, with the object from the cache.
	deltaSync
)

// delta is one change of one key. A tombstone is a Deleted delta whose finalStateUnknown
// is set: the object vanished without an observed delete, and object is its last known
// state. A Deleted delta whose keyOnly is set was observed, but its object carries the key
// alone (the event's LastStateUnknown): the store takes the last state from the cache.
type delta[V any] struct {
	typ               deltaType
	finalStateUnknown bool
	keyOnly           bool
	// initial: an object of the informer's first list. Only such a delta makes an add
	// that handlers are told is part of the initial state.
	initial bool
	// unchanged: a Replaced delta of a list at the revision the cached object was listed
	// at (the retry of a first list whose pages were applied): a resync, not an update.
	unchanged bool
	// repeated: a Replaced delta of a key its list held already (lists have identities:
	// two lists at one revision are two lists).
	repeated bool
	object   V
	revision string
	// prepared: the store prepared the object as it was queued (see Add); the queue's
	// keeper keeps what it prepared.
	prepared bool
}

// The store reads a popped delta through these methods, never its fields: whether it is an
// Added event, deletes its key, is a tombstone (its object the last state known), is a
// delete whose object carries the key alone (the cache holds the last state), is of
// the first list, re-delivers an unchanged object (a resync, or a relisted object at the
// revision it was listed at), comes from a list, repeats a key of its list, was prepared;
// its object and revision.
func (d *delta[V]) Added() bool      { return d.typ == deltaAdded }
func (d *delta[V]) Deleted() bool    { return d.typ == deltaDeleted }
func (d *delta[V]) Unknown() bool    { return d.finalStateUnknown }
func (d *delta[V]) KeyOnly() bool    { return d.keyOnly }
func (d *delta[V]) Initial() bool    { return d.initial }
func (d *delta[V]) Resync() bool     { return d.typ == deltaSync || d.unchanged }
func (d *delta[V]) Relisted() bool   { return d.typ == deltaReplaced }
func (d *delta[V]) Repeated() bool   { return d.repeated }
func (d *delta[V]) Prepared() bool   { return d.prepared }
func (d *delta[V]) Object() V        { return d.object }
func (d *delta[V]) Revision() string { return d.revision }

// deltaList holds the pending deltas of one key, oldest first. Lists come in chunks, keep
// their first delta inline and are recycled: a steady stream of events allocates nothing.
type deltaList[K comparable, V any] struct {
	key    K // while queued
	deltas []delta[V]
	inline [1]delta[V]
	held   any // what the keeper keeps for the list's prepared deltas; opaque to the queue
}

const listChunk = 128 // delta lists allocated at once

// spareDeltas is the room a list gets, carved from a chunk shared by many lists, when its
// inline delta is taken: growing lists one allocation at a time cost W1 of the bench
// module an allocation every seventh event.
const spareDeltas = 8

func (l *deltaList[K, V]) newest() *delta[V] { return &l.deltas[len(l.deltas)-1] }

// knownObjects is the cache as the delta queue sees it: replace and resync consult it.
// Its methods are called with no batch in flight, so the cache agrees with what was popped.
type knownObjects[K comparable, V any] interface {
	EachKnown(fn func(key K, obj V))
}

// keeper keeps, for a queued key, what was prepared for its deltas as they were queued
// (the store's index values), which the queue carries without looking inside. Its methods
// are called under the queue's lock.
type keeper interface {
	// Keep records prep, prepared for delta i (from 0) of a list, into held, what the list
	// kept so far (nil at first), and returns what the list keeps now.
	Keep(held, prep any, i int) any
	// Drop empties held as its list is recycled and returns it for reuse, or nil.
	Drop(held any) any
}

// batch is what Pop takes from the queue: keys with their deltas, or a page of a first
// list alone. The store reads it through its methods.
type batch[K comparable, V any] struct {
	items []popped[K, V]
}

// Len is the number of keys in b; entry i has a key, its deltas (oldest first) and what
// the keeper kept for them (nil: nothing prepared). Page is the page of a first list b
// holds instead, or nil.
func (b *batch[K, V]) Len() int                { return len(b.items) - b.pages() }
func (b *batch[K, V]) Key(i int) K             { return b.items[i].key }
func (b *batch[K, V]) Deltas(i int) []delta[V] { return b.items[i].list.deltas }
func (b *batch[K, V]) Held(i int) any          { return b.items[i].list.held }
func (b *batch[K, V]) Page() *firstList[K, V] {
	if b.pages() == 1 {
		return b.items[0].bulk
	}
	return nil
}

// Listed reports whether b holds a change of a list: an object of it, or a tombstone of
// a key it lacked.
func (b *batch[K, V]) Listed() bool {
	for i := range b.Len() {
		for _, d := range b.items[i].list.deltas {
			if d.Relisted() || d.Unknown() {
				return true
			}
		}
	}
	return b.Page() != nil
}
func (b *batch[K, V]) pages() int {
	if len(b.items) == 1 && b.items[0].bulk != nil {
		return 1
	}
	return 0
}

// popped is one key taken from the queue by Pop with its deltas, or a whole first
// list (bulk set, then key and list are unset and the batch holds nothing else).
type popped[K comparable, V any] struct {
	key  K
	list *deltaList[K, V]
	bulk *firstList[K, V]
}

// firstList is a page of a first list that found the queue and the cache empty, queued
// whole for the store to load in one write while the reflector reads the next: nothing can
// be deleted by it, so a relist's per-key bookkeeping would buy nothing (at 100,000
// objects it was most of a first sync's time after the list). keys[i] is the key of
// objs[i]; last marks the last page, which carries the revision and completes the sync.
type firstList[K comparable, V any] struct {
	keys []K
	objs []V
	rev  string
	last bool
}

func (l *firstList[K, V]) Keys() []K    { return l.keys } // Objects()[i] is of Keys()[i]
func (l *firstList[K, V]) Objects() []V { return l.objs }

var errFIFOClosed = fmt.Errorf("%w: its queue is closed", ErrStopped) // once Close is called

const shrinkAbove = 8192 // a queue that drains with more capacity is reallocated

// deltaFIFO is the queue between the reflector and the cache: deltas are grouped per key
// and keys are popped in order of first arrival. It differs from client-go's in
// these ways, on purpose:
//
//   - Pop takes many keys at once and the lock is not held while the batch is applied or
//     handlers run. Replace and Resync wait for the batch in flight to be applied, so they
//     never read a cache older than what was popped (nor queue stale objects).
//   - Replace emits tombstones for every vanished key, known to the cache or only queued,
//     and counts the keys of the initial population, not list entries.
//   - A Delete is always queued: whether the key is known is decided when the batch is
//     applied, against the cache then, so a delete racing an in-flight add is never lost.
//   - Writes before the first Replace do not mark the queue populated: only a list does.
//   - Add blocks while more than maxPending deltas are queued (backpressure), except for
//     Replace and Resync, which are bounded by the size of the collection.
type deltaFIFO[K comparable, V any] struct {
	mu    sync.Mutex
	cond  *sync.Cond // signalled when keys arrive, space frees, a batch completes or on close
	items map[K]*deltaList[K, V]
	queue []*deltaList[K, V] // the lists of keys with pending deltas, in first-arrival order; from head on
	head  int
	known knownObjects[K, V]
	keep  keeper

	pending    int // deltas queued
	maxPending int // 0: unbounded
	inFlight   bool

	populated    bool
	initialCount int  // keys of the initial population still to pop
	syncPending  bool // the initial population is not yet reported popped

	lastRev string // revision of the newest delta or bookmark added
	wmDirty bool   // lastRev moved since the last pop: wake the popper even with no keys
	closed  bool

	// txnOpen: the last change added said more of its revision txnRev follow (a
	// transaction arrives); see Pop.
	txnOpen bool
	txnRev  string

	free       []*deltaList[K, V] // recycled lists; bounded by the most keys ever pending
	shrinkFree bool               // drop free at the next finishBatch

	wholeFirst bool               // queue a first list into an empty queue and cache by pages
	firstOpen  bool               // pages of a first list are being queued; its last is to come
	abortedRev string             // the revision of an aborted first list's pages, the whole cache
	bulks      []*firstList[K, V] // pages of a first list not yet popped; popped before any key
	spare      []delta[V]         // room for lists past their inline deltas; see spareDeltas

	restored atomic.Bool // the cache holds a restored state that no list has replaced yet

	// behind is set while keys are queued (from a key's queueing to the pop that takes the
	// last): the writer has work, and Informer's reads give way to it.
	behind atomic.Bool
}

// newDeltaFIFO returns a queue over the cache known (nil: none) that carries what keep
// keeps, holds at most maxPending deltas (0: no bound), and with wholeFirst queues a first
// list into an empty queue and cache by pages.
func newDeltaFIFO[K comparable, V any](known knownObjects[K, V], keep keeper, maxPending int, wholeFirst bool) *deltaFIFO[K, V] {
	f := &deltaFIFO[K, V]{items: make(map[K]*deltaList[K, V]), known: known, keep: keep, maxPending: maxPending, wholeFirst: wholeFirst}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// Add queues ev, one watch event (Added, Modified or Deleted) of key, with what the store
// prepared for its object (nil: nothing), kept by the queue's keeper. more says that more
// changes of ev's revision follow (a transaction's): until the last of them, no pop
// reports a revision reached, and the transaction is popped whole unless it outgrows a
// batch (see Pop). It blocks while the queue is full and returns errFIFOClosed once
// closed.
func (f *deltaFIFO[K, V]) Add(ev Event[V], key K, more bool, prep any) error {
	d := delta[V]{typ: deltaUpdated, object: ev.Object, revision: ev.Revision}
	switch ev.Type {
	case Added:
		d.typ = deltaAdded
	case Deleted:
		d.typ, d.keyOnly = deltaDeleted, ev.LastStateUnknown
	}
	return f.addPrepared(key, d, more, prep)
}

// addPrepared queues d, a delta of key; see Add.
func (f *deltaFIFO[K, V]) addPrepared(key K, d delta[V], more bool, prep any) error {
	rev := d.revision
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.maxPending > 0 && f.pending >= f.maxPending && !f.closed {
		f.cond.Wait()
	}
	if f.closed {
		return errFIFOClosed
	}
	d.prepared = prep != nil
	l, appended := f.queueLocked(key, d)
	if appended && prep != nil {
		l.held = f.keep.Keep(l.held, prep, len(l.deltas)-1)
	}
	if more {
		f.txnOpen, f.txnRev = true, rev
		return nil
	}
	if f.txnOpen {
		f.txnOpen = false
		f.cond.Broadcast() // a pop may be waiting for the transaction's end
	}
	if rev != "" {
		f.lastRev = rev
	}
	return nil
}

// Bookmark records that every change up to rev has been added.
func (f *deltaFIFO[K, V]) Bookmark(rev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastRev = rev
	f.txnOpen = false
	f.wmDirty = true
	f.cond.Broadcast()
}

// queueLocked appends d to key's deltas, deduplicating a trailing pair of deletes,
// and queues the key if it had nothing pending (a queued key keeps its place). It
// returns key's list and whether d was appended to it.
func (f *deltaFIFO[K, V]) queueLocked(key K, d delta[V]) (*deltaList[K, V], bool) {
	l, ok := f.items[key]
	if !ok {
		if len(f.free) == 0 {
			chunk := make([]deltaList[K, V], listChunk)
			for i := range chunk {
				chunk[i].deltas = chunk[i].inline[:0]
				f.free = append(f.free, &chunk[i])
			}
		}
		l = f.free[len(f.free)-1]
		f.free = f.free[:len(f.free)-1]
		f.items[key] = l
		l.key = key
		f.queue = append(f.queue, l)
		f.cond.Broadcast()
		if !f.behind.Load() {
			f.behind.Store(true)
		}
	}
	if n := len(l.deltas); n > 0 && d.typ == deltaDeleted && l.deltas[n-1].typ == deltaDeleted {
		// Of two deletes in a row keep the real one; of two tombstones, the newer.
		if l.deltas[n-1].finalStateUnknown {
			l.deltas[n-1] = d
		}
		return l, false
	}
	if n := len(l.deltas); n == cap(l.deltas) && n < spareDeltas {
		// Past the inline deltas: room for spareDeltas, carved from a shared chunk, which
		// the list keeps when recycled (lists themselves are let go after a large list).
		if len(f.spare) < spareDeltas {
			f.spare = make([]delta[V], spareDeltas*listChunk/4)
		}
		buf := f.spare[:n:spareDeltas]
		f.spare = f.spare[spareDeltas:]
		copy(buf, l.deltas)
		clear(l.deltas)
		l.deltas = buf
	} else if n == cap(l.deltas) && n == spareDeltas {
		// Outgrowing the room carved from the shared chunk: move to a buffer of the list's
		// own and clear the room it leaves, which the chunk (still referenced by the other
		// lists carved from it) would otherwise keep alive with its objects.
		grown := make([]delta[V], n, 2*n)
		copy(grown, l.deltas)
		clear(l.deltas)
		l.deltas = grown
	}
	l.deltas = append(l.deltas, d)
	f.pending++
	return l, true
}

// Replace queues a list: a Replaced delta per item and a tombstone (with the newest queued
// or the cached object) for every key cached or queued but not listed. The first replace
// sets the initial population.
func (f *deltaFIFO[K, V]) Replace(keys []K, objs []V, rev string) error {
	f.restored.Store(false)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txnOpen = false // a list ends any transaction: it holds the whole state at rev
	if f.firstOpen || (!f.populated && f.canStartFirst()) {
		// The last page of a first list queued by pages, or a first list in one page.
		f.firstOpen = false
		f.abortedRev = ""
		f.bulks = append(f.bulks, &firstList[K, V]{keys: keys, objs: objs, rev: rev, last: true})
		f.lastRev = rev
		f.wmDirty = true
		f.populated = true
		f.syncPending = true
		f.cond.Broadcast()
		return nil
	}
	for (f.inFlight || len(f.bulks) > 0) && !f.closed {
		f.cond.Wait()
	}
	if f.closed {
		return errFIFOClosed
	}
	initial := !f.populated
	// After an aborted first list nothing but its pages reached the cache: a list at the
	// same revision finds those objects unchanged.
	unchanged := f.abortedRev != "" && f.abortedRev == rev
	f.abortedRev = ""
	listed := make(map[K]struct{}, len(keys))
	for i, k := range keys {
		n := len(listed)
		listed[k] = struct{}{}
		f.queueLocked(k, delta[V]{typ: deltaReplaced, object: objs[i], revision: rev, initial: initial, unchanged: unchanged, repeated: len(listed) == n})
	}
	// Keys only queued: client-go forgets those, so a key added and then gone during a
	// disconnect would never be deleted.
	for _, l := range f.queue[f.head:] {
		k := l.key
		if _, ok := listed[k]; ok {
			continue
		}
		if nw := l.newest(); nw.typ == deltaDeleted {
			continue // already going away
		}
		f.queueLocked(k, delta[V]{typ: deltaDeleted, finalStateUnknown: true, object: l.newest().object, revision: rev})
	}
	// Keys in the cache.
	if f.known != nil {
		f.known.EachKnown(func(k K, obj V) {
			if _, ok := listed[k]; ok {
				return
			}
			if _, queued := f.items[k]; queued {
				return // handled above
			}
			f.queueLocked(k, delta[V]{typ: deltaDeleted, finalStateUnknown: true, object: obj, revision: rev})
		})
	}
	f.lastRev = rev
	f.wmDirty = true
	if !f.populated {
		f.populated = true
		f.initialCount = len(f.queue) - f.head
		f.syncPending = true // reported by the pop that takes the last initial key (or the next pop)
	}
	f.cond.Broadcast()
	return nil
}

// FirstPage queues a page of the first list, not its last, if the list may be queued by
// pages (see firstList); if not, the page comes with the rest in Replace. Once a page was
// queued, Replace gets only the pages after it, or AbortFirst is called.
func (f *deltaFIFO[K, V]) FirstPage(keys []K, objs []V) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.takesPagesLocked() {
		return false
	}
	f.firstOpen = true
	f.bulks = append(f.bulks, &firstList[K, V]{keys: keys, objs: objs})
	f.cond.Broadcast()
	return true
}

// TakesPages reports whether FirstPage would queue a page now (only a close can change
// that before the reflector's next call).
func (f *deltaFIFO[K, V]) TakesPages() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.takesPagesLocked()
}

func (f *deltaFIFO[K, V]) takesPagesLocked() bool {
	return !f.closed && !f.populated && (f.firstOpen || f.canStartFirst())
}

// AbortFirst ends a first list queued by pages that failed at revision rev: the pages
// queued are applied, and the next list, queued per key against them, deletes what it
// lacks and, if it is at rev too, finds what it lists again unchanged (a resync).
func (f *deltaFIFO[K, V]) AbortFirst(rev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.firstOpen = false
	f.abortedRev = rev
}

// canStartFirst reports whether a first list may be queued by pages: nothing is queued,
// applying or cached.
func (f *deltaFIFO[K, V]) canStartFirst() bool {
	return f.wholeFirst && f.head == len(f.queue) && len(f.bulks) == 0 && !f.inFlight && !f.anyKnown()
}

// anyKnown reports whether the cache holds an object.
func (f *deltaFIFO[K, V]) anyKnown() bool {
	known := false
	if f.known != nil {
		f.known.EachKnown(func(K, V) { known = true })
	}
	return known
}

// Resync queues a Sync delta with the cached object for every cached key that has nothing
// pending. Keys with pending deltas are skipped: those deltas are newer than
// the cache.
func (f *deltaFIFO[K, V]) Resync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for (f.inFlight || len(f.bulks) > 0 || f.firstOpen) && !f.closed {
		f.cond.Wait()
	}
	if f.closed {
		return errFIFOClosed
	}
	if f.known == nil {
		return nil
	}
	f.known.EachKnown(func(k K, obj V) {
		if _, queued := f.items[k]; queued {
			return
		}
		f.queueLocked(k, delta[V]{typ: deltaSync, object: obj})
	})
	return nil
}

// Pop takes into b up to maxKeys pending keys in queue order, within maxDeltas deltas (one
// key at least), waiting for one; Replace and Resync wait until Done. Once b is applied,
// every change older than rev (or as old, if inclusive) is in the cache; synced: b
// completes the initial population.
//
// While a transaction arrives (BatchedWatch), Pop waits for its last change rather than
// take every queued key, so that the cache gets it whole; one that outgrows a batch or
// fills the queue is popped in parts, none of which reports a revision reached.
func (f *deltaFIFO[K, V]) Pop(b *batch[K, V], maxKeys, maxDeltas int) (rev string, inclusive, synced bool, err error) {
	buf := b.items[:0]
	defer func() { b.items = buf }()
	f.mu.Lock()
	defer f.mu.Unlock()
	for !f.closed && (f.head == len(f.queue) && len(f.bulks) == 0 && !f.wmDirty && !(f.syncPending && f.initialCount == 0) ||
		f.awaitingTxnLocked(maxKeys, maxDeltas)) {
		f.cond.Wait()
	}
	if f.closed {
		return "", false, false, errFIFOClosed
	}
	f.wmDirty = false
	if len(f.bulks) > 0 {
		// A page alone in its batch: every key queued since came after its list.
		page := f.bulks[0]
		f.bulks[0] = nil
		f.bulks = f.bulks[1:]
		if len(f.bulks) == 0 {
			f.bulks = nil
		}
		f.inFlight = true
		if !page.last {
			buf = append(buf, popped[K, V]{bulk: page})
			return "", false, false, nil
		}
		rev = page.rev
		if f.head == len(f.queue) && !f.txnOpen {
			rev = f.lastRev
		}
		f.syncPending = false
		buf = append(buf, popped[K, V]{bulk: page})
		return rev, true, true, nil
	}
	n, deltas := 0, 0
	for _, l := range f.queue[f.head:min(len(f.queue), f.head+maxKeys)] {
		if deltas += len(l.deltas); deltas > maxDeltas && n > 0 {
			break
		}
		n++
		k := l.key
		delete(f.items, k)
		f.pending -= len(l.deltas)
		buf = append(buf, popped[K, V]{key: k, list: l})
		if f.initialCount > 0 {
			f.initialCount--
		}
	}
	clear(f.queue[f.head : f.head+n])
	f.head += n
	if f.head == len(f.queue) {
		f.queue, f.head = f.queue[:0], 0
		if cap(f.queue) > shrinkAbove {
			// After a large list, do not keep its peak size for the informer's lifetime.
			f.queue = nil
			f.items = make(map[K]*deltaList[K, V])
			f.shrinkFree = true
		}
	} else if f.head > 1024 && f.head > len(f.queue)/2 {
		m := copy(f.queue, f.queue[f.head:])
		clear(f.queue[m:])
		f.queue, f.head = f.queue[:m], 0
	}
	f.behind.Store(f.head != len(f.queue))
	switch {
	case f.head == len(f.queue) && f.txnOpen:
		// A part of a transaction larger than a batch: every change older than it is in.
		rev = f.txnRev
	case f.head == len(f.queue):
		rev, inclusive = f.lastRev, true
	default:
		// The head key's oldest delta is the oldest change still queued.
		rev = f.queue[f.head].deltas[0].revision
	}
	f.inFlight = true
	if f.maxPending > 0 {
		f.cond.Broadcast() // space freed
	}
	synced = f.syncPending && f.initialCount == 0
	if synced {
		f.syncPending = false
	}
	return rev, inclusive, synced, nil
}

// awaitingTxnLocked reports whether Pop waits for the rest of a transaction: one arrives,
// and what is queued fits in a batch of maxKeys keys and maxDeltas deltas, and the queue.
func (f *deltaFIFO[K, V]) awaitingTxnLocked(maxKeys, maxDeltas int) bool {
	return f.txnOpen && len(f.bulks) == 0 && len(f.queue)-f.head < maxKeys && f.pending < maxDeltas &&
		(f.maxPending == 0 || f.pending < f.maxPending)
}

// Done marks the popped batch b applied and recycles its delta lists.
func (f *deltaFIFO[K, V]) Done(b *batch[K, V]) {
	batch := b.items
	defer func() { clear(b.items); b.items = b.items[:0] }()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(batch) == 1 && batch[0].bulk != nil {
		batch[0].bulk = nil
		f.inFlight = false
		f.cond.Broadcast()
		return
	}
	if f.shrinkFree {
		// The queue drained after a large list: let its lists go.
		f.shrinkFree = false
		clear(f.free)
		f.free = nil
		for i := range batch {
			clear(batch[i].list.deltas)
			batch[i].list = nil
		}
	}
	for i := range batch {
		l := batch[i].list
		if l == nil {
			break
		}
		clear(l.deltas)
		if cap(l.deltas) > 16 {
			l.deltas = l.inline[:0]
		} else {
			l.deltas = l.deltas[:0]
		}
		if l.held != nil {
			l.held = f.keep.Drop(l.held)
		}
		var zero K
		l.key = zero
		f.free = append(f.free, l)
		batch[i].list = nil
	}
	f.inFlight = false
	f.cond.Broadcast()
}

func (f *deltaFIFO[K, V]) Behind() bool { return f.behind.Load() } // Informer's reads give way

// Close wakes every waiter; pending deltas are dropped (unlike client-go, nothing is drained,
// so that a stop is prompt).
func (f *deltaFIFO[K, V]) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.behind.Store(false) // nobody will take the keys left
	f.cond.Broadcast()
}

// MarkRestored records that the cache holds a restored state at rev, as if a first list
// had been applied: the next replace is a relist, whose adds are not initial.
func (f *deltaFIFO[K, V]) MarkRestored(rev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.populated = true
	f.lastRev = rev
	f.txnOpen = false
	f.restored.Store(true)
}

// Restored reports whether the state MarkRestored recorded is not yet replaced by a list.
func (f *deltaFIFO[K, V]) Restored() bool { return f.restored.Load() }
