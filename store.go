package informer

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/informer-go/informer/internal/btree"
)

// store is the indexed cache. One writer (the informer's processing goroutine) changes it
// under mu; readers read immutable snapshots made with Tree.Clone, an O(1) copy-on-write
// copy. While readers read, the writer makes the snapshot of each batch as it publishes
// the batch, so readers take no lock: a reader locks mu only to make a snapshot itself, on
// its first read after the cache changed with no reader (or after AddIndexers).
//
// An index is a tree of buckets, one per value, each holding one (key, object) entry inline
// or a tree of them like items. A snapshot clones items and each index's tree of buckets,
// not the buckets' trees: it starts a new epoch, and the writer clones a bucket's tree
// (O(1) again) the first time it changes it in an epoch, replacing the bucket in the index.
type store[K comparable, V any] struct {
	kit *treeKit[K, V] // the key order and what every tree shares

	mu      sync.Mutex // held by the writer for a batch, and by a reader making a snapshot
	items   *btree.Tree[K, V]
	indexes storeIndexes[K, V]
	gen     atomic.Uint64 // bumped after every write batch
	rev     string        // revision the state reflects, set with the batch
	exact   bool          // the state is exactly the source's at rev: nothing applied beyond it

	snap    atomic.Pointer[published[K, V]]
	reading atomic.Bool // a reader took a snapshot since the writer last made one
	scratch []string    // writer-only buffer for index values
	loose   bool        // written before the first sync in an order that left nodes half full
	settled bool        // the first sync is past: loose is no longer tracked
	w       writeBatch[K, V]
}

// published is a snapshot the store made, with what the store knows of it.
type published[K comparable, V any] struct {
	sn    *Snapshot[K, V]
	gen   uint64
	rev   string
	exact bool
}

// newStore makes an empty store ordered by compare (nil: Options.CompareKeys' default).
func newStore[K comparable, V any](compare func(a, b K) int, indexers Indexers[V]) (*store[K, V], error) {
	kit, err := newTreeKit[K, V](compare)
	if err != nil {
		return nil, err
	}
	s := &store[K, V]{kit: kit}
	s.w.duplicate = func(K, string) {}
	s.items = kit.NewItems()
	if err := s.indexes.Add(indexers, s.items, kit); err != nil {
		return nil, err
	}
	return s, nil
}

// AddIndexers adds indexes to a store in use: see Informer.AddIndexers.
func (s *store[K, V]) AddIndexers(indexers Indexers[V]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.indexes.Add(indexers, s.items, s.kit); err != nil {
		return err
	}
	s.gen.Add(1) // readers must see the new index
	return nil
}

// Index returns the index of that name: see Informer.Index.
func (s *store[K, V]) Index(name string) (Index[V], error) { return s.indexes.Functions().Lookup(name) }

// Functions returns the store's current index functions, which hints are computed with.
func (s *store[K, V]) Functions() *indexSet[V] { return s.indexes.Functions() }

// EachKnown calls fn for every cached object in key order; the delta queue reads the
// cache through it for relists and resyncs, with no batch in flight.
func (s *store[K, V]) EachKnown(fn func(K, V)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items.Ascend(func(k K, obj V) bool { fn(k, obj); return true })
}

// writeBatch is the store's state for applying batches, kept between batches for its
// buffers.
type writeBatch[K comparable, V any] struct {
	// sameRevision, when set, says whether two states of an object have the same revision:
	// an object relisted with its revision unchanged is a resync, not an update.
	sameRevision func(a, b V) bool
	report       func(error) // an object an index function failed for
	// duplicate is told of an object sent for a key already there: listed again in the
	// list named list, or (list "") an Added event for a cached key.
	duplicate func(key K, list string)
	offsets   []int
	slots     []notification[K, V]
}

// Configure sets how the store reports an object an index function failed for, and, if
// sameRevision is not nil, how it tells that a relisted object did not change. Call it
// before the first write.
func (s *store[K, V]) Configure(report func(error), sameRevision func(a, b V) bool, duplicate func(key K, list string)) {
	s.w.report, s.w.sameRevision, s.w.duplicate = report, sameRevision, duplicate
}

// Apply writes a batch popped from the delta queue to the store under one lock and
// appends the notifications it makes to notes. rev, if not empty, is the revision the
// state reflects once the batch is applied. It returns notes, the number of deltas
// applied and the number of objects the store then holds.
//
// Keys are independent of each other, so a large batch writes them in a scattered order
// while the notifications keep the queue's order: a list arrives sorted by key, and sorted
// inserts leave B-tree nodes half full, scattered ones fuller.
func (s *store[K, V]) Apply(b *batch[K, V], rev string, notes []notification[K, V]) (_ []notification[K, V], applied, objects int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &s.w
	if page := b.Page(); page != nil {
		notes = s.applyFirstList(w, page.Keys(), page.Objects(), notes)
		s.publishLocked(rev)
		return notes, len(page.Keys()), s.items.Len()
	}
	if !s.settled {
		s.loose = true // a first list queued per key: see compactIfLoose
	}
	n := b.Len()
	stride := s.kit.ScatterStride(n)
	if stride == 0 {
		for i := range n {
			m := len(b.Deltas(i))
			applied += m
			notes = slices.Grow(notes, m)
			base := len(notes)
			out := notes[base : base+m]
			s.applyList(w, b, i, out)
			for j := range out {
				if !out[j].Empty() {
					notes = append(notes, out[j]) // moves left over the slots of skipped ones
				}
			}
			clear(notes[len(notes) : base+m])
		}
	} else {
		offsets := w.offsets[:0]
		total := 0
		for i := range n {
			offsets = append(offsets, total)
			total += len(b.Deltas(i))
		}
		applied = total
		slots := w.slots[:0]
		slots = append(slots, make([]notification[K, V], total)...)
		for k, i := 0, 0; k < n; k, i = k+1, (i+stride)%n {
			s.applyList(w, b, i, slots[offsets[i]:offsets[i]+len(b.Deltas(i))])
		}
		for i := range slots {
			if !slots[i].Empty() {
				notes = append(notes, slots[i])
			}
		}
		clear(slots)
		w.offsets, w.slots = offsets[:0], slots[:0]
	}
	s.publishLocked(rev)
	return notes, applied, s.items.Len()
}

// applyList applies the deltas of key i of b, writing their notifications to out (empty:
// none), which has a slot per delta. Several deltas all prepared with the current index
// functions are applied as one write of the final state, with the notifications the
// writes one by one would have made: readers see only whole batches, so the intermediate
// states were never visible anyway.
func (s *store[K, V]) applyList(w *writeBatch[K, V], b *batch[K, V], i int, out []notification[K, V]) {
	key, ds := b.Key(i), b.Deltas(i)
	h, _ := b.Held(i).(*queuedHint[V])
	for j := range ds {
		if ds[j].Repeated() {
			w.duplicate(key, "the list at revision "+ds[j].Revision()) // one list holds key twice
		}
	}
	if len(ds) > 1 && s.AllPrepared(ds, h) {
		s.applyFinal(w, key, ds, h, out)
		return
	}
	for j := range ds {
		out[j] = s.applyDelta(w, key, &ds[j], h.ForDelta(j))
	}
}

// applyFinal is applyList for a list that allPrepared. The final state is the last
// delta's: it is written first, which returns the state before the batch that the
// notifications start from.
func (s *store[K, V]) applyFinal(w *writeBatch[K, V], key K, ds []delta[V], h *queuedHint[V], out []notification[K, V]) {
	last := len(ds) - 1
	var cur V
	var ex bool
	if d := &ds[last]; d.Deleted() {
		cur, ex = s.deleteHinted(key, h.ForDelta(last))
	} else {
		cur, ex, _ = s.upsertLocked(key, d.Object(), h.ForDelta(last)) // values known: no error
	}
	var zero V
	for j := range ds {
		d := &ds[j]
		out[j] = w.noteFor(key, d, cur, ex)
		if d.Deleted() {
			cur, ex = zero, false
		} else {
			cur, ex = d.Object(), true
		}
	}
}

// applyDelta applies d, a delta of key prepared as h, and returns its notification
// (empty: none).
func (s *store[K, V]) applyDelta(w *writeBatch[K, V], key K, d *delta[V], h storeHint[V]) notification[K, V] {
	if d.Deleted() {
		old, existed := s.deleteHinted(key, h)
		return w.noteFor(key, d, old, existed)
	}
	old, existed, err := s.upsertLocked(key, d.Object(), h)
	if err != nil {
		w.report(err)
		return notification[K, V]{}
	}
	return w.noteFor(key, d, old, existed)
}

// noteFor returns the notification of d, a delta of key, when the key's state before d was
// old (existed false: absent). Empty: nothing to tell. An add is initial only when it
// comes from the informer's first list.
func (w *writeBatch[K, V]) noteFor(key K, d *delta[V], old V, existed bool) notification[K, V] {
	switch {
	case d.Deleted() && !existed:
		return notification[K, V]{} // never seen, or its delete was already delivered
	case d.Deleted():
		obj := d.Object()
		if d.Unknown() || d.KeyOnly() {
			obj = old // a tombstone's cached state is at least as new; a key alone is no state
		}
		return deleteNote(key, obj, d.Unknown())
	case !existed:
		return addNote(key, d.Object(), d.Initial())
	}
	if d.Added() {
		w.duplicate(key, "")
	}
	return w.listedNote(key, d.Object(), old, d.Resync(), d.Relisted())
}

// listedNote is the update of key from old to obj; resync: it is known not to have
// changed; listed: obj comes from a list, and sameRevision decides.
func (w *writeBatch[K, V]) listedNote(key K, obj, old V, resync, listed bool) notification[K, V] {
	if listed && w.sameRevision != nil && !resync {
		resync = w.sameRevision(old, obj)
	}
	return updateNote(key, old, obj, resync)
}

// applyFirstList writes a page of a first list queued by pages and appends its
// notifications, in the list's order, to notes: what a Replaced delta per object would
// have made (an initial add, or for a key listed twice an update by the later one), in one
// pass with no per-key queue.
//
// A page sorted by key that comes after every cached key (a list usually comes sorted) is
// written densely (see appendDense); any other page in its order, which leaves the trees'
// nodes about half full: the store then needs compacting once the list is in.
func (s *store[K, V]) applyFirstList(w *writeBatch[K, V], keys []K, objs []V, notes []notification[K, V]) []notification[K, V] {
	if s.appendsInOrder(keys) {
		return s.appendDense(w, keys, objs, notes)
	}
	s.loose = true
	notes = slices.Grow(notes, len(keys))
	for i, key := range keys {
		old, existed, err := s.upsertLocked(key, objs[i], storeHint[V]{})
		switch {
		case err != nil:
			w.report(err)
		case existed: // a first list finds the cache empty: listed twice
			w.duplicate(key, "the first list")
			notes = append(notes, w.listedNote(key, objs[i], old, false, true))
		default:
			notes = append(notes, addNote(key, objs[i], true))
		}
	}
	return notes
}

// upsertLocked stores obj under key and updates every index. If an index function fails
// for obj nothing changes and the error is returned. hint, when current, holds obj's
// values.
func (s *store[K, V]) upsertLocked(key K, obj V, hint storeHint[V]) (old V, existed bool, err error) {
	vals, bounds, ok := s.Prepared(hint)
	if !ok {
		// Compute every new value first, so that a failure leaves the store untouched.
		var stack [8]int32
		var oe *ObjectError
		vals, bounds, oe = s.indexes.Functions().Compute(s.scratch[:0], stack[:0], obj)
		s.scratch = vals[:0] // kept for the next call; vals stays valid until then
		if oe != nil {
			oe.Key = key
			return old, false, oe
		}
	}
	prevObj, existed := s.items.Set(key, obj)
	s.indexes.Update(key, prevObj, obj, existed, vals, bounds)
	return prevObj, existed, nil
}

// deleteLocked removes key and its index entries.
func (s *store[K, V]) deleteLocked(key K) (old V, existed bool) {
	return s.deleteHinted(key, storeHint[V]{})
}

// deleteHinted is deleteLocked with the index values of the object a delete event
// carried, when known: in a single-valued index the key is in exactly one bucket, and
// that of the event's object is where it is found unless the object changed since it was
// stored; only then is the index function called on the stored object (which, written
// long ago, is likely out of the processor's caches).
func (s *store[K, V]) deleteHinted(key K, hint storeHint[V]) (old V, existed bool) {
	prevObj, existed := s.items.Delete(key)
	if !existed {
		return old, false
	}
	vals, ends, hinted := s.Prepared(hint)
	s.indexes.Drop(key, prevObj, vals, ends, hinted)
	return prevObj, true
}

// Load fills the empty store with a restored state in one write (a warm restart's bulk
// load, under one lock, with no delta queued per object) and appends a notification per
// stored object to notes: initial adds, in key order. keys[i] is the key of objs[i]; keys
// need not be sorted (sorted is fastest), and of duplicate keys the last wins. An object
// an index function fails for is reported and not stored. The state is then exactly the
// source's at rev.
func (s *store[K, V]) Load(keys []K, objs []V, rev string, report func(error), notes []notification[K, V]) []notification[K, V] {
	s.mu.Lock()
	defer s.mu.Unlock()
	// In the snapshot's order, which is key order: each insert walks the path the last one
	// took, which stays in the CPU's caches. Scattered inserts (as Apply does) fill
	// nodes better but miss the caches on every level: measured on 200,000 objects, the
	// load took 4.3 µs per object scattered and 0.5 µs sorted.
	for i := range keys {
		if _, _, err := s.upsertLocked(keys[i], objs[i], storeHint[V]{}); err != nil {
			report(err)
		}
	}
	notes = slices.Grow(notes, s.items.Len())
	s.items.Ascend(func(k K, obj V) bool {
		notes = append(notes, addNote(k, obj, true))
		return true
	})
	s.publishLocked(rev)
	return notes
}

// Replay returns the current state as initial adds, in key order, and the revision it is
// exactly the source's state at ("" if none): what a handler added to a running informer
// is first given.
func (s *store[K, V]) Replay() ([]notification[K, V], string) {
	sn, rev, _ := s.Exact()
	notes := make([]notification[K, V], 0, sn.Len())
	for k, v := range sn.All() {
		notes = append(notes, addNote(k, v, true))
	}
	return notes, rev
}

// publishLocked records that a write batch is complete and the state reflects rev. If a
// reader took a snapshot since the last one was made, it makes the snapshot of the new
// state before publishing it, so that readers find it ready instead of locking mu.
func (s *store[K, V]) publishLocked(rev string) {
	if rev != "" {
		s.rev = rev
	}
	// A batch without a revision left changes queued: the state holds some changes newer
	// than rev, but not all of them.
	s.exact = rev != ""
	next := s.gen.Load() + 1
	if s.reading.Load() {
		s.reading.Store(false)
		s.makeSnapshot(next)
	}
	s.gen.Store(next)
}

// Generation counts the store's write batches: a reader that saw the same generation saw
// the same state.
func (s *store[K, V]) Generation() uint64 { return s.gen.Load() }

// Reading reports whether a reader took a snapshot since the writer last made one.
func (s *store[K, V]) Reading() bool { return s.reading.Load() }

// Exact returns the current state, the revision it is exactly the source's state at (""
// when changes of a later revision are applied or of an earlier one still queued) and its
// generation.
func (s *store[K, V]) Exact() (sn *Snapshot[K, V], rev string, gen uint64) {
	p := s.published()
	if p.exact {
		rev = p.rev
	}
	return p.sn, rev, p.gen
}

// Snapshot returns the current state. It takes no lock when the newest snapshot is of the
// newest state, which is so while readers keep reading (publishLocked makes it); otherwise
// it waits for the writer's current batch and clones the trees.
func (s *store[K, V]) Snapshot() *Snapshot[K, V] { return s.published().sn }

func (s *store[K, V]) published() *published[K, V] {
	// The snapshot before the generation: the writer stores them in the other order, so
	// a snapshot at least as new as the generation read is of the newest state published.
	if p := s.snap.Load(); p != nil && p.gen >= s.gen.Load() {
		if !s.reading.Load() {
			s.reading.Store(true)
		}
		return p
	}
	s.reading.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	gen := s.gen.Load()
	if p := s.snap.Load(); p != nil && p.gen == gen {
		return p
	}
	return s.makeSnapshot(gen)
}

// makeSnapshot clones the current state as the snapshot of generation gen and makes it
// the newest. The writer's lock must be held.
func (s *store[K, V]) makeSnapshot(gen uint64) *published[K, V] {
	s.kit.NewEpoch() // the buckets' trees are now shared with this snapshot
	p := &published[K, V]{gen: gen, rev: s.rev, exact: s.exact}
	p.sn = newSnapshot(s.kit.Compare, gen, s.rev, s.exact, s.items.Clone(), s.indexes.Snap())
	s.snap.Store(p)
	return p
}

// CompactIfLoose is called once the first list is in: it compacts the store if that list
// was written in an order that left the trees' nodes half full (see applyFirstList).
func (s *store[K, V]) CompactIfLoose() {
	s.mu.Lock()
	loose := s.loose
	s.loose, s.settled = false, true
	s.mu.Unlock()
	if loose {
		s.Compact()
	}
}

// Compact rebuilds the cache's trees with nearly full nodes, the same contents. Writes in
// key order, as a first list's are within each namespace-like prefix, leave B-tree nodes
// half full (a full node is split in the middle, and the left half never gets another
// entry); rebuilt, the trees take half the memory: on W2 of the bench module
// (200,000 objects, two indexes), 69 bytes less per object. It takes the writer's lock
// for about 1.4 µs per object with two indexes (200,000 objects: 270 ms, where writing
// them took 750 ms); the informer calls it once the first list (or a restored state) is in
// the cache, before it is synced. Snapshots keep the trees they have. Later inserts
// into full nodes split them: W1's events allocate 14 % more bytes (not more objects).
func (s *store[K, V]) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	items, buf := s.kit.Dense(s.items, nil)
	s.items = items
	s.indexes.Compact(buf)
}

// This file keeps the cache's trees dense: B-tree nodes written in key order end half
// full, so a first list that comes sorted is written densely, and a cache written
// otherwise is compacted once, before the informer is synced.

// appendsInOrder reports whether keys are strictly increasing and all after every cached
// key.
func (s *store[K, V]) appendsInOrder(keys []K) bool {
	if len(keys) == 0 {
		return true
	}
	if last, _, ok := s.items.Max(); ok && s.kit.Compare(last, keys[0]) >= 0 {
		return false
	}
	for i := 1; i < len(keys); i++ {
		if s.kit.Compare(keys[i-1], keys[i]) >= 0 {
			return false
		}
	}
	return true
}

// appendDense writes a page for which appendsInOrder holds: every object is new, so each
// is an initial add. Each tree gets its new entries in key order but every other one
// first, then the others: the first pass leaves the nodes it splits half full with a gap
// beside each entry, and the second fills the gaps without splitting them. The key tree
// takes the page so, and each index its own entries (see storeIndexes.InsertDense). The
// nodes end nearly full, as compacting leaves them, at the cost of writing in order: a
// first list of 100,000 objects then needs no rebuild before its sync (the rebuild took
// longer than the writes).
func (s *store[K, V]) appendDense(w *writeBatch[K, V], keys []K, objs []V, notes []notification[K, V]) []notification[K, V] {
	ok := s.indexes.InsertDense(keys, objs, w.report)
	for start := range 2 {
		for i := start; i < len(keys); i += 2 {
			if ok[i] {
				s.items.Set(keys[i], objs[i])
			}
		}
	}
	notes = slices.Grow(notes, len(keys))
	for i, key := range keys {
		if ok[i] {
			notes = append(notes, addNote(key, objs[i], true))
		}
	}
	return notes
}
