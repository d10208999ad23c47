package informer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The writer applies the deltas of one key as a single write of the final state when their
// index values were computed as they were queued (applyFinal). Over random delta
// sequences (adds, updates, observed deletes, tombstones, replaced and sync deltas, objects
// an index function fails for) it must make exactly the notifications and the cache that
// applying the deltas one by one makes. Observed deletes carry their
// object's index values as a hint (store.deleteHinted), often not the stored object's.
func TestApply_CoalescedEqualsOneByOne(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		fast, slow := applyTestInformer(t), applyTestInformer(t)
		keys := []string{"a", "b", "c", "d"}
		for round := range 20 {
			var script []scriptedDelta
			for range 1 + rng.IntN(12) {
				k := keys[rng.IntN(len(keys))]
				val := fmt.Sprintf("%s=v%d", k, rng.IntN(3))
				if rng.IntN(10) == 0 {
					val = k + "=bad" // the "val" index fails for it
				}
				typ := []deltaType{deltaAdded, deltaUpdated, deltaUpdated, deltaDeleted, deltaReplaced, deltaSync}[rng.IntN(6)]
				if typ == deltaReplaced || typ == deltaSync {
					if rng.IntN(3) != 0 {
						typ = deltaUpdated // mostly coalescible lists
					}
				}
				sd := scriptedDelta{typ: typ, key: k, obj: val}
				if typ == deltaDeleted {
					switch rng.IntN(3) {
					case 0:
						sd.unknown = true
					case 1:
						sd.obj, sd.keyOnly = k+"=", true // the source sent the key alone
					}
				}
				script = append(script, sd)
			}
			got := applyScript(t, fast, script, true)
			want := applyScript(t, slow, script, false)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d round %d: script %v\ncoalesced: %v\none by one: %v", seed, round, script, got, want)
			}
			if g, w := dumpStore(fast.store), dumpStore(slow.store); g != w {
				t.Fatalf("seed %d round %d: script %v\ncoalesced cache: %s\none by one cache: %s", seed, round, script, g, w)
			}
		}
	}
}

type scriptedDelta struct {
	typ     deltaType
	key     string
	obj     string
	unknown bool // a tombstone
	keyOnly bool // an observed delete whose object carries the key alone
}

func applyTestInformer(t *testing.T) *Informer[string, string] {
	t.Helper()
	inf, err := New[string, string](&scripted{}, Options[string, string]{
		Key: func(s string) (string, error) { k, _, _ := strings.Cut(s, "="); return k, nil },
		Indexers: Indexers[string]{
			"val": IndexBy(func(s string) (string, error) {
				_, v, _ := strings.Cut(s, "=")
				if v == "bad" {
					return "", errors.New("bad value")
				}
				return v, nil
			}),
			"chars": IndexByValues(func(s string) ([]string, error) {
				_, v, _ := strings.Cut(s, "=")
				return strings.Split(v, ""), nil
			}),
		},
		ErrorHandler: func(error) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// applyScript queues script into inf (with index values computed as the reflector
// computes them when precompute is set), pops it as one batch, applies it and returns the
// notifications.
func applyScript(t *testing.T, inf *Informer[string, string], script []scriptedDelta, precompute bool) []string {
	t.Helper()
	f := inf.fifo
	for _, d := range script {
		// The reflector queues watch events (added, updated, observed deletes) with values.
		// A delete that carries the key alone is queued without values, as the sink does.
		if precompute && (d.typ == deltaAdded || d.typ == deltaUpdated || d.typ == deltaDeleted && !d.unknown && !d.keyOnly) {
			var h storeHint[string]
			if inf.store.Prepare(&h, d.obj) {
				if err := f.addPrepared(d.key, delta[string]{typ: d.typ, object: d.obj}, false, &h); err != nil {
					t.Fatal(err)
				}
				continue
			}
		}
		f.mu.Lock()
		f.queueLocked(d.key, delta[string]{typ: d.typ, object: d.obj, finalStateUnknown: d.unknown, keyOnly: d.keyOnly})
		f.mu.Unlock()
	}
	items, _, _, err := f.popBatch(nil, 1024, math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	notes, _, _ := inf.store.Apply(&batch[string, string]{items: items}, "", nil)
	f.finishBatch(items)
	var out []string
	for _, n := range notes {
		out = append(out, noteString(n))
	}
	return out
}

func noteString(n notification[string, string]) string {
	return fmt.Sprintf("%d:%v:%v>%v:i%v:u%v:s%v", n.kind, n.key, n.old, n.new, n.initial, n.unknown, n.sync)
}

// A delete whose object carries the key alone (the source did not know the last state)
// is notified with the state the cache held, finalStateUnknown false, whether the key's
// deltas are written one by one or as their final state; and the key leaves every index.
func TestApply_DeleteOfKeyAloneTakesCachedState(t *testing.T) {
	notes := func(ns ...notification[string, string]) []string {
		var out []string
		for _, n := range ns {
			out = append(out, noteString(n))
		}
		return out
	}
	for _, precompute := range []bool{true, false} {
		inf := applyTestInformer(t)
		applyScript(t, inf, []scriptedDelta{{typ: deltaAdded, key: "a", obj: "a=v1"}, {typ: deltaAdded, key: "b", obj: "b=v1"}}, precompute)
		// One delta of the key in the batch: written alone.
		got := applyScript(t, inf, []scriptedDelta{{typ: deltaDeleted, key: "a", obj: "a=", keyOnly: true}}, precompute)
		if want := notes(del("a", "v1")); !slices.Equal(got, want) {
			t.Errorf("precompute %v, a delete alone: got %v, want %v", precompute, got, want)
		}
		// Several: written as the final state (applyFinal) when prepared.
		got = applyScript(t, inf, []scriptedDelta{
			{typ: deltaUpdated, key: "b", obj: "b=v2"},
			{typ: deltaDeleted, key: "b", obj: "b=", keyOnly: true},
			{typ: deltaDeleted, key: "c", obj: "c=", keyOnly: true}, // never cached: nothing
		}, precompute)
		if want := notes(upd("b", "v1", "v2"), del("b", "v2")); !slices.Equal(got, want) {
			t.Errorf("precompute %v, after an update: got %v, want %v", precompute, got, want)
		}
		if d := dumpStore(inf.store); d != "" {
			t.Errorf("precompute %v: the cache keeps %s", precompute, d)
		}
	}
}

func dumpStore[K comparable, V any](s *store[K, V]) string {
	sn := s.Snapshot()
	var b strings.Builder
	for k, v := range sn.All() {
		fmt.Fprintf(&b, "%v=%v ", k, v)
	}
	for _, ix := range []string{"val", "chars"} {
		vals, _ := ReadIndexValues(sn, ix)
		for _, v := range vals {
			keys, _ := ReadIndexKeys(sn, ix, v)
			objs, _ := ReadByIndex(sn, ix, v)
			fmt.Fprintf(&b, "| %s[%s]=%v %v ", ix, v, keys, objs)
		}
	}
	return b.String()
}

// Indexes added while a key's deltas are queued: the values computed before no longer
// cover every index, so the deltas are applied one by one and the new index function is
// called for each (here it fails for the first object, which is skipped).
func TestApply_IndexesAddedWhileQueued(t *testing.T) {
	inf := applyTestInformer(t)
	f := inf.fifo
	queue := func(obj string) {
		var h storeHint[string]
		if !inf.store.Prepare(&h, obj) {
			t.Fatalf("prepare %q failed", obj)
		}
		if err := f.addPrepared("a", delta[string]{typ: deltaUpdated, object: obj}, false, &h); err != nil {
			t.Fatal(err)
		}
	}
	queue("a=x")
	if err := inf.AddIndexers(Indexers[string]{"nox": IndexBy(func(s string) (string, error) {
		if strings.Contains(s, "x") {
			return "", errors.New("x")
		}
		return s, nil
	})}); err != nil {
		t.Fatal(err)
	}
	queue("a=y")
	items, _, _, err := f.popBatch(nil, 1024, math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	if inf.store.AllPrepared(items[0].list.deltas, items[0].list.held.(*queuedHint[string])) {
		t.Fatal("a list prepared with two index sets counted as coalescible")
	}
	notes, _, _ := inf.store.Apply(&batch[string, string]{items: items}, "", nil)
	f.finishBatch(items)
	if len(notes) != 1 || notes[0].kind != notifyAdd || notes[0].new != "a=y" {
		t.Fatalf("notifications %+v, want only the add of a=y", notes)
	}
	if keys, _ := ReadIndexKeys(inf.store.Snapshot(), "nox", "a=y"); !slices.Equal(keys, []string{"a"}) {
		t.Fatalf("nox index holds %v for a=y", keys)
	}
}

// A batch of many keys is written in a scattered order, not the queue's (applyBatch).
// Keys are independent, so it must make the notifications, in the queue's order, and the
// cache that writing the keys one at a time in the queue's order makes; with mostly
// updates and with mostly adds.
func TestApply_LargeBatchEqualsKeyByKey(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 11))
		big, small := applyTestInformer(t), applyTestInformer(t)
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%03d", rng.IntN(1000)) // some repeat: fewer distinct keys
		}
		for _, k := range keys[:150] { // half the keys are cached before the batch
			d := []scriptedDelta{{typ: deltaAdded, key: k, obj: k + "=v0"}}
			applyScript(t, big, d, true)
			applyScript(t, small, d, true)
		}
		adds := seed%2 == 1
		var script []scriptedDelta
		for range 500 {
			k := keys[rng.IntN(len(keys))]
			typ := []deltaType{deltaUpdated, deltaUpdated, deltaUpdated, deltaAdded, deltaDeleted, deltaReplaced, deltaSync}[rng.IntN(7)]
			if adds && rng.IntN(4) != 0 {
				typ = deltaAdded
			}
			val := fmt.Sprintf("%s=v%d", k, rng.IntN(3))
			if rng.IntN(20) == 0 {
				val = k + "=bad"
			}
			script = append(script, scriptedDelta{typ: typ, key: k, obj: val, unknown: typ == deltaDeleted && rng.IntN(3) == 0})
		}
		got := applyScript(t, big, script, true)
		var want []string
		var order []string // keys by first arrival: the queue's order
		for _, d := range script {
			if !slices.Contains(order, d.key) {
				order = append(order, d.key)
			}
		}
		if len(order) < scatterAbove {
			t.Fatalf("seed %d: %d keys, a batch below %d is written in the queue's order", seed, len(order), scatterAbove)
		}
		for _, k := range order {
			var mine []scriptedDelta
			for _, d := range script {
				if d.key == k {
					mine = append(mine, d)
				}
			}
			want = append(want, applyScript(t, small, mine, true)...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: one batch of %d keys: %v\nkey by key: %v", seed, len(order), got, want)
		}
		if g, w := dumpStore(big.store), dumpStore(small.store); g != w {
			t.Fatalf("seed %d: one batch's cache: %s\nkey by key: %s", seed, g, w)
		}
	}
}

// BenchmarkWriteBatch measures the writer alone: batches of 1,024 changes to random keys
// of a cache of 50,000 objects with two single-valued indexes (500 and 100 values), as
// W1 of the bench module makes them when the writer is behind (70 % updates, 15 % adds,
// 15 % deletes). The changes are queued and popped outside the timer; ns/op is per change.
func BenchmarkWriteBatch(b *testing.B) {
	type obj struct{ key, ns, app string }
	idle := ListerWatcherFuncs[*obj]{ // never run: the benchmark drives the queue and store
		ListFunc: func(context.Context, ListOptions) (List[*obj], error) { return List[*obj]{}, nil },
		WatchFunc: func(ctx context.Context, _ WatchOptions) (Watch[*obj], error) {
			return ChanWatch[*obj](ctx, nil, nil), nil
		},
	}
	inf, err := New[string, *obj](idle, Options[string, *obj]{
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
		if err := f.addPrepared(o.key, delta[*obj]{typ: typ, object: o}, false, &h); err != nil {
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
