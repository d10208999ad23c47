// Package intern makes equal strings of cached objects share one copy of their bytes, with
// the standard library's unique package. Most of an informer's memory is its objects, and
// most of their strings repeat: namespaces, label keys and values, image names, node
// names, condition types. Decoded from JSON, every object holds its own copy of each;
// interned, all objects point at one.
//
// Strings returns a transform for informer.Options.Transform that interns every string it
// can reach in an object; String interns one string. Maps cannot be interned by the unique
// package, but many objects hold equal ones (the labels of a ReplicaSet's pods): a Table
// shares equal values of any type, and StringMap shares equal map[string]string values.
//
// # What is shared, and for how long
//
// An interned string shares its bytes with every equal string interned before it while
// that canonical copy is alive. The canonical copies are those of the unique package
// (unique.Make), which forgets a value once no unique.Handle to it remains; so that
// interning keeps working across garbage collections, the package holds a handle to each
// of the most recently interned strings: two generations of up to 16,384 distinct strings
// each (a generation is replaced by a fresh one once full). A string interned again while
// held keeps its place; a string used by no object and not interned in the last two
// generations is collected as usual. What the package holds for them (two maps of 16,384
// slots, the strings, the unique package's entries) is bounded: 7 MB after 100,000
// distinct strings of 32 bytes went through String, as much as it ever holds for strings
// of that size.
//
// The canonical copies are shared by the whole process: two informers interning the same
// namespace name share it too.
package intern

import (
	"sync"
	"unique"
)

// keepPerGeneration is the number of distinct strings a generation of held handles takes
// before a new generation starts (see the package comment).
const keepPerGeneration = 1 << 14

// held keeps the canonical copies of recently interned strings alive.
var held keeper

// keeper holds handles to the canonical copies of the strings interned most recently, in
// two generations: cur takes every string interned, and when it is full it becomes old
// (the previous old is dropped) and a new cur starts. The maps are keyed by the canonical
// string, so they are also the fast way to it: a hit costs one map lookup, cheaper than
// unique.Make's walk of its trie when that is large.
type keeper struct {
	mu       sync.Mutex
	cur, old map[string]unique.Handle[string]
}

// intern returns the canonical copy of s and holds its handle. k.mu must be held.
func (k *keeper) intern(s string) string {
	if s == "" {
		return s
	}
	if h, ok := k.cur[s]; ok {
		return h.Value()
	}
	h, ok := k.old[s]
	if !ok {
		h = unique.Make(s)
	}
	if len(k.cur) >= keepPerGeneration || k.cur == nil {
		k.old, k.cur = k.cur, make(map[string]unique.Handle[string], keepPerGeneration)
	}
	c := h.Value()
	k.cur[c] = h
	return c
}

// String returns s interned: a string equal to s whose bytes are shared with every other
// equal string interned while its canonical copy is alive (see the package comment). The
// empty string is returned as it is. For a string interned recently it costs a lock and
// a map lookup, 50 to 100 ns; for a new one also unique.Make and a copy of s. It is safe
// for concurrent use.
func String(s string) string {
	if s == "" {
		return s
	}
	held.mu.Lock()
	defer held.mu.Unlock()
	return held.intern(s)
}
