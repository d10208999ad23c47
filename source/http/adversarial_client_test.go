package httpsource

import (
	"context"
	"errors"
	"flag"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer"
)

// The adversarial benchmarks of the client (make adversarial) run only with -adversarial.
var adversarial = flag.Bool("adversarial", false, "run the adversarial benchmarks")

// BenchmarkAdversarialEndlessBatch: a server streams changes of 1 KiB marked as one
// revision ("11~") forever to a Client with MaxBatchBytes 16 MiB (the default is 256 MiB);
// reports the peak heap growth until the watch ends, and whether it ended with the bound's
// error.
func BenchmarkAdversarialEndlessBatch(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	const bound = 16 << 20
	var lists atomic.Int64
	c := newTestClient(b, endlessBatch(b, 1<<10, &lists).URL, ClientOptions[*wiretest.Obj]{MaxBatchBytes: bound})
	before := memInUse()
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "10"})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	done := make(chan error, 1)
	go func() { _, err := w.Next(); done <- err }()
	var peak uint64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for err == nil {
		select {
		case err = <-done:
		case <-tick.C:
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}
	b.ReportMetric(float64(int64(peak)-int64(before))/(1<<20), "peak-heap-MiB@16MiB-bound")
	b.ReportMetric(float64(boolInt(errors.Is(err, informer.ErrBadInput) && strings.Contains(err.Error(), "MaxBatchBytes"))), "ended-by-bound")
}

// memInUse is the heap and goroutine stacks in use, after two collections, so that
// nothing left in a sync.Pool (whose victims survive one) is counted.
func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
