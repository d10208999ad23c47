package workqueue

import (
	"math/rand/v2"
	"testing"
)

// TestTable checks the state table against a Go map through random inserts, state
// changes and removals, with a hash that collides often so that long probe runs, wrap-
// around and backward shifts are all exercised, across growth and shrinking.
func TestTable(t *testing.T) {
	hashes := []struct {
		name string
		hash func(int) uint64
	}{
		{"maphash", hashOf[int]},
		{"colliding", func(k int) uint64 { return uint64(k%7) | hashTopBit }},
		{"clustered at the end", func(k int) uint64 { return uint64(1<<20-1-k%5) | hashTopBit }},
	}
	for _, hc := range hashes {
		t.Run(hc.name, func(t *testing.T) {
			var tb table[int, itemState]
			model := map[int]itemState{}
			r := rand.New(rand.NewPCG(5, 6))
			for step := range 100000 {
				// Grow to a few hundred keys, shrink to none, and again.
				keys := 300
				if (step/20000)%2 == 1 {
					keys = 3
				}
				k := r.IntN(keys)
				h := hc.hash(k)
				if r.IntN(2) == 0 {
					i, added := tb.insert(h, k)
					if _, ok := model[k]; ok == added {
						t.Fatalf("step %d: insert(%d) added = %v, model has it: %v", step, k, added, ok)
					}
					st := itemState(1 + r.IntN(3))
					tb.slots[i].val = st
					model[k] = st
				} else if i := tb.find(h, k); i >= 0 {
					if _, ok := model[k]; !ok {
						t.Fatalf("step %d: find(%d) found a removed key", step, k)
					}
					tb.remove(i)
					delete(model, k)
				} else if _, ok := model[k]; ok {
					t.Fatalf("step %d: find(%d) missed a present key", step, k)
				}
				if tb.n != len(model) {
					t.Fatalf("step %d: %d entries, model %d", step, tb.n, len(model))
				}
				if step%997 == 0 {
					for mk, st := range model {
						i := tb.find(hc.hash(mk), mk)
						if i < 0 || tb.slots[i].val != st {
							t.Fatalf("step %d: key %d lost or has the wrong state", step, mk)
						}
					}
				}
			}
			// Emptied and then used lightly, the table gives its memory back.
			for k := range model {
				tb.remove(tb.find(hc.hash(k), k))
			}
			peak := len(tb.slots)
			for i := range 4 * peak {
				j, _ := tb.insert(hc.hash(i), i)
				tb.remove(j)
			}
			if len(tb.slots) != tableMinSize || tb.n != 0 {
				t.Fatalf("%d slots, %d entries after light use; want %d, 0 (peak was %d)", len(tb.slots), tb.n, tableMinSize, peak)
			}
		})
	}
}
