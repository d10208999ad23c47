package informer

import (
	"github.com/informer-go/informer/internal/histogram"
)

// Histogram is a histogram's content at one moment: Stats and HandlerStats carry them, and
// the metrics package exports them as Prometheus histograms. It is a value the informer
// copies out when asked; changing it changes nothing in the informer.
type Histogram struct {
	// Bounds are the buckets' upper bounds, increasing; nil for a histogram not kept.
	Bounds []float64
	// Counts are the observations per bucket, not cumulative: len(Bounds)+1 of them, the
	// last one for the observations above every bound (+Inf).
	Counts []uint64
	// Count is the number of observations in all.
	Count uint64
	// Sum is the sum of all observations.
	Sum float64
}

// Cumulative returns the number of observations ≤ each bound, as Prometheus histograms
// report them (the +Inf bucket is Count). It allocates a map of len(Bounds) entries.
func (h Histogram) Cumulative() map[float64]uint64 { return histogram.Snapshot(h).Cumulative() }

// AfterStop arranges for f to run once the informer has stopped: when Run returns, after
// every handler goroutine has returned. If the informer has stopped already f runs at once,
// in the caller's goroutine. The returned function cancels the call; it reports whether it
// did so before f was started. The metrics package uses it to remove an informer's series
// when it stops.
func (inf *Informer[K, V]) AfterStop(f func()) (cancel func() bool) {
	inf.stopMu.Lock()
	if inf.doneClosed {
		inf.stopMu.Unlock()
		f()
		return func() bool { return false }
	}
	inf.stopSeq++
	id := inf.stopSeq
	if inf.afterStop == nil {
		inf.afterStop = make(map[uint64]func())
	}
	inf.afterStop[id] = f
	inf.stopMu.Unlock()
	return func() bool {
		inf.stopMu.Lock()
		defer inf.stopMu.Unlock()
		_, ok := inf.afterStop[id]
		delete(inf.afterStop, id)
		return ok
	}
}

// Done returns a channel closed once the informer has stopped: when Run returns, after
// every handler goroutine has returned.
func (inf *Informer[K, V]) Done() <-chan struct{} { return inf.done }

// markStopped closes Done and runs the AfterStop functions.
func (inf *Informer[K, V]) markStopped() {
	inf.stopMu.Lock()
	inf.doneClosed = true
	fs := inf.afterStop
	inf.afterStop = nil
	close(inf.done)
	inf.stopMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Handlers returns the handlers registered now, in the order they were added. It never
// waits, not even for a stalled handler.
func (inf *Informer[K, V]) Handlers() []*Registration { return inf.proc.handlers() }
