package informer

// The read API yields iterators; these collect them into the slices tests compare. They
// are exported for the package's external tests too (this file is compiled only in tests).

import (
	"iter"
	"slices"
)

// ReadList returns every object of r in key order.
func ReadList[K comparable, V any](r Reader[K, V]) []V { return seqValues(r.All()) }

// ReadKeys returns every key of r in key order.
func ReadKeys[K comparable, V any](r Reader[K, V]) []K { return seqKeys(r.All()) }

// ReadByIndex returns the objects r.ByIndex yields, in key order.
func ReadByIndex[K comparable, V any](r Reader[K, V], index, value string) ([]V, error) {
	seq, err := r.ByIndex(index, value)
	return seqValues(seq), err
}

// ReadIndexKeys returns the keys r.ByIndex yields, in key order.
func ReadIndexKeys[K comparable, V any](r Reader[K, V], index, value string) ([]K, error) {
	seq, err := r.ByIndex(index, value)
	return seqKeys(seq), err
}

// ReadIndexValues returns the values r.IndexValues yields, in order.
func ReadIndexValues[K comparable, V any](r Reader[K, V], index string) ([]string, error) {
	seq, err := r.IndexValues(index)
	return slices.Collect(seq), err
}

func seqValues[K comparable, V any](seq iter.Seq2[K, V]) []V {
	var out []V
	for _, v := range seq {
		out = append(out, v)
	}
	return out
}

func seqKeys[K comparable, V any](seq iter.Seq2[K, V]) []K {
	var out []K
	for k := range seq {
		out = append(out, k)
	}
	return out
}
