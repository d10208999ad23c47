package bench

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	google "github.com/google/btree"

	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/testkit"
)

// This file compares the cache's B-tree (internal/btree of the root module) with
// github.com/google/btree, the baseline it replaced; it lives here so that the root module
// does not require google/btree.
//
// The cache's write workload, against github.com/google/btree at the same degree: 50,000
// keys shaped like "ns-012/cm-001234" (a struct{Namespace, Name} for key=struct), then
// 70 % replaces of a random key, 15 % inserts of a new one and 15 % deletes, as W1 of the
// bench module writes its key tree. ns/op is per write (or per Get).

const benchKeys = 50_000

type nsName struct{ Namespace, Name string }

type benchOp struct {
	key string
	del bool
}

// benchOps returns the initial keys and n writes over them: testkit.W1's changes.
func benchOps(n int) ([]string, []benchOp) {
	initial, changes := testkit.W1(benchKeys, n, func(i, _ int) string { return fmt.Sprintf("ns-%03d/cm-%06d", i%100, i) })
	ops := make([]benchOp, len(changes))
	for i, c := range changes {
		ops[i] = benchOp{key: c.Obj, del: c.Delete}
	}
	return initial, ops
}

func splitKey(s string) nsName {
	for i := range len(s) {
		if s[i] == '/' {
			return nsName{s[:i], s[i+1:]}
		}
	}
	return nsName{Name: s}
}

type googleEntry[K any] struct {
	key K
	obj *int
}

// googleStrings returns a google/btree of degree 48 holding keys, each with value v.
func googleStrings(keys []string, v *int) *google.BTreeG[googleEntry[string]] {
	tr := google.NewG(48, func(a, b googleEntry[string]) bool { return a.key < b.key })
	for _, k := range keys {
		tr.ReplaceOrInsert(googleEntry[string]{k, v})
	}
	return tr
}

func BenchmarkBTreeWrites(b *testing.B) {
	initial, ops := benchOps(1 << 16)
	var obj int
	var nk nsName
	fields := btree.ByStringFields[nsName](unsafe.Offsetof(nk.Namespace), unsafe.Offsetof(nk.Name))
	b.Run("key=string/tree=ours", func(b *testing.B) {
		tr := btree.New[string, *int](48, btree.ByString[string](), &btree.FreeList[string, *int]{})
		for _, k := range initial {
			tr.Set(k, &obj)
		}
		b.ResetTimer()
		for i := range b.N {
			if op := ops[i&(len(ops)-1)]; op.del {
				tr.Delete(op.key)
			} else {
				tr.Set(op.key, &obj)
			}
		}
	})
	b.Run("key=string/tree=google", func(b *testing.B) {
		tr := googleStrings(initial, &obj)
		b.ResetTimer()
		for i := range b.N {
			if op := ops[i&(len(ops)-1)]; op.del {
				tr.Delete(googleEntry[string]{key: op.key})
			} else {
				tr.ReplaceOrInsert(googleEntry[string]{op.key, &obj})
			}
		}
	})
	structOps := make([]nsName, len(ops))
	for i, op := range ops {
		structOps[i] = splitKey(op.key)
	}
	b.Run("key=struct/tree=ours", func(b *testing.B) {
		tr := btree.New[nsName, *int](48, fields, &btree.FreeList[nsName, *int]{})
		for _, k := range initial {
			tr.Set(splitKey(k), &obj)
		}
		b.ResetTimer()
		for i := range b.N {
			if j := i & (len(ops) - 1); ops[j].del {
				tr.Delete(structOps[j])
			} else {
				tr.Set(structOps[j], &obj)
			}
		}
	})
	b.Run("key=struct/tree=google", func(b *testing.B) {
		tr := google.NewG(48, func(a, b googleEntry[nsName]) bool {
			if a.key.Namespace != b.key.Namespace {
				return a.key.Namespace < b.key.Namespace
			}
			return a.key.Name < b.key.Name
		})
		for _, k := range initial {
			tr.ReplaceOrInsert(googleEntry[nsName]{splitKey(k), &obj})
		}
		b.ResetTimer()
		for i := range b.N {
			if j := i & (len(ops) - 1); ops[j].del {
				tr.Delete(googleEntry[nsName]{key: structOps[j]})
			} else {
				tr.ReplaceOrInsert(googleEntry[nsName]{structOps[j], &obj})
			}
		}
	})
}

func BenchmarkBTreeGet(b *testing.B) {
	initial, _ := benchOps(0)
	var obj int
	probes := make([]string, 1<<16)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range probes {
		probes[i] = initial[rng.IntN(len(initial))]
	}
	b.Run("tree=ours", func(b *testing.B) {
		tr := btree.New[string, *int](48, btree.ByString[string](), nil)
		for _, k := range initial {
			tr.Set(k, &obj)
		}
		b.ResetTimer()
		for i := range b.N {
			if _, ok := tr.Get(probes[i&(len(probes)-1)]); !ok {
				b.Fatal("missing")
			}
		}
	})
	b.Run("tree=google", func(b *testing.B) {
		tr := googleStrings(initial, &obj)
		b.ResetTimer()
		for i := range b.N {
			if _, ok := tr.Get(googleEntry[string]{key: probes[i&(len(probes)-1)]}); !ok {
				b.Fatal("missing")
			}
		}
	})
}
