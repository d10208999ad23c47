// Package histogram records the informer's latency and size distributions: a lock-free
// histogram with fixed buckets, read as a Snapshot that the metrics package exports.
package histogram

import (
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// Histogram counts observations in fixed buckets. It is lock-free and safe for concurrent
// use; a nil *Histogram ignores observations. Recording one is an atomic add or two, and
// nothing reads them unless asked.
type Histogram struct {
	bounds  []float64       // upper bounds, increasing
	counts  []atomic.Uint64 // len(bounds)+1: the last bucket is +Inf
	sumBits atomic.Uint64   // float64 bits of the sum of observations
}

// New returns a histogram with the given bucket upper bounds, which must increase;
// an observation v falls in the first bucket whose bound is ≥ v, or in the implicit +Inf
// bucket after the last.
func New(bounds ...float64) *Histogram {
	b := append([]float64(nil), bounds...)
	if !sort.Float64sAreSorted(b) {
		panic("informer: New: bounds must increase")
	}
	return &Histogram{bounds: b, counts: make([]atomic.Uint64, len(b)+1)}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	if h == nil {
		return
	}
	i := sort.SearchFloat64s(h.bounds, v) // first bound ≥ v
	h.counts[i].Add(1)
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// ObserveDuration records d in seconds.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

// Snapshot reads the histogram. Concurrent observations may be partly included.
func (h *Histogram) Snapshot() Snapshot {
	if h == nil {
		return Snapshot{}
	}
	s := Snapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = math.Float64frombits(h.sumBits.Load())
	return s
}

// Snapshot is a histogram's content at one moment.
type Snapshot struct {
	Bounds []float64 // bucket upper bounds, increasing; nil for a histogram not kept
	Counts []uint64  // observations per bucket (not cumulative), len(Bounds)+1: the last is +Inf
	Count  uint64    // observations in all
	Sum    float64   // their sum
}

// Cumulative returns the number of observations ≤ each bound, as Prometheus histograms
// report them (the +Inf bucket is Count).
func (s Snapshot) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(s.Bounds))
	var n uint64
	for i, b := range s.Bounds {
		n += s.Counts[i]
		out[b] = n
	}
	return out
}

// The buckets of the histograms an informer keeps.
var (
	// DurationBuckets, in seconds, for lists and delivery latency: 1 ms to about 2 minutes.
	DurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	// WatchDurationBuckets, in seconds, for how long watches stay open: 1 s to 1 hour.
	WatchDurationBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600}
	// ItemBuckets for the objects per list: 1 to 1,048,576, by factors of 4.
	ItemBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}
)
