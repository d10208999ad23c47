package informer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkWriteBatch measures the writer alone: batches of 1,024 changes to random keys
// of a cache of 50,000 objects with two single-valued indexes (500 and 100 values), as
// W1 of the bench module makes them when the writer is behind (70 % updates, 15 % adds,
// 15 % deletes). The changes are queued and popped outside the timer; ns/op is per change.
func BenchmarkWriteBatch(b *testing.B) {
	type obj struct{ key, ns, app string }
	inf, err := New[string, *obj](ListerWatcherFuncs[*obj]{}, Options[string, *obj]{
		Key: func(o *obj) (string, error) { return o.key, nil },
		Indexers: Indexers[*obj]{
			"namespace": IndexBy(func(o *obj) (string, error) { return o.ns, nil }),
			"app":       IndexBy(func(o *obj) (string, error) { return o.app, nil }),
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	mk := func(i int) *obj {
		ns := fmt.Sprintf("ns-%03d", i%500)
		return &obj{key: fmt.Sprintf("%s/cm-%06d", ns, i), ns: ns, app: fmt.Sprintf("app-%03d", (i*7919)%100)}
	}
	const initial, batchKeys = 50_000, 1024
	rng := rand.New(rand.NewPCG(1, 2))
	live := make([]int, 0, 2*initial)
	f, s := inf.fifo, inf.store
	var h storeHint[*obj]
	queue := func(typ deltaType, o *obj) {
		if !s.Prepare(&h, o) {
			b.Fatal("prepare failed")
		}
		if err := f.addPrepared(typ, o.key, o, "", false, &h); err != nil {
			b.Fatal(err)
		}
	}
	apply := func() int {
		items, _, _, err := f.popBatch(nil, math.MaxInt, math.MaxInt)
		if err != nil {
			b.Fatal(err)
		}
		_, n, _ := s.Apply(&batch[string, *obj]{items: items}, "", nil)
		f.finishBatch(items)
		return n
	}
	for i := range initial {
		queue(deltaAdded, mk(i))
		live = append(live, i)
	}
	apply()
	s.Compact()
	next := initial
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		seen := map[int]bool{}
		for len(seen) < batchKeys {
			switch r := rng.IntN(100); {
			case r < 70:
				i := live[rng.IntN(len(live))]
				if !seen[i] {
					seen[i] = true
					queue(deltaUpdated, mk(i))
				}
			case r < 85:
				seen[next] = true
				queue(deltaAdded, mk(next))
				live = append(live, next)
				next++
			default:
				j := rng.IntN(len(live))
				if i := live[j]; !seen[i] {
					seen[i] = true
					live[j] = live[len(live)-1]
					live = live[:len(live)-1]
					queue(deltaDeleted, mk(i))
				}
			}
		}
		b.StartTimer()
		done += apply()
	}
}
