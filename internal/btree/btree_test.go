package btree

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// testKey returns key number i of a key space that mixes the cache's keys (long, sharing
// a prefix by the hundred) with short keys, prefixes of the long ones and the empty key.
func testKey(i int) string {
	switch i % 4 {
	case 0:
		return fmt.Sprintf("ns-%03d/cm-%06d", i%7, i)
	case 1:
		return fmt.Sprintf("k%d", i)
	case 2:
		if i == 2 {
			return ""
		}
		return fmt.Sprintf("ns-%03d/cm", i%7) // a prefix of the long keys
	default:
		return fmt.Sprintf("\xffz%d", i)
	}
}

// pairKey is a struct key ordered by (B, A): not its field order, so that ByStringFields'
// offsets are checked.
type pairKey struct{ A, B string }

func pairOf(s string) pairKey {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return pairKey{A: s[i+1:], B: s[:i]}
	}
	return pairKey{B: s}
}

func comparePairs(a, b pairKey) int {
	return cmp.Or(strings.Compare(a.B, b.B), strings.Compare(a.A, b.A))
}

// order is one way to key a tree in the tests: by string, through a compare function, or
// by a struct's string fields.
type order struct {
	name string
	run  func(t *testing.T, degree int, seed uint64, ops int)
}

var orders = []order{
	{"string", func(t *testing.T, d int, seed uint64, ops int) {
		runModel(t, ByString[string](), strings.Compare, func(s string) string { return s }, d, seed, ops)
	}},
	{"compare", func(t *testing.T, d int, seed uint64, ops int) {
		runModel(t, ByCompare(strings.Compare), strings.Compare, func(s string) string { return s }, d, seed, ops)
	}},
	{"fields", func(t *testing.T, d int, seed uint64, ops int) {
		var k pairKey
		o := ByStringFields[pairKey](unsafe.Offsetof(k.B), unsafe.Offsetof(k.A))
		runModel(t, o, comparePairs, pairOf, d, seed, ops)
	}},
}

// check fails the test unless tr holds exactly m, in order, with every node of legal size
// and every leaf at the same depth.
func check[K comparable](t *testing.T, what string, tr *Tree[K, *int], m map[K]*int, compare func(a, b K) int) {
	t.Helper()
	want := slices.SortedFunc(maps.Keys(m), compare)
	var got []K
	tr.Ascend(func(k K, v *int) bool {
		if v != m[k] {
			t.Fatalf("%s: key %v has value %p, want %p", what, k, v, m[k])
		}
		got = append(got, k)
		return true
	})
	if !slices.Equal(got, want) {
		t.Fatalf("%s: Ascend yields %d keys %v…, want %d keys %v…", what, len(got), got[:min(5, len(got))], len(want), want[:min(5, len(want))])
	}
	if tr.Len() != len(m) {
		t.Fatalf("%s: Len is %d, want %d", what, tr.Len(), len(m))
	}
	if k, _, ok := tr.Min(); ok != (len(m) > 0) || ok && k != want[0] {
		t.Fatalf("%s: Min is %v %v", what, k, ok)
	}
	if k, _, ok := tr.Max(); ok != (len(m) > 0) || ok && k != want[len(want)-1] {
		t.Fatalf("%s: Max is %v %v", what, k, ok)
	}
	if tr.root == nil {
		if len(m) != 0 {
			t.Fatalf("%s: no root with %d keys", what, len(m))
		}
		return
	}
	leafDepth := -1
	var walk func(n *node[K, *int], depth int) int
	walk = func(n *node[K, *int], depth int) int {
		if n != tr.root && (len(n.items) < tr.minItems || len(n.items) > tr.maxItems) {
			t.Fatalf("%s: node at depth %d has %d items, want %d to %d", what, depth, len(n.items), tr.minItems, tr.maxItems)
		}
		if n == tr.root && (len(n.items) == 0 || len(n.items) > tr.maxItems) {
			t.Fatalf("%s: root has %d items", what, len(n.items))
		}
		count := len(n.items)
		if n.children == nil {
			if leafDepth < 0 {
				leafDepth = depth
			} else if depth != leafDepth {
				t.Fatalf("%s: leaves at depth %d and %d", what, leafDepth, depth)
			}
			return count
		}
		if len(n.children) != len(n.items)+1 {
			t.Fatalf("%s: node has %d children for %d items", what, len(n.children), len(n.items))
		}
		for _, c := range n.children {
			count += walk(c, depth+1)
		}
		return count
	}
	if n := walk(tr.root, 0); n != len(m) {
		t.Fatalf("%s: nodes hold %d keys, want %d", what, n, len(m))
	}
}

// TestTreeMatchesModel runs random writes, reads, range scans and clones on trees and on
// maps side by side, with a free list shared by all the trees, and checks every answer
// and, periodically, every tree's whole content and shape. Writes go to originals and
// clones alike, so a clone that shares a node its original changes in place (or one that
// reuses a node another tree still reads), shows as a difference from its map.
func TestTreeMatchesModel(t *testing.T) {
	for _, o := range orders {
		for _, degree := range []int{2, 3, 48} {
			for seed := uint64(1); seed <= 4; seed++ {
				t.Run(fmt.Sprintf("order=%s/degree=%d/seed=%d", o.name, degree, seed), func(t *testing.T) {
					o.run(t, degree, seed, 10_000)
				})
			}
		}
	}
}

func runModel[K comparable](t *testing.T, ord Order[K], compare func(a, b K) int, key func(string) K, degree int, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	keys := 300 + degree*60 // a key space that keeps the trees a few levels deep
	type pair struct {
		tr *Tree[K, *int]
		m  map[K]*int
	}
	free := &FreeList[K, *int]{}
	trees := []pair{{New[K, *int](degree, ord, free), map[K]*int{}}}
	objs := make([]int, ops)
	for op := range ops {
		p := &trees[rng.IntN(len(trees))]
		k := key(testKey(rng.IntN(keys)))
		switch r := rng.IntN(100); {
		case r < 50:
			old, replaced := p.tr.Set(k, &objs[op])
			want, had := p.m[k]
			if replaced != had || old != want {
				t.Fatalf("op %d: Set(%v) = %p %v, want %p %v", op, k, old, replaced, want, had)
			}
			p.m[k] = &objs[op]
		case r < 85:
			old, found := p.tr.Delete(k)
			want, had := p.m[k]
			if found != had || old != want {
				t.Fatalf("op %d: Delete(%v) = %p %v, want %p %v", op, k, old, found, want, had)
			}
			delete(p.m, k)
		case r < 95:
			v, found := p.tr.Get(k)
			want, had := p.m[k]
			if found != had || v != want || p.tr.Has(k) != had {
				t.Fatalf("op %d: Get(%v) = %p %v, want %p %v", op, k, v, found, want, had)
			}
		case r < 98:
			to := key(testKey(rng.IntN(keys)))
			var want []K
			for _, mk := range slices.SortedFunc(maps.Keys(p.m), compare) {
				if compare(mk, k) >= 0 && compare(mk, to) < 0 {
					want = append(want, mk)
				}
			}
			var got []K
			p.tr.AscendRange(k, to, func(k K, _ *int) bool { got = append(got, k); return true })
			if !slices.Equal(got, want) {
				t.Fatalf("op %d: AscendRange(%v, %v) = %v, want %v", op, k, to, got, want)
			}
			got = got[:0]
			limit := rng.IntN(5)
			p.tr.AscendFrom(k, func(k K, _ *int) bool { got = append(got, k); return len(got) < limit })
			var wantFrom []K
			for _, mk := range slices.SortedFunc(maps.Keys(p.m), compare) {
				if compare(mk, k) >= 0 && len(wantFrom) < max(limit, 1) {
					wantFrom = append(wantFrom, mk)
				}
			}
			if !slices.Equal(got, wantFrom) {
				t.Fatalf("op %d: AscendFrom(%v) stopped after %d = %v, want %v", op, k, limit, got, wantFrom)
			}
			got = got[:0]
			p.tr.AscendAfter(k, func(k K, _ *int) bool { got = append(got, k); return len(got) < limit })
			var wantAfter []K
			for _, mk := range slices.SortedFunc(maps.Keys(p.m), compare) {
				if compare(mk, k) > 0 && len(wantAfter) < max(limit, 1) {
					wantAfter = append(wantAfter, mk)
				}
			}
			if !slices.Equal(got, wantAfter) {
				t.Fatalf("op %d: AscendAfter(%v) stopped after %d = %v, want %v", op, k, limit, got, wantAfter)
			}
		default:
			c := pair{p.tr.Clone(), maps.Clone(p.m)}
			if len(trees) < 4 {
				trees = append(trees, c)
			} else {
				trees[rng.IntN(len(trees))] = c
			}
		}
		if op%500 == 499 {
			for i, p := range trees {
				check(t, fmt.Sprintf("after op %d, tree %d", op, i), p.tr, p.m, compare)
			}
		}
	}
	for i, p := range trees {
		check(t, fmt.Sprintf("at the end, tree %d", i), p.tr, p.m, compare)
	}
}

// TestCloneIsASnapshot fills a tree, clones it, rewrites every key of the original
// (replacing, deleting, inserting), and checks that the clone still holds what it held;
// then does the same to the clone and checks the original.
func TestCloneIsASnapshot(t *testing.T) {
	free := &FreeList[string, *int]{}
	tr := New[string, *int](48, ByString[string](), free)
	rng := rand.New(rand.NewPCG(3, 3))
	objs := make([]int, 20_000)
	m := map[string]*int{}
	for i := range 5_000 {
		k := testKey(rng.IntN(10_000))
		tr.Set(k, &objs[i])
		m[k] = &objs[i]
	}
	snap, snapModel := tr.Clone(), maps.Clone(m)
	write := func(tr *Tree[string, *int], m map[string]*int, from int) {
		for i := from; i < from+5_000; i++ {
			k := testKey(rng.IntN(10_000))
			if i%3 == 0 {
				tr.Delete(k)
				delete(m, k)
			} else {
				tr.Set(k, &objs[i])
				m[k] = &objs[i]
			}
		}
	}
	write(tr, m, 5_000)
	check(t, "original after its writes", tr, m, strings.Compare)
	check(t, "clone after the original's writes", snap, snapModel, strings.Compare)
	write(snap, snapModel, 10_000)
	check(t, "clone after its writes", snap, snapModel, strings.Compare)
	check(t, "original after the clone's writes", tr, m, strings.Compare)
}

// Every way out of an ascent stops it: yield returning false in a leaf, at an inner item,
// and a range's end.
func TestAscendStops(t *testing.T) {
	tr := New[int, int](2, ByCompare(cmp.Compare[int]), nil)
	for i := range 100 {
		tr.Set(i, i*10)
	}
	for stop := range 100 {
		var got []int
		tr.Ascend(func(k, v int) bool { got = append(got, k); return k < stop })
		if len(got) != stop+1 || got[stop] != stop {
			t.Fatalf("Ascend stopping at %d yielded %v", stop, got)
		}
	}
	var got []int
	tr.AscendRange(10, 20, func(k, v int) bool {
		if v != k*10 {
			t.Fatalf("key %d has value %d", k, v)
		}
		got = append(got, k)
		return true
	})
	if want := []int{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}; !slices.Equal(got, want) {
		t.Fatalf("AscendRange(10, 20) = %v, want %v", got, want)
	}
	empty := New[int, int](2, ByCompare(cmp.Compare[int]), nil)
	empty.Ascend(func(int, int) bool { t.Fatal("an empty tree yielded"); return false })
	empty.AscendFrom(0, func(int, int) bool { t.Fatal("an empty tree yielded"); return false })
	empty.AscendAfter(0, func(int, int) bool { t.Fatal("an empty tree yielded"); return false })
	if _, _, ok := empty.Min(); ok {
		t.Fatal("an empty tree has a Min")
	}
	if _, ok := empty.Delete(1); ok {
		t.Fatal("an empty tree deleted a key")
	}
}

// Writes after a clone allocate only the copies of the nodes on their paths; writes with
// nothing shared, replacing keys, allocate nothing.
func TestWritesAllocate(t *testing.T) {
	tr := New[string, *int](48, ByString[string](), nil)
	keys := make([]string, 50_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns-%03d/cm-%06d", i%100, i)
		tr.Set(keys[i], nil)
	}
	var v int
	i := 0
	if n := testing.AllocsPerRun(1000, func() { tr.Set(keys[i%len(keys)], &v); i += 7919 }); n != 0 {
		t.Fatalf("a replace allocates %.1f times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = tr.Get(keys[i%len(keys)]); i += 7919 }); n != 0 {
		t.Fatalf("a Get allocates %.1f times", n)
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"degree 1":         func() { New[int, int](1, ByCompare(cmp.Compare[int]), nil) },
		"nil compare func": func() { New[int, int](2, ByCompare[int](nil), nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// Natural orders as cmp.Compare does: a named string type as strings (compared in place),
// numbers by value, NaN first.
func TestNaturalOrder(t *testing.T) {
	type name string
	names := New[name, int](2, Natural[name](), nil)
	for i, k := range []name{"b", "", "ab", "a", "ba"} {
		names.Set(k, i)
	}
	var got []name
	names.Ascend(func(k name, _ int) bool { got = append(got, k); return true })
	if want := []name{"", "a", "ab", "b", "ba"}; !slices.Equal(got, want) {
		t.Errorf("named strings in the order %q, want %q", got, want)
	}
	if names.order.kind != byString {
		t.Errorf("a named string type is compared through a function, not in place")
	}
	nums := New[float64, int](2, Natural[float64](), nil)
	for i, k := range []float64{2, -1, math.NaN(), 10, 0.5} {
		nums.Set(k, i)
	}
	var gotNums []string
	nums.Ascend(func(k float64, _ int) bool { gotNums = append(gotNums, fmt.Sprint(k)); return true })
	if got, want := strings.Join(gotNums, " "), "NaN -1 0.5 2 10"; got != want {
		t.Errorf("numbers in the order %s, want %s", got, want)
	}
}
