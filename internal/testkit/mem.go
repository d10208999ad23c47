package testkit

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// LiveHeap is the heap in use (HeapAlloc) after two collections, so that nothing left in a
// sync.Pool (whose victims survive one) is counted.
func LiveHeap() uint64 { return collected().HeapAlloc }

// MemInUse is the heap and goroutine stacks in use (HeapAlloc + StackInuse) after two
// collections, as LiveHeap.
func MemInUse() uint64 {
	m := collected()
	return m.HeapAlloc + m.StackInuse
}

func collected() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// PeakHeap samples the heap in use (HeapAlloc, read through runtime/metrics so that a
// sample does not stop the world) every millisecond until the returned stop is called;
// stop waits for the sampler to end and returns the largest sample, the first one taken
// at once. It costs one goroutine; a peak shorter than a millisecond can be missed.
func PeakHeap() (stop func() uint64) {
	var peak atomic.Uint64
	halt := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(sample)
			peak.Store(max(peak.Load(), sample[0].Value.Uint64()))
			select {
			case <-halt:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(halt); <-ended; return peak.Load() }
}
