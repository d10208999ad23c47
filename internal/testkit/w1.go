package testkit

import (
	"math/rand/v2"
	"testing"
)

// Op is one change of a generated workload: the object of Obj, or its delete.
type Op[V any] struct {
	// Obj is the object put, or the last state of the object deleted.
	Obj V
	// Delete says the change deletes Obj.
	Delete bool
}

// W1 builds bench/'s W1 workload, the one the pipeline benchmarks of every package run:
// initial objects listed (ids 0 to initial-1, revision 0), then events changes drawn from
// a fixed seed, 70 % a modify of a live object, 15 % an add of a new id, 15 % a delete of
// a live object; change e has revision e+1. mk builds the object of an id at a revision.
// The same arguments give the same workload in every package and run.
func W1[V any](initial, events int, mk func(id, rev int) V) (objs []V, ops []Op[V]) {
	rng := rand.New(rand.NewPCG(1, 2))
	live := make([]int, 0, 2*initial)
	objs = make([]V, 0, initial)
	for i := range initial {
		objs = append(objs, mk(i, 0))
		live = append(live, i)
	}
	next := initial
	ops = make([]Op[V], 0, events)
	for e := range events {
		switch r := rng.IntN(100); {
		case r < 70 && len(live) > 0:
			ops = append(ops, Op[V]{Obj: mk(live[rng.IntN(len(live))], e+1)})
		case r < 85 || len(live) == 0:
			ops = append(ops, Op[V]{Obj: mk(next, e+1)})
			live = append(live, next)
			next++
		default:
			j := rng.IntN(len(live))
			i := live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			ops = append(ops, Op[V]{Obj: mk(i, e+1), Delete: true})
		}
	}
	return objs, ops
}

// Seeds returns the seeds a seeded test runs: only, if it is not zero (to reproduce a
// failure); else 1 to set if set > 0 (a -model.seeds flag); else 1 to n, or 1 to short
// with -short.
func Seeds(n, short, set int, only uint64) []uint64 {
	if only != 0 {
		return []uint64{only}
	}
	if testing.Short() {
		n = short
	}
	if set > 0 {
		n = set
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}
