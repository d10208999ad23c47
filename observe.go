package informer

import (
	"github.com/informer-go/informer/internal/histogram"
)

// HistogramSnapshot is a histogram's content at one moment: Stats and HandlerStats carry
// them, and the metrics package exports them as Prometheus histograms. Bounds are the
// bucket upper bounds, increasing (nil for a histogram not kept); Counts the observations
// per bucket, not cumulative, with a last one for +Inf; Count and Sum the number and sum
// of all observations. Cumulative returns the counts as Prometheus reports them.
type HistogramSnapshot = histogram.Snapshot

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
