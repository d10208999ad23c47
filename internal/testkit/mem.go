package testkit

import "runtime"

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
