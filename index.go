package informer

import (
	"fmt"
	"iter"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/informer-go/informer/internal/btree"
)

// This file is the cache's indexes: each index's tree of buckets that the store writes
// and snapshots read. The index API users write is in indexer.go.

// indexSet is the store's index functions in order, replaced (never changed) when indexes
// are added: values computed with one set are valid for the store while it is current.
type indexSet[V any] struct {
	fns   []Index[V]
	names []string
}

// Compute appends obj's values in every index to vals, and to ends the end of each index's
// values, counted from where obj's values start. If an index function fails it returns
// the error, without the object's key.
func (set *indexSet[V]) Compute(vals []string, ends []int32, obj V) ([]string, []int32, *ObjectError) {
	start := len(vals)
	for i, fn := range set.fns {
		var err error
		if vals, err = fn.AppendValues(vals, obj); err != nil {
			return vals, ends, &ObjectError{Op: "index " + set.names[i], Err: err}
		}
		ends = append(ends, int32(len(vals)-start))
	}
	return vals, ends, nil
}

// Lookup returns the index of that name, or an error matching ErrUnknownIndex that names
// the indexes there are.
func (set *indexSet[V]) Lookup(name string) (Index[V], error) {
	if set != nil {
		if i := slices.Index(set.names, name); i >= 0 {
			return set.fns[i], nil
		}
	}
	has := "none"
	if set != nil && len(set.names) > 0 {
		has = strings.Join(set.names, ", ")
	}
	return Index[V]{}, fmt.Errorf("%w: %q (the informer's indexes: %s)", ErrUnknownIndex, name, has)
}

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

// storeIndex is one index of the store, written by the store's writer under its lock.
type storeIndex[K comparable, V any] struct {
	kit     *treeKit[K, V]
	scratch []string // the writer's buffer for an old object's values
	name    string
	fn      Index[V]
	buckets *btree.Tree[string, bucket[K, V]] // by value; a value with no object has no bucket
	// trees has the tree of every bucket that has one, by value: the writer's way to a
	// bucket of several entries without a search among the buckets. A value missing here
	// has an inline bucket or none.
	trees map[string]*bucketTree[K, V]
}

type snapIndex[K comparable, V any] struct {
	fn      Index[V]
	buckets *btree.Tree[string, bucket[K, V]]
}

// objects yields the entries indexed under value, in key order, without copying them: a
// bucket holds its objects, so the walk costs no lookup per object. Nothing for an unknown
// value.
func (ix snapIndex[K, V]) objects(value string) iter.Seq2[K, V] {
	b, ok := ix.buckets.Get(value)
	if !ok {
		return func(func(K, V) bool) {}
	}
	if b.tree == nil {
		one := b.one
		return func(yield func(K, V) bool) { yield(one.key, one.obj) }
	}
	return b.tree.entries.Ascend
}

// values yields every value that has a bucket, in order.
func (ix snapIndex[K, V]) values() iter.Seq[string] {
	return func(yield func(string) bool) {
		ix.buckets.Ascend(func(value string, _ bucket[K, V]) bool { return yield(value) })
	}
}

// snapIndexes are the indexes of a snapshot, by name.
type snapIndexes[K comparable, V any] map[string]snapIndex[K, V]

// ByIndex yields the entries indexed under value in the named index (see
// Snapshot.ByIndex): nothing for an unknown value; for an unknown index ErrUnknownIndex,
// with an iterator that yields nothing.
func (xs snapIndexes[K, V]) ByIndex(index, value string) (iter.Seq2[K, V], error) {
	ix, ok := xs[index]
	if !ok {
		return func(func(K, V) bool) {}, fmt.Errorf("%w: %q", ErrUnknownIndex, index)
	}
	return ix.objects(value), nil
}

// IndexValues yields every value of the named index that has a bucket, in order; for an
// unknown index ErrUnknownIndex, with an iterator that yields nothing.
func (xs snapIndexes[K, V]) IndexValues(index string) (iter.Seq[string], error) {
	ix, ok := xs[index]
	if !ok {
		return func(func(string) bool) {}, fmt.Errorf("%w: %q", ErrUnknownIndex, index)
	}
	return ix.values(), nil
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

func (ix *storeIndex[K, V]) newBucketTree(a, b entry[K, V]) *bucketTree[K, V] {
	t := &bucketTree[K, V]{entries: ix.kit.NewTree(bucketDegree), epoch: ix.kit.Epoch()}
	t.entries.Set(a.key, a.obj)
	t.entries.Set(b.key, b.obj)
	return t
}

func newBuckets[K comparable, V any]() *btree.Tree[string, bucket[K, V]] {
	return btree.New[string, bucket[K, V]](btreeDegree, btree.ByString[string](), nil)
}

// Insert indexes obj under value by key and reports whether the key was indexed there
// already (its entry is replaced).
func (ix *storeIndex[K, V]) Insert(value string, key K, obj V) bool {
	e := entry[K, V]{key: key, obj: obj}
	if t, ok := ix.trees[value]; ok {
		_, found := ix.writable(value, t).Set(e.key, e.obj)
		return found
	}
	// An inline bucket or none: one write instead of a lookup and a write, undone in the
	// rare case that the bucket holds another key.
	prev, ok := ix.buckets.Set(value, bucket[K, V]{one: e})
	if !ok || ix.kit.Compare(prev.one.key, e.key) == 0 {
		return ok
	}
	t := ix.newBucketTree(prev.one, e)
	ix.trees[value] = t
	ix.buckets.Set(value, bucket[K, V]{tree: t})
	return false
}

// Remove removes key from value's bucket, and the bucket if it is left empty.
// It reports whether key was there.
func (ix *storeIndex[K, V]) Remove(value string, key K) bool {
	t, ok := ix.trees[value]
	if !ok {
		b, ok := ix.buckets.Get(value)
		if !ok || ix.kit.Compare(b.one.key, key) != 0 {
			return false
		}
		ix.buckets.Delete(value)
		return true
	}
	entries := ix.writable(value, t)
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
func (ix *storeIndex[K, V]) writable(value string, t *bucketTree[K, V]) *btree.Tree[K, V] {
	if t.epoch == ix.kit.Epoch() {
		return t.entries
	}
	// Clone also gives the shared tree a new copy-on-write context, a field that readers
	// of the snapshots holding that tree never read.
	t = &bucketTree[K, V]{entries: t.entries.Clone(), epoch: ix.kit.Epoch()}
	ix.trees[value] = t
	ix.buckets.Set(value, bucket[K, V]{tree: t})
	return t.entries
}

// unindex removes key's entries computed from old, except those whose value is in keep,
// and returns the values it left in place. If the index function now fails for old, or
// gives a value whose bucket does not hold key (it is not a pure function of the object),
// it scans the index instead, rather than leave entries behind.
func (ix *storeIndex[K, V]) unindex(key K, old V, keep []string) (kept []string) {
	oldVals, err := ix.fn.AppendValues(ix.scratch[:0], old)
	ix.scratch = oldVals[:0]
	if err != nil {
		ix.purge(key, keep)
		return nil
	}
	for i, v := range oldVals {
		if slices.Contains(keep, v) || slices.Contains(oldVals[:i], v) {
			continue
		}
		if !ix.Remove(v, key) {
			ix.purge(key, keep)
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
func (ix *storeIndex[K, V]) unindexOne(key K, old V, newVals []string) {
	oldVals, err := ix.fn.AppendValues(ix.scratch[:0], old)
	ix.scratch = oldVals[:0]
	if err != nil || len(oldVals) != 1 || slices.Contains(newVals, oldVals[0]) || !ix.Remove(oldVals[0], key) {
		ix.purge(key, newVals)
	}
}

// purge removes key from every bucket of ix whose value is not in keep.
func (ix *storeIndex[K, V]) purge(key K, keep []string) {
	var stale []string
	ix.buckets.Ascend(func(value string, b bucket[K, V]) bool {
		if slices.Contains(keep, value) {
			return true
		}
		if b.tree == nil && ix.kit.Compare(b.one.key, key) == 0 || b.tree != nil && b.tree.entries.Has(key) {
			stale = append(stale, value)
		}
		return true
	})
	for _, v := range stale {
		ix.Remove(v, key)
	}
}

// Compact rebuilds ix's tree of buckets and every bucket's tree, using buf.
func (ix *storeIndex[K, V]) Compact(buf []entry[K, V]) []entry[K, V] {
	var fresh *btree.Tree[K, V]
	var buckets []entry[string, bucket[K, V]]
	ix.buckets.Ascend(func(value string, b bucket[K, V]) bool {
		if b.tree != nil {
			fresh, buf = compactTree(b.tree.entries, ix.kit.NewTree(bucketDegree), buf)
			b.tree = &bucketTree[K, V]{entries: fresh, epoch: ix.kit.Epoch()}
			ix.trees[value] = b.tree
		}
		buckets = append(buckets, entry[string, bucket[K, V]]{key: value, obj: b})
		return true
	})
	ix.buckets = newBuckets[K, V]()
	insertDense(ix.buckets, buckets)
	return buf
}

// newStoreIndex returns an empty index named name of fn over the trees of kit.
func newStoreIndex[K comparable, V any](name string, fn Index[V], kit *treeKit[K, V]) (*storeIndex[K, V], error) {
	if fn.IsZero() {
		return nil, fmt.Errorf("informer: index %q has no function", name)
	}
	return &storeIndex[K, V]{kit: kit, name: name, fn: fn, buckets: newBuckets[K, V](), trees: map[string]*bucketTree[K, V]{}}, nil
}

// Name returns the index's name.
func (ix *storeIndex[K, V]) Name() string { return ix.name }

// Build indexes every object of items into the empty index, in key order, and compacts
// it; an index function failing for an object is the error.
func (ix *storeIndex[K, V]) Build(items *btree.Tree[K, V]) error {
	var err error
	items.Ascend(func(k K, obj V) bool {
		var vals []string
		vals, err = ix.fn.AppendValues(ix.scratch[:0], obj)
		if err != nil {
			err = &ObjectError{Op: "index " + ix.name, Key: k, Err: err}
			return false
		}
		for _, v := range vals {
			ix.Insert(v, k, obj)
		}
		return true
	})
	if err != nil {
		return err
	}
	ix.Compact(nil) // built in key order: half-full nodes
	return nil
}

// Update indexes obj, stored under key, under newVals, its values in this index; existed
// says that key held prev before, whose entries are moved.
func (ix *storeIndex[K, V]) Update(key K, prev, obj V, existed bool, newVals []string) {
	if existed && ix.fn.SingleValued() {
		// A single-valued index holds the key under exactly one value: if that is the
		// new value, replacing the entry is the whole update, and the old object's
		// value need not be computed.
		if !ix.Insert(newVals[0], key, obj) {
			ix.unindexOne(key, prev, newVals)
		}
		return
	}
	var kept []string
	if existed {
		kept = ix.unindex(key, prev, newVals)
	}
	stale := false
	for _, v := range newVals {
		if !ix.Insert(v, key, obj) && slices.Contains(kept, v) {
			stale = true // the old object's values were not where they were computed to be
		}
	}
	if stale {
		ix.purge(key, newVals)
	}
}

// Drop removes the entries of key, deleted with prev as its last state. vals, if not nil,
// are the index values of the object the delete carried: in a single-valued index the key
// is in exactly one bucket, and that of the event's object is where it is found unless
// the object changed since it was stored.
func (ix *storeIndex[K, V]) Drop(key K, prev V, vals []string) {
	if vals != nil && ix.fn.SingleValued() && len(vals) == 1 && ix.Remove(vals[0], key) {
		return
	}
	ix.unindex(key, prev, nil)
}

// Snap returns the index as a snapshot sees it: an O(1) clone of its tree of buckets.
func (ix *storeIndex[K, V]) Snap() snapIndex[K, V] {
	return snapIndex[K, V]{fn: ix.fn, buckets: ix.buckets.Clone()}
}

// storeIndexes are the store's indexes, in the order they were added, and the set of their
// functions, which any goroutine may read. The zero value has no index. The store's
// writer changes them under the store's lock.
type storeIndexes[K comparable, V any] struct {
	list []*storeIndex[K, V]
	set  atomic.Pointer[indexSet[V]]
}

// Add adds indexes, in the order of their names, over the trees of kit, and builds them
// from items. A name in use is ErrIndexExists; on an error nothing is added.
func (xs *storeIndexes[K, V]) Add(indexers Indexers[V], items *btree.Tree[K, V], kit *treeKit[K, V]) error {
	names := make([]string, 0, len(indexers))
	for name := range indexers {
		names = append(names, name)
	}
	sort.Strings(names)
	added := make([]*storeIndex[K, V], 0, len(names))
	for _, name := range names {
		if slices.ContainsFunc(xs.list, func(ix *storeIndex[K, V]) bool { return ix.name == name }) {
			return fmt.Errorf("%w: %q", ErrIndexExists, name)
		}
		ix, err := newStoreIndex(name, indexers[name], kit)
		if err != nil {
			return err
		}
		if err := ix.Build(items); err != nil {
			return err
		}
		added = append(added, ix)
	}
	xs.list = append(xs.list, added...)
	set := &indexSet[V]{}
	for _, ix := range xs.list {
		set.fns = append(set.fns, ix.fn)
		set.names = append(set.names, ix.name)
	}
	xs.set.Store(set)
	return nil
}

// Functions returns the current index functions, in order: values computed with them
// are valid while they are current.
func (xs *storeIndexes[K, V]) Functions() *indexSet[V] { return xs.set.Load() }

// Update indexes obj, stored under key, in every index (see storeIndex.Update): vals are
// its values computed with the current functions, ends[i] the end of index i's.
func (xs *storeIndexes[K, V]) Update(key K, prev, obj V, existed bool, vals []string, ends []int32) {
	var start int32
	for i, ix := range xs.list {
		ix.Update(key, prev, obj, existed, vals[start:ends[i]])
		start = ends[i]
	}
}

// Drop removes the entries of key, deleted with prev as its last state, from every index
// (see storeIndex.Drop). If hinted, vals and ends are the values of the object the delete
// carried, computed with the current functions, as for Update.
func (xs *storeIndexes[K, V]) Drop(key K, prev V, vals []string, ends []int32, hinted bool) {
	var start int32
	for i, ix := range xs.list {
		var mine []string
		if hinted {
			mine = vals[start:ends[i]]
			start = ends[i]
		}
		ix.Drop(key, prev, mine)
	}
}

// Snap returns every index as a snapshot sees it, by name.
func (xs *storeIndexes[K, V]) Snap() snapIndexes[K, V] {
	snaps := make(snapIndexes[K, V], len(xs.list))
	for _, ix := range xs.list {
		snaps[ix.name] = ix.Snap()
	}
	return snaps
}

// Compact rebuilds every index with nearly full nodes (see storeIndex.Compact), using buf.
func (xs *storeIndexes[K, V]) Compact(buf []entry[K, V]) {
	for _, ix := range xs.list {
		buf = ix.Compact(buf)
	}
}

// InsertDense indexes a page of new objects, objs[i] under keys[i], in every index, so
// that the trees' nodes end nearly full: each index's buckets take their entries (grouped
// by value, in key order) every other one first, then the others, and the index's tree of
// buckets takes the new values so, in the order the page first shows them. An object an
// index function fails for is reported and left out; ok[i] says that objs[i] was indexed.
func (xs *storeIndexes[K, V]) InsertDense(keys []K, objs []V, report func(error)) (ok []bool) {
	set, nix := xs.set.Load(), len(xs.list)
	var vals []string                       // a page's: not kept as the writer's scratch
	ends := make([]int32, 0, len(keys)*nix) // ends[i*nix+x]: the end of object i's values in index x, from begin[i]
	begin := make([]int32, len(keys))
	ok = make([]bool, len(keys))
	for i, obj := range objs {
		n, m := len(vals), len(ends)
		var oe *ObjectError
		if vals, ends, oe = set.Compute(vals, ends, obj); oe != nil {
			oe.Key = keys[i]
			report(oe)
			vals, ends = vals[:n], append(ends[:m], make([]int32, nix)...)
			continue
		}
		begin[i], ok[i] = int32(n), true
	}
	for x, ix := range xs.list {
		var order []string
		groups := make(map[string][]int32)
		for i := range keys {
			if !ok[i] {
				continue
			}
			from := begin[i]
			if x > 0 {
				from += ends[i*nix+x-1]
			}
			for _, v := range vals[from : begin[i]+ends[i*nix+x]] {
				g, seen := groups[v]
				if !seen {
					order = append(order, v)
				}
				groups[v] = append(g, int32(i))
			}
		}
		for start := range 2 {
			for j := start; j < len(order); j += 2 {
				v, g := order[j], groups[order[j]]
				for start := range 2 {
					for k := start; k < len(g); k += 2 {
						ix.Insert(v, keys[g[k]], objs[g[k]])
					}
				}
			}
		}
	}
	return ok
}

// NewItems returns an empty tree of the cache's objects by key.
func (t *treeKit[K, V]) NewItems() *btree.Tree[K, V] { return t.NewTree(btreeDegree) }

// Dense returns a copy of from with nearly full nodes (see compactTree), using buf.
func (t *treeKit[K, V]) Dense(from *btree.Tree[K, V], buf []entry[K, V]) (*btree.Tree[K, V], []entry[K, V]) {
	return compactTree(from, t.NewItems(), buf)
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
