package testkit

import "runtime"

// MemInUse is the heap and goroutine stacks in use (HeapAlloc + StackInuse) after two
// collections, so that nothing left in a sync.Pool (whose victims survive one) is counted.
func MemInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}
