package intern

import (
	"hash/maphash"
	"maps"
	"sync"
)

// DefaultTableSize is the number of values a Table holds per generation when its Size is
// zero.
const DefaultTableSize = 4096

// A Table shares equal values of a type the unique package cannot take (maps, slices,
// structs holding them): Share returns the copy seen first instead of the one given, so
// that many cached objects point at one map instead of each holding its own. Values must
// be treated as immutable once shared: the objects of an informer's cache already are
// (never modify them), and a value Share returns may be held by many of them.
//
// A Table holds its values in two generations of up to Size distinct values each: a new
// value goes into the current generation, and when that is full it becomes the previous
// one (the one before is dropped) and a new one starts. A value found in the previous
// generation moves back into the current one. So a Table never holds more than 2×Size
// values that no object uses any more, and a value in steady use stays shared.
//
// Share costs a call of Hash, a map lookup and, on a hit, a call of Equal; on a miss, a
// call of Add and an insertion. Set the fields before the first Share; a Table is safe
// for concurrent use, and must not be copied after first use.
type Table[T any] struct {
	// Hash returns a hash of v; equal values must hash alike. Required.
	Hash func(v T) uint64
	// Equal reports whether a and b are equal (so that one may stand for the other).
	// Required.
	Equal func(a, b T) bool
	// Add, if set, is called on a value not seen before as it becomes the shared copy:
	// use it to intern the strings in the value. It runs under the Table's lock.
	Add func(v T)
	// Size is the number of distinct values per generation; 0 means DefaultTableSize.
	Size int

	mu       sync.Mutex
	cur, old map[uint64][]T
	n        int // values in cur
}

// Share returns a value equal to v (by Equal) that the table saw before and still holds,
// or v itself, which it then holds (after calling Add on it).
func (t *Table[T]) Share(v T) T {
	h := t.Hash(v)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cur[h] {
		if t.Equal(c, v) {
			return c
		}
	}
	for _, c := range t.old[h] {
		if t.Equal(c, v) {
			t.insert(h, c)
			return c
		}
	}
	if t.Add != nil {
		t.Add(v)
	}
	t.insert(h, v)
	return v
}

func (t *Table[T]) insert(h uint64, v T) {
	size := t.Size
	if size <= 0 {
		size = DefaultTableSize
	}
	if t.cur == nil || t.n >= size {
		t.old, t.cur, t.n = t.cur, make(map[uint64][]T), 0
	}
	t.cur[h] = append(t.cur[h], v)
	t.n++
}

var seed = maphash.MakeSeed()

// HashStringMap is a hash of a map[string]string for a Table: independent of the order
// of its entries, it costs two string hashes per entry.
func HashStringMap[M ~map[string]string](m M) uint64 {
	var h uint64
	for k, v := range m {
		// A sum is independent of the order; the multiplier keeps {a: b} and {b: a} apart.
		h += maphash.String(seed, k)*0x9e3779b97f4a7c15 + maphash.String(seed, v)
	}
	return h + uint64(len(m))
}

var stringMaps = Table[map[string]string]{
	Hash:  HashStringMap[map[string]string],
	Equal: func(a, b map[string]string) bool { return maps.Equal(a, b) },
	Add:   internStringMap,
}

func internStringMap(m map[string]string) {
	held.mu.Lock()
	defer held.mu.Unlock()
	for k, v := range m {
		m[held.intern(k)] = held.intern(v)
	}
}

// StringMap returns a map equal to m, shared with other callers: the first map with
// these contents seen (and still held by the package's Table of string maps, which holds
// DefaultTableSize maps per generation), or m itself with its keys and values interned.
// Use it for labels and annotations, which most objects of a kind share with their
// siblings: one map instead of one per object. Never modify a map StringMap returned (or
// m, once passed): other objects may hold it. A nil or empty m is returned as it is. It
// is safe for concurrent use.
func StringMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	return stringMaps.Share(m)
}
