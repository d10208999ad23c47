package informer

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/informer-go/informer/internal/btree"
)

// IndexFunc returns the values under which an object is indexed: zero, one or several
// (a multi-valued index, such as the users named in an annotation). An error is an error
// for that object: it is reported and the object is not stored.
type IndexFunc[V any] func(obj V) ([]string, error)

// ValueFunc returns the single value under which an object is indexed (its namespace, the
// value of one label). A single-valued index allocates nothing per object.
type ValueFunc[V any] func(obj V) (string, error)

// Index declares one index. Build it with IndexBy (one value per object) or IndexByValues
// (any number of values per object).
type Index[V any] struct {
	one  ValueFunc[V]
	many IndexFunc[V]
}

// IndexBy declares a single-valued index: fn returns the one value of an object.
func IndexBy[V any](fn ValueFunc[V]) Index[V] { return Index[V]{one: fn} }

// IndexByValues declares a multi-valued index: fn returns zero or more values per object.
func IndexByValues[V any](fn IndexFunc[V]) Index[V] { return Index[V]{many: fn} }

// values calls the index function with panics turned into errors, appending to dst.
func (ix Index[V]) values(dst []string, obj V) (out []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = dst, fmt.Errorf("index function panicked: %v", r)
		}
	}()
	switch {
	case ix.one != nil:
		v, err := ix.one(obj)
		if err != nil {
			return dst, err
		}
		return append(dst, v), nil
	case ix.many != nil:
		vs, err := ix.many(obj)
		if err != nil {
			return dst, err
		}
		return append(dst, vs...), nil
	}
	return dst, errors.New("index declared without a function")
}

// indexSet is the store's index functions in order, replaced (never changed) when indexes
// are added: values computed with one set are valid for the store while it is current.
type indexSet[V any] struct {
	fns   []Index[V]
	names []string
}

// compute appends obj's values in every index to vals, and to ends the end of each index's
// values, counted from where obj's values start. If an index function fails it returns
// the error, without the object's key.
func (set *indexSet[V]) compute(vals []string, ends []int32, obj V) ([]string, []int32, *ObjectError) {
	start := len(vals)
	for i, fn := range set.fns {
		var err error
		if vals, err = fn.values(vals, obj); err != nil {
			return vals, ends, &ObjectError{Op: "index " + set.names[i], Err: err}
		}
		ends = append(ends, int32(len(vals)-start))
	}
	return vals, ends, nil
}

// Indexers names the indexes of a store.
type Indexers[V any] map[string]Index[V]

// Errors of the read API.
var (
	// ErrUnknownIndex is returned by index queries that name an index that does not exist.
	ErrUnknownIndex = errors.New("informer: no such index")
	// ErrIndexExists is returned by AddIndexers for a name already in use.
	ErrIndexExists = errors.New("informer: index already exists")
)

type entry[K comparable, V any] struct {
	key K
	obj V
}

// bucket holds the entries of one value of one index: the objects indexed under value, by
// key, so that reading an index bucket is a walk with no lookup per object. A bucket of one
// entry (the common case of an index with a value per object, such as a UID) holds it
// inline; a larger one has a tree. Buckets are stored by value in their index's tree of
// buckets; a snapshot clones that tree and so keeps the bucket values, tree pointers
// included, it saw.
type bucket[K comparable, V any] struct {
	one  entry[K, V]       // the only entry, when tree is nil
	tree *bucketTree[K, V] // every entry, when there are several
}

type bucketTree[K comparable, V any] struct {
	entries *btree.Tree[K, V]
	epoch   uint64 // the store's epoch when entries was made: the writer changes it in place only within it
}

func (b bucket[K, V]) len() int {
	if b.tree == nil {
		return 1
	}
	return b.tree.entries.Len()
}

func (b bucket[K, V]) ascend(yield func(K, V) bool) {
	if b.tree == nil {
		yield(b.one.key, b.one.obj)
		return
	}
	b.tree.entries.Ascend(yield)
}

type storeIndex[K comparable, V any] struct {
	name    string
	fn      Index[V]
	buckets *btree.Tree[string, bucket[K, V]] // by value; a value with no object has no bucket
	// trees has the tree of every bucket that has one, by value: the writer's way to a
	// bucket of several entries without a search among the buckets. A value missing here
	// has an inline bucket or none.
	trees map[string]*bucketTree[K, V]
}

// btreeDegree trades node size against depth. Measured on the pipeline benchmark (50,000
// objects, two indexes), the cache's overhead per object was 166 bytes at degree 32, 153 at
// 64 and 139 at 48, whose node slices fit the allocator's size classes best.
const btreeDegree = 48

// bucketDegree is the degree of a bucket's tree, which holds hundreds of entries rather than
// all of them. On the same benchmark (buckets of 100 and 500 objects) the overhead per
// object was 149 bytes at 48, 123 at 32 and at 64, 141 at 16; on W2 of the bench module
// (buckets of 400 and 2,000) it varied by 5 bytes between 32 and 64. Smaller nodes are
// also cheaper to copy when a snapshot shares them.
const bucketDegree = 32

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
	compare func(a, b K) int
	order   btree.Order[K]        // compare, for the trees
	nodes   *btree.FreeList[K, V] // shared by items and every bucket

	mu      sync.Mutex // held by the writer for a batch, and by a reader making a snapshot
	items   *btree.Tree[K, V]
	indexes []*storeIndex[K, V]
	set     atomic.Pointer[indexSet[V]] // the functions of indexes, for any goroutine
	gen     atomic.Uint64               // bumped after every write batch
	rev     string                      // revision the state reflects, set with the batch
	exact   bool                        // the state is exactly the source's at rev: nothing applied beyond it
	epoch   uint64                      // bumped by every new snapshot; see bucket.epoch

	snap       atomic.Pointer[Snapshot[K, V]]
	reading    atomic.Bool // a reader took a snapshot since the writer last made one
	scratch    []string    // writer-only buffers for index values
	oldScratch []string
	loose      bool // written before the first sync in an order that left nodes half full
	settled    bool // the first sync is past: loose is no longer tracked
}

// newStore makes an empty store ordered by compare; a nil compare is K's natural order
// (see Options.CompareKeys), which K's that are strings or structs of two strings are
// compared in without an indirect call.
func newStore[K comparable, V any](compare func(a, b K) int, indexers Indexers[V]) (*store[K, V], error) {
	natural := compare == nil
	if natural {
		var ok bool
		if compare, ok = defaultCompare[K](); !ok {
			var k K
			return nil, fmt.Errorf("informer: New: key type %T has no natural order; set Options.CompareKeys", k)
		}
	}
	s := &store[K, V]{compare: compare, nodes: &btree.FreeList[K, V]{}}
	offs, strs := stringFields[K]()
	switch {
	case natural && isString[K]():
		// The common case, compared in place without an indirect call.
		s.order = btree.ByString[K]()
	case natural && strs && len(offs) == 2:
		// A struct of two strings (namespace and name), likewise.
		s.order = btree.ByStringFields[K](offs[0], offs[1])
	default: // the user's order, or a natural order of another shape
		s.order = btree.ByCompare(compare)
	}
	s.items = s.newEntries()
	if err := s.addIndexersLocked(indexers); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *store[K, V]) newEntries() *btree.Tree[K, V] {
	return btree.New(btreeDegree, s.order, s.nodes)
}

func (s *store[K, V]) newBucketTree(a, b entry[K, V]) *bucketTree[K, V] {
	t := &bucketTree[K, V]{entries: btree.New(bucketDegree, s.order, s.nodes), epoch: s.epoch}
	t.entries.Set(a.key, a.obj)
	t.entries.Set(b.key, b.obj)
	return t
}

func newBuckets[K comparable, V any]() *btree.Tree[string, bucket[K, V]] {
	return btree.New[string, bucket[K, V]](btreeDegree, btree.ByString[string](), nil)
}

// addIndexers adds indexes to a store in use: see Informer.AddIndexers.
func (s *store[K, V]) addIndexers(indexers Indexers[V]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.addIndexersLocked(indexers); err != nil {
		return err
	}
	s.gen.Add(1) // readers must see the new index
	return nil
}

// addIndexersLocked adds indexes and builds them from the current contents. On an error
// nothing is added.
func (s *store[K, V]) addIndexersLocked(indexers Indexers[V]) error {
	names := make([]string, 0, len(indexers))
	for name := range indexers {
		names = append(names, name)
	}
	sort.Strings(names)
	added := make([]*storeIndex[K, V], 0, len(names))
	for _, name := range names {
		ix := indexers[name]
		if ix.one == nil && ix.many == nil {
			return fmt.Errorf("informer: index %q has no function", name)
		}
		if s.index(name) != nil {
			return fmt.Errorf("%w: %q", ErrIndexExists, name)
		}
		si := &storeIndex[K, V]{name: name, fn: ix, buckets: newBuckets[K, V](), trees: map[string]*bucketTree[K, V]{}}
		var err error
		s.items.Ascend(func(k K, obj V) bool {
			var vals []string
			vals, err = ix.values(s.scratch[:0], obj)
			if err != nil {
				err = &ObjectError{Op: "index " + name, Key: k, Err: err}
				return false
			}
			for _, v := range vals {
				s.insertIndexed(si, v, entry[K, V]{key: k, obj: obj})
			}
			return true
		})
		if err != nil {
			return err
		}
		s.compactIndex(si, nil) // built in key order: half-full nodes
		added = append(added, si)
	}
	s.indexes = append(s.indexes, added...)
	set := &indexSet[V]{}
	for _, ix := range s.indexes {
		set.fns = append(set.fns, ix.fn)
		set.names = append(set.names, ix.name)
	}
	s.set.Store(set)
	return nil
}

func (s *store[K, V]) index(name string) *storeIndex[K, V] {
	for _, ix := range s.indexes {
		if ix.name == name {
			return ix
		}
	}
	return nil
}

// insertIndexed indexes e under value in ix and reports whether e's key was indexed there
// already (its entry is replaced).
func (s *store[K, V]) insertIndexed(ix *storeIndex[K, V], value string, e entry[K, V]) bool {
	if t, ok := ix.trees[value]; ok {
		_, found := s.writable(ix, value, t).Set(e.key, e.obj)
		return found
	}
	// An inline bucket or none: one write instead of a lookup and a write, undone in the
	// rare case that the bucket holds another key.
	prev, ok := ix.buckets.Set(value, bucket[K, V]{one: e})
	if !ok || s.compare(prev.one.key, e.key) == 0 {
		return ok
	}
	t := s.newBucketTree(prev.one, e)
	ix.trees[value] = t
	ix.buckets.Set(value, bucket[K, V]{tree: t})
	return false
}

// removeIndexed removes key from value's bucket in ix, and the bucket if it is left empty.
// It reports whether key was there.
func (s *store[K, V]) removeIndexed(ix *storeIndex[K, V], value string, key K) bool {
	t, ok := ix.trees[value]
	if !ok {
		b, ok := ix.buckets.Get(value)
		if !ok || s.compare(b.one.key, key) != 0 {
			return false
		}
		ix.buckets.Delete(value)
		return true
	}
	entries := s.writable(ix, value, t)
	if _, found := entries.Delete(key); !found {
		return false
	}
	if entries.Len() == 1 { // a tree holds two entries or more: back to inline
		k, obj, _ := entries.Min()
		delete(ix.trees, value)
		ix.buckets.Set(value, bucket[K, V]{one: entry[K, V]{key: k, obj: obj}})
	}
	return true
}

// writable returns the entries of t, value's tree in ix, which the writer may change:
// cloned first, and the bucket replaced in ix, if a snapshot may hold it.
func (s *store[K, V]) writable(ix *storeIndex[K, V], value string, t *bucketTree[K, V]) *btree.Tree[K, V] {
	if t.epoch == s.epoch {
		return t.entries
	}
	// Clone also gives the shared tree a new copy-on-write context, a field that readers
	// of the snapshots holding that tree never read.
	t = &bucketTree[K, V]{entries: t.entries.Clone(), epoch: s.epoch}
	ix.trees[value] = t
	ix.buckets.Set(value, bucket[K, V]{tree: t})
	return t.entries
}

// compact rebuilds the cache's trees with nearly full nodes, the same contents. Writes in
// key order, as a first list's are within each namespace-like prefix, leave B-tree nodes
// half full (a full node is split in the middle, and the left half never gets another
// entry); rebuilt, the trees take half the memory: on W2 of the bench module
// (200,000 objects, two indexes), 69 bytes less per object. It takes the writer's lock
// for about 1.4 µs per object with two indexes (200,000 objects: 270 ms, where writing
// them took 750 ms); the informer calls it once the first list (or a restored state) is in
// the cache, before it is synced. Snapshots keep the trees they have. Later inserts
// into full nodes split them: W1's events allocate 14 % more bytes (not more objects).
func (s *store[K, V]) compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf []entry[K, V]
	s.items, buf = compactTree(s.items, s.newEntries(), buf)
	for _, ix := range s.indexes {
		buf = s.compactIndex(ix, buf)
	}
}

// compactIndex rebuilds ix's tree of buckets and every bucket's tree, using buf.
func (s *store[K, V]) compactIndex(ix *storeIndex[K, V], buf []entry[K, V]) []entry[K, V] {
	var fresh *btree.Tree[K, V]
	var buckets []entry[string, bucket[K, V]]
	ix.buckets.Ascend(func(value string, b bucket[K, V]) bool {
		if b.tree != nil {
			fresh, buf = compactTree(b.tree.entries, btree.New(bucketDegree, s.order, s.nodes), buf)
			b.tree = &bucketTree[K, V]{entries: fresh, epoch: s.epoch}
			ix.trees[value] = b.tree
		}
		buckets = append(buckets, entry[string, bucket[K, V]]{key: value, obj: b})
		return true
	})
	ix.buckets = newBuckets[K, V]()
	insertDense(ix.buckets, buckets)
	return buf
}

// compactTree copies the items of from into the empty tree to with nearly full nodes,
// using buf for the sorted items, and returns to and buf.
func compactTree[K comparable, V any](from, to *btree.Tree[K, V], buf []entry[K, V]) (*btree.Tree[K, V], []entry[K, V]) {
	buf = buf[:0]
	from.Ascend(func(k K, v V) bool { buf = append(buf, entry[K, V]{key: k, obj: v}); return true })
	insertDense(to, buf)
	clear(buf) // let go of the objects
	return to, buf[:0]
}

// insertDense inserts sorted entries into an empty tree so that its nodes end nearly full:
// every other entry first, which leaves each leaf half full, then the others, which fill
// the leaves without splitting them (94 % of the nodes' room is used, against 48 % for
// inserts in order).
func insertDense[K comparable, V any](t *btree.Tree[K, V], sorted []entry[K, V]) {
	for i := 0; i < len(sorted); i += 2 {
		t.Set(sorted[i].key, sorted[i].obj)
	}
	for i := 1; i < len(sorted); i += 2 {
		t.Set(sorted[i].key, sorted[i].obj)
	}
}

// ObjectError is an error about one object: its key function, an index function or the
// transform failed. The object is skipped; the informer keeps running.
type ObjectError struct {
	// Informer names the informer (Options.Name).
	Informer string
	// Op is what failed: "key", "index <name>" or "transform".
	Op string
	// Key is the object's key, when known; otherwise Object is the object itself.
	Key any
	// Object is the object, when its key is not known.
	Object any
	// Err is the function's error, or the panic it raised.
	Err error
}

// Error names the informer, the function and the object: by key when known.
func (e *ObjectError) Error() string {
	name := e.Informer
	if name == "" {
		name = "informer"
	}
	if e.Key != nil {
		return fmt.Sprintf("informer %q: %s of the object with key %v: %v (the object is skipped until it changes)", name, e.Op, e.Key, e.Err)
	}
	obj := fmt.Sprintf("%+v", e.Object)
	if len(obj) > 200 {
		obj = obj[:200] + "…"
	}
	return fmt.Sprintf("informer %q: %s of object %s: %v (the object is skipped until it changes)", name, e.Op, obj, e.Err)
}

// Unwrap returns the function's error.
func (e *ObjectError) Unwrap() error { return e.Err }

// upsertLocked stores obj under key and updates every index. If an index function fails
// for obj nothing changes and the error is returned. pre, when valid, are obj's values.
func (s *store[K, V]) upsertLocked(key K, obj V, hint storeHint[V]) (old V, existed bool, err error) {
	vals, bounds := hint.vals, hint.ends
	if !s.current(hint) {
		// Compute every new value first, so that a failure leaves the store untouched.
		var stack [8]int32
		var oe *ObjectError
		vals, bounds, oe = s.set.Load().compute(s.scratch[:0], stack[:0], obj)
		s.scratch = vals[:0] // kept for the next call; vals stays valid until then
		if oe != nil {
			oe.Key = key
			return old, false, oe
		}
	}
	e := entry[K, V]{key: key, obj: obj}
	prevObj, existed := s.items.Set(key, obj)
	var start int32
	for i, ix := range s.indexes {
		newVals := vals[start:bounds[i]]
		start = bounds[i]
		if existed && ix.fn.one != nil {
			// A single-valued index holds the key under exactly one value: if that is the
			// new value, replacing the entry is the whole update, and the old object's
			// value need not be computed.
			if !s.insertIndexed(ix, newVals[0], e) {
				s.unindexOne(ix, key, prevObj, newVals)
			}
			continue
		}
		var kept []string
		if existed {
			kept = s.unindex(ix, key, prevObj, newVals)
		}
		stale := false
		for _, v := range newVals {
			if !s.insertIndexed(ix, v, e) && slices.Contains(kept, v) {
				stale = true // the old object's values were not where they were computed to be
			}
		}
		if stale {
			s.purge(ix, key, newVals)
		}
	}
	return prevObj, existed, nil
}

// unindex removes key's entries computed from old, except those whose value is in keep,
// and returns the values it left in place. If the index function now fails for old, or
// gives a value whose bucket does not hold key (it is not a pure function of the object),
// it scans the index instead, rather than leave entries behind.
func (s *store[K, V]) unindex(ix *storeIndex[K, V], key K, old V, keep []string) (kept []string) {
	oldVals, err := ix.fn.values(s.oldScratch[:0], old)
	s.oldScratch = oldVals[:0]
	if err != nil {
		s.purge(ix, key, keep)
		return nil
	}
	for i, v := range oldVals {
		if slices.Contains(keep, v) || slices.Contains(oldVals[:i], v) {
			continue
		}
		if !s.removeIndexed(ix, v, key) {
			s.purge(ix, key, keep)
			return nil
		}
	}
	n := 0
	for _, v := range oldVals {
		if slices.Contains(keep, v) {
			oldVals[n] = v
			n++
		}
	}
	return oldVals[:n]
}

// unindexOne removes key's entry from a single-valued index after it was indexed under
// newVals, where it was not before: from the bucket of old's value, or, if the index
// function is not a pure function of the object, wherever it is.
func (s *store[K, V]) unindexOne(ix *storeIndex[K, V], key K, old V, newVals []string) {
	oldVals, err := ix.fn.values(s.oldScratch[:0], old)
	s.oldScratch = oldVals[:0]
	if err != nil || len(oldVals) != 1 || slices.Contains(newVals, oldVals[0]) || !s.removeIndexed(ix, oldVals[0], key) {
		s.purge(ix, key, newVals)
	}
}

// purge removes key from every bucket of ix whose value is not in keep.
func (s *store[K, V]) purge(ix *storeIndex[K, V], key K, keep []string) {
	var stale []string
	ix.buckets.Ascend(func(value string, b bucket[K, V]) bool {
		if slices.Contains(keep, value) {
			return true
		}
		if b.tree == nil && s.compare(b.one.key, key) == 0 || b.tree != nil && b.tree.entries.Has(key) {
			stale = append(stale, value)
		}
		return true
	})
	for _, v := range stale {
		s.removeIndexed(ix, v, key)
	}
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
	useHint := s.current(hint)
	var start int32
	for i, ix := range s.indexes {
		if useHint {
			vals := hint.vals[start:hint.ends[i]]
			start = hint.ends[i]
			if ix.fn.one != nil && len(vals) == 1 && s.removeIndexed(ix, vals[0], key) {
				continue
			}
		}
		s.unindex(ix, key, prevObj, nil)
	}
	return prevObj, true
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

// generation counts the store's write batches: a reader that saw the same generation saw
// the same state.
func (s *store[K, V]) generation() uint64 { return s.gen.Load() }

// snapshot returns the current state. It takes no lock when the newest snapshot is of the
// newest state, which is so while readers keep reading (publishLocked makes it); otherwise
// it waits for the writer's current batch and clones the trees.
func (s *store[K, V]) snapshot() *Snapshot[K, V] {
	// The snapshot before the generation: the writer stores them in the other order, so
	// a snapshot at least as new as the generation read is of the newest state published.
	if sn := s.snap.Load(); sn != nil && sn.gen >= s.gen.Load() {
		if !s.reading.Load() {
			s.reading.Store(true)
		}
		return sn
	}
	s.reading.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *store[K, V]) snapshotLocked() *Snapshot[K, V] {
	gen := s.gen.Load()
	if sn := s.snap.Load(); sn != nil && sn.gen == gen {
		return sn
	}
	return s.makeSnapshot(gen)
}

// makeSnapshot clones the current state as the snapshot of generation gen and makes it
// the newest. The writer's lock must be held.
func (s *store[K, V]) makeSnapshot(gen uint64) *Snapshot[K, V] {
	s.epoch++ // the buckets' trees are now shared with this snapshot
	sn := &Snapshot[K, V]{
		compare:  s.compare,
		gen:      gen,
		revision: s.rev,
		exact:    s.exact,
		items:    s.items.Clone(),
		indexes:  make(map[string]snapIndex[K, V], len(s.indexes)),
	}
	for _, ix := range s.indexes {
		sn.indexes[ix.name] = snapIndex[K, V]{fn: ix.fn, buckets: ix.buckets.Clone()}
	}
	s.snap.Store(sn)
	return sn
}

// Snapshot is an immutable point-in-time state of an informer's cache. Holding one costs
// nothing until the writer changes the cache; from then on the writer copies the tree nodes
// it touches (copy-on-write), so a snapshot held for long pins the memory of the state it
// shows. It never blocks the writer. It is safe for concurrent use.
type Snapshot[K comparable, V any] struct {
	compare  func(a, b K) int
	gen      uint64
	revision string
	exact    bool // the state is exactly the source's at revision (see store.exact)
	items    *btree.Tree[K, V]
	indexes  map[string]snapIndex[K, V]
}

type snapIndex[K comparable, V any] struct {
	fn      Index[V]
	buckets *btree.Tree[string, bucket[K, V]]
}

// bucket returns the entries indexed under value.
func (ix snapIndex[K, V]) bucket(value string) (bucket[K, V], bool) {
	return ix.buckets.Get(value)
}

var _ Reader[string, int] = (*Snapshot[string, int])(nil)

// Revision returns the revision of the source this state reflects ("" before the first list).
func (sn *Snapshot[K, V]) Revision() string { return sn.revision }

// Get returns the object stored under key.
func (sn *Snapshot[K, V]) Get(key K) (V, bool) {
	return sn.items.Get(key)
}

// Len returns the number of objects.
func (sn *Snapshot[K, V]) Len() int { return sn.items.Len() }

// All yields every object in key order.
func (sn *Snapshot[K, V]) All() iter.Seq2[K, V] {
	return sn.items.Ascend
}

// Range yields the (key, object) pairs whose key k satisfies from ≤ k < to, in key order.
func (sn *Snapshot[K, V]) Range(from, to K) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) { sn.items.AscendRange(from, to, yield) }
}

func (sn *Snapshot[K, V]) lookupIndex(name string) (snapIndex[K, V], error) {
	ix, ok := sn.indexes[name]
	if !ok {
		return ix, fmt.Errorf("%w: %q", ErrUnknownIndex, name)
	}
	return ix, nil
}

// ByIndex yields the (key, object) pairs indexed under value in the named index, in key
// order, without copying them: an index's bucket holds its objects, so the walk costs no
// lookup per object. It costs one lookup of value, a walk over the objects found and three
// small allocations (the iterator, and the loop's body and state that the compiler moves
// to the heap for a range over a function value), however many objects it yields. An
// unknown value yields nothing; an unknown index is ErrUnknownIndex, with an iterator
// that yields nothing (so a range over it never panics).
func (sn *Snapshot[K, V]) ByIndex(index, value string) (iter.Seq2[K, V], error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return func(func(K, V) bool) {}, err
	}
	b, ok := ix.bucket(value)
	if !ok {
		return func(func(K, V) bool) {}, nil
	}
	if b.tree == nil {
		one := b.one
		return func(yield func(K, V) bool) { yield(one.key, one.obj) }, nil
	}
	return b.tree.entries.Ascend, nil
}

// IndexValues yields every value present in the named index, in order. Values whose last
// object went away are not yielded. An unknown index is ErrUnknownIndex, with an iterator
// that yields nothing.
func (sn *Snapshot[K, V]) IndexValues(index string) (iter.Seq[string], error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return func(func(string) bool) {}, err
	}
	return func(yield func(string) bool) {
		ix.buckets.Ascend(func(value string, _ bucket[K, V]) bool { return yield(value) })
	}, nil
}

// WithPrefix yields the (key, object) pairs of a string-keyed reader whose key starts
// with prefix, in key order, as one Range: keys must be in the natural order of strings
// (the default; not a custom Options.CompareKeys).
func WithPrefix[V any](r Reader[string, V], prefix string) iter.Seq2[string, V] {
	// The end is the least string above every string that starts with prefix: prefix
	// with its last byte below 0xff incremented, and what follows it dropped.
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] < 0xff {
			end := prefix[:i] + string([]byte{prefix[i] + 1})
			return r.Range(prefix, end)
		}
	}
	// "" or only 0xff bytes: every key from prefix on starts with it.
	return func(yield func(string, V) bool) {
		for k, v := range r.All() {
			if strings.HasPrefix(k, prefix) && !yield(k, v) {
				return
			}
		}
	}
}

// defaultCompare returns the natural order of K when K's underlying type is a string,
// integer or floating-point type (any cmp.Ordered type, named ones such as
// `type ID int64` included), or a struct of such fields (compared field by field in
// declaration order, as a tuple), and false otherwise: the user must then give
// Options.CompareKeys.
func defaultCompare[K comparable]() (func(a, b K) int, bool) {
	switch reflect.TypeFor[K]().Kind() {
	case reflect.Struct:
		return structCompare[K]()
	case reflect.String:
		return func(a, b K) int { return strings.Compare(asString(&a), asString(&b)) }, true
	case reflect.Int:
		return orderedAs[K, int](), true
	case reflect.Int8:
		return orderedAs[K, int8](), true
	case reflect.Int16:
		return orderedAs[K, int16](), true
	case reflect.Int32:
		return orderedAs[K, int32](), true
	case reflect.Int64:
		return orderedAs[K, int64](), true
	case reflect.Uint:
		return orderedAs[K, uint](), true
	case reflect.Uint8:
		return orderedAs[K, uint8](), true
	case reflect.Uint16:
		return orderedAs[K, uint16](), true
	case reflect.Uint32:
		return orderedAs[K, uint32](), true
	case reflect.Uint64:
		return orderedAs[K, uint64](), true
	case reflect.Uintptr:
		return orderedAs[K, uintptr](), true
	case reflect.Float32:
		return orderedAs[K, float32](), true
	case reflect.Float64:
		return orderedAs[K, float64](), true
	}
	return nil, false
}

// structCompare orders a struct K whose fields are all of ordered kinds, field by field.
// A struct of strings only (such as struct{ Namespace, Name string }) compares them with no
// call per field.
func structCompare[K comparable]() (func(a, b K) int, bool) {
	if offs, ok := stringFields[K](); ok {
		return func(a, b K) int {
			pa, pb := unsafe.Pointer(&a), unsafe.Pointer(&b)
			for _, off := range offs {
				if c := strings.Compare(*(*string)(unsafe.Add(pa, off)), *(*string)(unsafe.Add(pb, off))); c != 0 {
					return c
				}
			}
			return 0
		}, true
	}
	t := reflect.TypeFor[K]()
	type field struct {
		off uintptr
		cmp func(a, b unsafe.Pointer) int
	}
	fields := make([]field, t.NumField())
	for i := range fields {
		f := t.Field(i)
		if fields[i] = (field{f.Offset, fieldCompare(f.Type.Kind())}); fields[i].cmp == nil {
			return nil, false
		}
	}
	return func(a, b K) int {
		pa, pb := unsafe.Pointer(&a), unsafe.Pointer(&b)
		for _, f := range fields {
			if c := f.cmp(unsafe.Add(pa, f.off), unsafe.Add(pb, f.off)); c != 0 {
				return c
			}
		}
		return 0
	}, true
}

// stringFields returns the offsets of K's fields when K is a struct of strings only.
func stringFields[K comparable]() ([]uintptr, bool) {
	t := reflect.TypeFor[K]()
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	offs := make([]uintptr, t.NumField())
	for i := range offs {
		f := t.Field(i)
		if f.Type.Kind() != reflect.String {
			return nil, false
		}
		offs[i] = f.Offset
	}
	return offs, true
}

// fieldCompare compares two values of an ordered kind through pointers; nil for any other
// kind.
func fieldCompare(k reflect.Kind) func(a, b unsafe.Pointer) int {
	switch k {
	case reflect.String:
		return pointedCompare[string]
	case reflect.Int:
		return pointedCompare[int]
	case reflect.Int8:
		return pointedCompare[int8]
	case reflect.Int16:
		return pointedCompare[int16]
	case reflect.Int32:
		return pointedCompare[int32]
	case reflect.Int64:
		return pointedCompare[int64]
	case reflect.Uint:
		return pointedCompare[uint]
	case reflect.Uint8:
		return pointedCompare[uint8]
	case reflect.Uint16:
		return pointedCompare[uint16]
	case reflect.Uint32:
		return pointedCompare[uint32]
	case reflect.Uint64:
		return pointedCompare[uint64]
	case reflect.Uintptr:
		return pointedCompare[uintptr]
	case reflect.Float32:
		return pointedCompare[float32]
	case reflect.Float64:
		return pointedCompare[float64]
	}
	return nil
}

func pointedCompare[T cmp.Ordered](a, b unsafe.Pointer) int { return cmp.Compare(*(*T)(a), *(*T)(b)) }

// isString reports whether K's underlying type is string.
func isString[K comparable]() bool { return reflect.TypeFor[K]().Kind() == reflect.String }

// asString reads a K whose underlying type is string, without boxing.
func asString[K comparable](k *K) string { return *(*string)(unsafe.Pointer(k)) }

// orderedAs compares two Ks whose underlying type is T, without boxing.
func orderedAs[K comparable, T cmp.Ordered]() func(a, b K) int {
	return func(a, b K) int {
		return cmp.Compare(*(*T)(unsafe.Pointer(&a)), *(*T)(unsafe.Pointer(&b)))
	}
}
