package informer

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/google/btree"
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

// Indexers names the indexes of a store.
type Indexers[V any] map[string]Index[V]

// Errors of the read API.
var (
	// ErrUnknownIndex is returned by index queries that name an index that does not exist.
	ErrUnknownIndex = errors.New("informer: no such index")
	// ErrIndexExists is returned by AddIndexers for a name already in use.
	ErrIndexExists = errors.New("informer: index already exists")
)

// Reader is the typed, read-only view of an informer's cache. Every method reads one
// consistent point-in-time state; objects are returned as stored (they are shared with
// every other reader and handler: do not mutate them).
type Reader[K comparable, V any] interface {
	// Get returns the object stored under key.
	Get(key K) (V, bool)
	// Len returns the number of objects.
	Len() int
	// All yields every object in key order.
	All() iter.Seq2[K, V]
	// Range yields the objects whose key k satisfies from ≤ k < to, in key order.
	Range(from, to K) iter.Seq2[K, V]
	// Keys returns every key in key order, in a new slice.
	Keys() []K
	// List returns every object in key order, in a new slice.
	List() []V
	// ByIndex returns the objects indexed under value in the named index, in key order.
	ByIndex(index, value string) ([]V, error)
	// IndexKeys returns the keys indexed under value in the named index, in key order.
	IndexKeys(index, value string) ([]K, error)
	// IndexValues returns every value present in the named index, in order.
	IndexValues(index string) ([]string, error)
	// Index returns the objects that share at least one value with obj in the named index.
	Index(index string, obj V) ([]V, error)
}

type entry[K comparable, V any] struct {
	key K
	obj V
}

// indexEntry is one (value, key) pair of an index, ordered by value then key.
type indexEntry[K comparable] struct {
	value string
	key   K
}

type storeIndex[K comparable, V any] struct {
	name string
	fn   Index[V]
	tree *btree.BTreeG[indexEntry[K]]
}

// btreeDegree trades node size against depth. Measured on the pipeline benchmark (50,000
// objects, two indexes), the cache's overhead per object was 166 bytes at degree 32, 153 at
// 64 and 139 at 48, whose node slices fit the allocator's size classes best.
const btreeDegree = 48

// store is the indexed cache. One writer (the informer's processing goroutine) changes it
// under mu; readers read immutable snapshots made on demand with btree.Clone, an O(1)
// copy-on-write copy, so a reader never holds a lock the writer needs for more than that.
type store[K comparable, V any] struct {
	compare func(a, b K) int

	mu      sync.Mutex // held by the writer for a batch, and by a reader making a snapshot
	items   *btree.BTreeG[entry[K, V]]
	indexes []*storeIndex[K, V]
	gen     atomic.Uint64 // bumped after every write batch
	rev     string        // revision the state reflects, set with the batch

	snap       atomic.Pointer[Snapshot[K, V]]
	scratch    []string // writer-only buffers for index values
	oldScratch []string
}

func newStore[K comparable, V any](compare func(a, b K) int, indexers Indexers[V]) (*store[K, V], error) {
	s := &store[K, V]{compare: compare}
	if isString[K]() {
		s.items = btree.NewG(btreeDegree, func(a, b entry[K, V]) bool { return asString(&a.key) < asString(&b.key) })
	} else {
		s.items = btree.NewG(btreeDegree, func(a, b entry[K, V]) bool { return compare(a.key, b.key) < 0 })
	}
	if err := s.addIndexersLocked(indexers); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *store[K, V]) newIndexTree() *btree.BTreeG[indexEntry[K]] {
	compare := s.compare
	if isString[K]() {
		// The common case, without an indirect call per comparison.
		return btree.NewG(btreeDegree, func(a, b indexEntry[K]) bool {
			if c := strings.Compare(a.value, b.value); c != 0 {
				return c < 0
			}
			return asString(&a.key) < asString(&b.key)
		})
	}
	return btree.NewG(btreeDegree, func(a, b indexEntry[K]) bool {
		if c := strings.Compare(a.value, b.value); c != 0 {
			return c < 0
		}
		return compare(a.key, b.key) < 0
	})
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
		si := &storeIndex[K, V]{name: name, fn: ix, tree: s.newIndexTree()}
		var err error
		s.items.Ascend(func(e entry[K, V]) bool {
			var vals []string
			vals, err = ix.values(s.scratch[:0], e.obj)
			if err != nil {
				err = &ObjectError{Op: "index " + name, Key: e.key, Err: err}
				return false
			}
			for _, v := range vals {
				si.tree.ReplaceOrInsert(indexEntry[K]{value: v, key: e.key})
			}
			return true
		})
		if err != nil {
			return err
		}
		added = append(added, si)
	}
	s.indexes = append(s.indexes, added...)
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

// ObjectError is an error about one object: its key function, an index function or the
// transform failed. The object is skipped; the informer keeps running.
type ObjectError struct {
	Op  string // "key", "index <name>", "transform"
	Key any    // the key, when known
	Err error
}

func (e *ObjectError) Error() string {
	if e.Key != nil {
		return fmt.Sprintf("informer: %s of object %v: %v", e.Op, e.Key, e.Err)
	}
	return fmt.Sprintf("informer: %s: %v", e.Op, e.Err)
}

func (e *ObjectError) Unwrap() error { return e.Err }

// upsertLocked stores obj under key and updates every index. If an index function fails
// for obj nothing changes and the error is returned.
func (s *store[K, V]) upsertLocked(key K, obj V) (old V, existed bool, err error) {
	// Compute every new value first, so that a failure leaves the store untouched.
	vals := s.scratch[:0]
	var stack [8]int
	bounds := stack[:0]
	for _, ix := range s.indexes {
		vals, err = ix.fn.values(vals, obj)
		if err != nil {
			s.scratch = vals[:0]
			return old, false, &ObjectError{Op: "index " + ix.name, Key: key, Err: err}
		}
		bounds = append(bounds, len(vals))
	}
	prev, existed := s.items.ReplaceOrInsert(entry[K, V]{key: key, obj: obj})
	start := 0
	for i, ix := range s.indexes {
		newVals := vals[start:bounds[i]]
		start = bounds[i]
		var kept []string
		if existed {
			kept = s.unindex(ix, key, prev.obj, newVals)
		}
	insert:
		for _, v := range newVals {
			for _, k := range kept {
				if k == v {
					continue insert // already indexed under v
				}
			}
			ix.tree.ReplaceOrInsert(indexEntry[K]{value: v, key: key})
		}
	}
	s.scratch = vals[:0]
	return prev.obj, existed, nil
}

// unindex removes key's entries computed from old, except those whose value is in keep,
// and returns the values it left in place. If the index function now fails for old, it
// scans the index instead.
func (s *store[K, V]) unindex(ix *storeIndex[K, V], key K, old V, keep []string) (kept []string) {
	oldVals, err := ix.fn.values(s.oldScratch[:0], old)
	s.oldScratch = oldVals[:0]
	if err != nil {
		// The function gave values for old when it was stored but fails now; find the
		// entries the slow way rather than leave them behind.
		var stale []indexEntry[K]
		ix.tree.Ascend(func(e indexEntry[K]) bool {
			if s.compare(e.key, key) == 0 {
				stale = append(stale, e)
			}
			return true
		})
		for _, e := range stale {
			ix.tree.Delete(e)
		}
		return nil
	}
	n := 0
outer:
	for _, v := range oldVals {
		for _, k := range keep {
			if k == v {
				oldVals[n] = v
				n++
				continue outer
			}
		}
		ix.tree.Delete(indexEntry[K]{value: v, key: key})
	}
	return oldVals[:n]
}

// deleteLocked removes key and its index entries.
func (s *store[K, V]) deleteLocked(key K) (old V, existed bool) {
	prev, existed := s.items.Delete(entry[K, V]{key: key})
	if !existed {
		return old, false
	}
	for _, ix := range s.indexes {
		s.unindex(ix, key, prev.obj, nil)
	}
	return prev.obj, true
}

// publishLocked records that a write batch is complete and the state reflects rev.
func (s *store[K, V]) publishLocked(rev string) {
	if rev != "" {
		s.rev = rev
	}
	s.gen.Add(1)
}

// snapshot returns the current state. It is O(1) when nothing changed since the last
// snapshot; otherwise it waits for the writer's current batch and clones the trees.
func (s *store[K, V]) snapshot() *Snapshot[K, V] {
	if sn := s.snap.Load(); sn != nil && sn.gen == s.gen.Load() {
		return sn
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *store[K, V]) snapshotLocked() *Snapshot[K, V] {
	gen := s.gen.Load()
	if sn := s.snap.Load(); sn != nil && sn.gen == gen {
		return sn
	}
	sn := &Snapshot[K, V]{
		compare:  s.compare,
		gen:      gen,
		revision: s.rev,
		items:    s.items.Clone(),
		indexes:  make(map[string]snapIndex[K, V], len(s.indexes)),
	}
	for _, ix := range s.indexes {
		sn.indexes[ix.name] = snapIndex[K, V]{fn: ix.fn, tree: ix.tree.Clone()}
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
	items    *btree.BTreeG[entry[K, V]]
	indexes  map[string]snapIndex[K, V]
}

type snapIndex[K comparable, V any] struct {
	fn   Index[V]
	tree *btree.BTreeG[indexEntry[K]]
}

var _ Reader[string, int] = (*Snapshot[string, int])(nil)

// Revision returns the revision of the source this state reflects ("" before the first list).
func (sn *Snapshot[K, V]) Revision() string { return sn.revision }

// Get returns the object stored under key.
func (sn *Snapshot[K, V]) Get(key K) (V, bool) {
	e, ok := sn.items.Get(entry[K, V]{key: key})
	return e.obj, ok
}

// Len returns the number of objects.
func (sn *Snapshot[K, V]) Len() int { return sn.items.Len() }

// All yields every object in key order.
func (sn *Snapshot[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		sn.items.Ascend(func(e entry[K, V]) bool { return yield(e.key, e.obj) })
	}
}

// Range yields the objects whose key k satisfies from ≤ k < to, in key order.
func (sn *Snapshot[K, V]) Range(from, to K) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		sn.items.AscendRange(entry[K, V]{key: from}, entry[K, V]{key: to}, func(e entry[K, V]) bool {
			return yield(e.key, e.obj)
		})
	}
}

// Ascend yields the objects whose key is ≥ from, in key order.
func (sn *Snapshot[K, V]) Ascend(from K) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		sn.items.AscendGreaterOrEqual(entry[K, V]{key: from}, func(e entry[K, V]) bool {
			return yield(e.key, e.obj)
		})
	}
}

// Keys returns every key in key order, in a new slice.
func (sn *Snapshot[K, V]) Keys() []K {
	out := make([]K, 0, sn.items.Len())
	sn.items.Ascend(func(e entry[K, V]) bool { out = append(out, e.key); return true })
	return out
}

// List returns every object in key order, in a new slice.
func (sn *Snapshot[K, V]) List() []V {
	out := make([]V, 0, sn.items.Len())
	sn.items.Ascend(func(e entry[K, V]) bool { out = append(out, e.obj); return true })
	return out
}

func (sn *Snapshot[K, V]) lookupIndex(name string) (snapIndex[K, V], error) {
	ix, ok := sn.indexes[name]
	if !ok {
		return ix, fmt.Errorf("%w: %q", ErrUnknownIndex, name)
	}
	return ix, nil
}

// seekValue yields, in order, the entries whose value is ≥ value, until yield returns
// false. The pivot (value, zero key) is not necessarily below every key of value (an
// integer key may be negative, a custom order may put the zero key anywhere), so the
// entries of value that sort before it are found walking backwards first; for string keys
// that walk finds nothing or the one entry with the empty key.
func seekValue[K comparable](tree *btree.BTreeG[indexEntry[K]], value string, yield func(indexEntry[K]) bool) {
	pivot := indexEntry[K]{value: value}
	var before []indexEntry[K]
	tree.DescendLessOrEqual(pivot, func(e indexEntry[K]) bool {
		if e.value != value {
			return false
		}
		before = append(before, e)
		return true
	})
	for i := len(before) - 1; i >= 0; i-- {
		if !yield(before[i]) {
			return
		}
	}
	skip := len(before) > 0 // the pivot itself, if stored, was yielded above
	tree.AscendGreaterOrEqual(pivot, func(e indexEntry[K]) bool {
		if skip {
			skip = false
			if e == before[0] {
				return true
			}
		}
		return yield(e)
	})
}

// eachIndexed calls fn for every key indexed under value, in key order.
func eachIndexed[K comparable](tree *btree.BTreeG[indexEntry[K]], value string, fn func(K)) {
	seekValue(tree, value, func(e indexEntry[K]) bool {
		if e.value != value {
			return false
		}
		fn(e.key)
		return true
	})
}

// ByIndex returns the objects indexed under value in the named index, in key order, in a
// new slice. An unknown value gives an empty result (I-16).
func (sn *Snapshot[K, V]) ByIndex(index, value string) ([]V, error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return nil, err
	}
	var out []V
	eachIndexed(ix.tree, value, func(k K) {
		if obj, ok := sn.Get(k); ok {
			out = append(out, obj)
		}
	})
	return out, nil
}

// IndexKeys returns the keys indexed under value in the named index, in key order (I-18).
func (sn *Snapshot[K, V]) IndexKeys(index, value string) ([]K, error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return nil, err
	}
	var out []K
	eachIndexed(ix.tree, value, func(k K) { out = append(out, k) })
	return out, nil
}

// IndexValues returns every value present in the named index, in order. Values whose last
// object went away are not reported (I-9, I-17).
func (sn *Snapshot[K, V]) IndexValues(index string) ([]string, error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return nil, err
	}
	var out []string
	next := ""
	for {
		found := false
		seekValue(ix.tree, next, func(e indexEntry[K]) bool {
			out = append(out, e.value)
			found = true
			return false
		})
		if !found {
			return out, nil
		}
		// value+"\x00" is the smallest string greater than value: seek the next value.
		next = out[len(out)-1] + "\x00"
	}
}

// Index returns the objects that share at least one value with obj in the named index,
// without duplicates, in key order (I-15).
func (sn *Snapshot[K, V]) Index(index string, obj V) ([]V, error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return nil, err
	}
	vals, err := ix.fn.values(nil, obj)
	if err != nil {
		return nil, &ObjectError{Op: "index " + index, Err: err}
	}
	if len(vals) == 1 {
		return sn.ByIndex(index, vals[0])
	}
	seen := make(map[K]struct{})
	var keys []K
	for _, v := range vals {
		eachIndexed(ix.tree, v, func(k K) {
			if _, dup := seen[k]; !dup {
				seen[k] = struct{}{}
				keys = append(keys, k)
			}
		})
	}
	sort.Slice(keys, func(i, j int) bool { return sn.compare(keys[i], keys[j]) < 0 })
	out := make([]V, 0, len(keys))
	for _, k := range keys {
		if o, ok := sn.Get(k); ok {
			out = append(out, o)
		}
	}
	return out, nil
}

// WithPrefix yields the objects of a string-keyed reader whose key starts with prefix, in
// key order.
func WithPrefix[V any](sn *Snapshot[string, V], prefix string) iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for k, v := range sn.Ascend(prefix) {
			if !strings.HasPrefix(k, prefix) || !yield(k, v) {
				return
			}
		}
	}
}

// defaultCompare returns the natural order of K when K is a string or an integer type,
// and false otherwise (the user must then give Options.CompareKeys).
func defaultCompare[K comparable]() (func(a, b K) int, bool) {
	var zero K
	switch any(zero).(type) {
	case string:
		return func(a, b K) int {
			return strings.Compare(*(*string)(unsafe.Pointer(&a)), *(*string)(unsafe.Pointer(&b)))
		}, true
	case int:
		return orderedAs[K, int](), true
	case int64:
		return orderedAs[K, int64](), true
	case int32:
		return orderedAs[K, int32](), true
	case uint:
		return orderedAs[K, uint](), true
	case uint64:
		return orderedAs[K, uint64](), true
	case uint32:
		return orderedAs[K, uint32](), true
	}
	return nil, false
}

func isString[K comparable]() bool {
	var zero K
	_, ok := any(zero).(string)
	return ok
}

// asString reads a K whose dynamic type is string, without boxing.
func asString[K comparable](k *K) string { return *(*string)(unsafe.Pointer(k)) }

// orderedAs compares two Ks whose dynamic type is exactly T, without boxing.
func orderedAs[K comparable, T cmp.Ordered]() func(a, b K) int {
	return func(a, b K) int {
		return cmp.Compare(*(*T)(unsafe.Pointer(&a)), *(*T)(unsafe.Pointer(&b)))
	}
}
