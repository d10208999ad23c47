package informer

import (
	"iter"
	"strings"

	"github.com/informer-go/informer/internal/btree"
)

// Reader is the typed, read-only view of an informer's cache, the role of client-go's
// Lister: *Informer and *Snapshot implement it, so a reconciler can be given either (and a
// test a fake). Every method reads one consistent point-in-time state (an Informer's
// methods each read the newest one; a Snapshot's always the same). Results are iterators
// over that state, never a copy of it: a caller that wants a slice or a map collects one
// (slices.Collect, maps.Collect), and one that stops early pays only for what it read.
// Objects are yielded as stored: they are shared with every other reader and handler, do
// not mutate them.
type Reader[K comparable, V any] interface {
	// Get returns the object stored under key.
	Get(key K) (V, bool)
	// Len returns the number of objects.
	Len() int
	// All yields every (key, object) pair in key order.
	All() iter.Seq2[K, V]
	// Range yields the (key, object) pairs whose key k satisfies from ≤ k < to, in key
	// order.
	Range(from, to K) iter.Seq2[K, V]
	// ByIndex yields the (key, object) pairs indexed under value in the named index, in
	// key order. An unknown value yields nothing; an unknown index is ErrUnknownIndex
	// (and an iterator that yields nothing).
	ByIndex(index, value string) (iter.Seq2[K, V], error)
	// IndexValues yields every value present in the named index, in order. An unknown
	// index is ErrUnknownIndex (and an iterator that yields nothing).
	IndexValues(index string) (iter.Seq[string], error)
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
	indexes  snapIndexes[K, V]
}

func newSnapshot[K comparable, V any](compare func(a, b K) int, gen uint64, rev string, exact bool, items *btree.Tree[K, V], indexes snapIndexes[K, V]) *Snapshot[K, V] {
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

// Range yields the (key, object) pairs whose key k satisfies from ≤ k < to, in key order.
func (sn *Snapshot[K, V]) Range(from, to K) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) { sn.items.AscendRange(from, to, yield) }
}

// ByIndex yields the (key, object) pairs indexed under value in the named index, in key
// order, without copying them: an index's bucket holds its objects, so the walk costs no
// lookup per object. It costs one lookup of value, a walk over the objects found and three
// small allocations (the iterator, and the loop's body and state that the compiler moves
// to the heap for a range over a function value), however many objects it yields. An
// unknown value yields nothing; an unknown index is ErrUnknownIndex, with an iterator
// that yields nothing (so a range over it never panics).
func (sn *Snapshot[K, V]) ByIndex(index, value string) (iter.Seq2[K, V], error) {
	return sn.indexes.ByIndex(index, value)
}

// IndexValues yields every value present in the named index, in order. Values whose last
// object went away are not yielded. An unknown index is ErrUnknownIndex, with an iterator
// that yields nothing.
func (sn *Snapshot[K, V]) IndexValues(index string) (iter.Seq[string], error) {
	return sn.indexes.IndexValues(index)
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
