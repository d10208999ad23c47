package workload

import (
	"math"
	"math/bits"
)

// histogram is a log-linear latency histogram (16 sub-buckets per power of two, so a
// value is known to within 1/16): recording costs no allocation and no lock, one per
// handler goroutine.
type histogram struct {
	counts [64 * 16]uint64
}

func bucketOf(ns int64) int {
	if ns < 16 {
		if ns < 0 {
			ns = 0
		}
		return int(ns)
	}
	e := bits.Len64(uint64(ns)) - 5 // ns >> e is in [16, 32)
	return (e+1)*16 + int(uint64(ns)>>e) - 16
}

// lower returns the smallest value of bucket b.
func lower(b int) float64 {
	if b < 16 {
		return float64(b)
	}
	e := b/16 - 1
	return float64(uint64(16+b%16) << e)
}

func (h *histogram) record(ns int64) { h.counts[bucketOf(ns)]++ }

func (h *histogram) add(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// quantile returns the q-quantile (0 < q ≤ 1) in nanoseconds, the midpoint of its bucket.
func (h *histogram) quantile(q float64) float64 {
	var total uint64
	for _, c := range h.counts {
		total += c
	}
	if total == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return (lower(b) + lower(b+1)) / 2
		}
	}
	return math.NaN()
}
