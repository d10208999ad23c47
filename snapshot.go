package informer

import (
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/informer-go/informer/internal/btree"
)

// Reader is the typed, read-only view of an informer's cache, the role of client-go's
// Lister: *Informer and *Snapshot implement it, so a reconciler can be given either (and a
// test a fake). Every method reads one consistent point-in-time state (an Informer's
// methods each read the newest one; a Snapshot's always the same); objects are returned
// as stored: they are shared with every other reader and handler, do not mutate them.
type Reader[K comparable, V any] interface {
	// Get returns the object stored under key.
	Get(key K) (V, bool)
	// Len returns the number of objects.
	Len() int
	// All yields every object in key order.
	All() iter.Seq2[K, V]
	// Range yields the objects whose key k satisfies from ≤ k < to, in key order.
	Range(from, to K) iter.Seq2[K, V]
	// Ascend yields the objects whose key is ≥ from, in key order.
	Ascend(from K) iter.Seq2[K, V]
	// Keys returns every key in key order, in a new slice.
	Keys() []K
	// List returns every object in key order, in a new slice.
	List() []V
	// ByIndex returns the objects indexed under value in the named index, in key order.
	ByIndex(index, value string) ([]V, error)
	// ByIndexSeq yields the objects indexed under value in the named index, in key order,
	// without copying them to a slice.
	ByIndexSeq(index, value string) (iter.Seq2[K, V], error)
	// IndexKeys returns the keys indexed under value in the named index, in key order.
	IndexKeys(index, value string) ([]K, error)
	// IndexValues returns every value present in the named index, in order.
	IndexValues(index string) ([]string, error)
	// Index returns the objects that share at least one value with obj in the named index.
	Index(index string, obj V) ([]V, error)
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

func newSnapshot[K comparable, V any](compare func(a, b K) int, gen uint64, rev string, exact bool, items *btree.Tree[K, V], indexes map[string]snapIndex[K, V]) *Snapshot[K, V] {
	return &Snapshot[K, V]{compare: compare, gen: gen, revision: rev, exact: exact, items: items, indexes: indexes}
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

// Range yields the objects whose key k satisfies from ≤ k < to, in key order.
func (sn *Snapshot[K, V]) Range(from, to K) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) { sn.items.AscendRange(from, to, yield) }
}

// Ascend yields the objects whose key is ≥ from, in key order.
func (sn *Snapshot[K, V]) Ascend(from K) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) { sn.items.AscendFrom(from, yield) }
}

// Keys returns every key in key order, in a new slice.
func (sn *Snapshot[K, V]) Keys() []K {
	out := make([]K, 0, sn.items.Len())
	sn.items.Ascend(func(k K, _ V) bool { out = append(out, k); return true })
	return out
}

// List returns every object in key order, in a new slice.
func (sn *Snapshot[K, V]) List() []V {
	out := make([]V, 0, sn.items.Len())
	sn.items.Ascend(func(_ K, obj V) bool { out = append(out, obj); return true })
	return out
}

func (sn *Snapshot[K, V]) lookupIndex(name string) (snapIndex[K, V], error) {
	ix, ok := sn.indexes[name]
	if !ok {
		return ix, fmt.Errorf("%w: %q", ErrUnknownIndex, name)
	}
	return ix, nil
}

// ByIndex returns the objects indexed under value in the named index, in key order, in a
// new slice. An unknown value gives an empty result. It costs one lookup of value
// and a walk over the objects found.
func (sn *Snapshot[K, V]) ByIndex(index, value string) ([]V, error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return nil, err
	}
	b, ok := ix.bucket(value)
	if !ok {
		return nil, nil
	}
	out := make([]V, 0, b.len())
	b.ascend(func(_ K, obj V) bool { out = append(out, obj); return true })
	return out, nil
}

// ByIndexSeq yields the (key, object) pairs indexed under value in the named index, in key
// order: ByIndex without the slice. It costs one lookup of value, a walk over the objects
// found and three small allocations (the iterator, and the loop's body and state that the
// compiler moves to the heap for a range over a function value), however many objects it
// yields. An unknown value yields nothing; an unknown index is an error.
func (sn *Snapshot[K, V]) ByIndexSeq(index, value string) (iter.Seq2[K, V], error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return nil, err
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

// IndexKeys returns the keys indexed under value in the named index, in key order.
func (sn *Snapshot[K, V]) IndexKeys(index, value string) ([]K, error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return nil, err
	}
	b, ok := ix.bucket(value)
	if !ok {
		return nil, nil
	}
	out := make([]K, 0, b.len())
	b.ascend(func(k K, _ V) bool { out = append(out, k); return true })
	return out, nil
}

// IndexValues returns every value present in the named index, in order. Values whose last
// object went away are not reported.
func (sn *Snapshot[K, V]) IndexValues(index string) ([]string, error) {
	ix, err := sn.lookupIndex(index)
	if err != nil {
		return nil, err
	}
	var out []string
	ix.buckets.Ascend(func(value string, _ bucket[K, V]) bool { out = append(out, value); return true })
	return out, nil
}

// Index returns the objects that share at least one value with obj in the named index,
// without duplicates, in key order.
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
	var found []entry[K, V]
	for _, v := range vals {
		if b, ok := ix.bucket(v); ok {
			b.ascend(func(k K, obj V) bool {
				if _, dup := seen[k]; !dup {
					seen[k] = struct{}{}
					found = append(found, entry[K, V]{key: k, obj: obj})
				}
				return true
			})
		}
	}
	slices.SortFunc(found, func(a, b entry[K, V]) int { return sn.compare(a.key, b.key) })
	out := make([]V, len(found))
	for i, e := range found {
		out[i] = e.obj
	}
	return out, nil
}

// WithPrefix yields the objects of a string-keyed reader whose key starts with prefix, in
// key order.
func WithPrefix[V any](r Reader[string, V], prefix string) iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for k, v := range r.Ascend(prefix) {
			if !strings.HasPrefix(k, prefix) || !yield(k, v) {
				return
			}
		}
	}
}
