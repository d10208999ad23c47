package informer

import (
	"sync"

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
func (inf *Informer[K, V]) AfterStop(f func()) (cancel func() bool) { return inf.stopNote.add(f) }

// Done returns a channel closed once the informer has stopped: when Run returns, after
// every handler goroutine has returned.
func (inf *Informer[K, V]) Done() <-chan struct{} { return inf.stopNote.done }

// stopNotice tells that the informer has stopped: it closes done and runs the functions
// added with add, once.
type stopNotice struct {
	done chan struct{}

	mu     sync.Mutex
	closed bool
	seq    uint64
	fns    map[uint64]func()
}

func newStopNotice() *stopNotice { return &stopNotice{done: make(chan struct{})} }

// add runs f once mark is called, or at once if it has been. cancel removes f and reports
// whether it did so before f ran.
func (s *stopNotice) add(f func()) (cancel func() bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f()
		return func() bool { return false }
	}
	s.seq++
	id := s.seq
	if s.fns == nil {
		s.fns = make(map[uint64]func())
	}
	s.fns[id] = f
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.fns[id]
		delete(s.fns, id)
		return ok
	}
}

// mark closes done and runs the functions added, in no particular order.
func (s *stopNotice) Mark() {
	s.mu.Lock()
	s.closed = true
	fs := s.fns
	s.fns = nil
	close(s.done)
	s.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Handlers returns the handlers registered now, in the order they were added. It never
// waits, not even for a stalled handler.
func (inf *Informer[K, V]) Handlers() []*Registration { return inf.proc.Handlers() }
