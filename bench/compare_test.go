package bench

import (
	"os"
	"sync"
	"testing"

	"github.com/informer-go/informer/bench/internal/workload"
)

// The side-by-side workloads of issue #8 (see internal/workload), one sub-benchmark per
// informer, for benchstat:
//
//	go test -run '^$' -bench 'W[1-5]' -benchtime 1x -count 6 . | tee new.txt
//	benchstat -col /side new.txt
//
// Each iteration is one whole workload; -benchtime 1x keeps a W1 iteration to a few
// seconds. `make compare` runs the same workloads interleaved and prints ratios.

func TestMain(m *testing.M) {
	workload.DisableWatchList()
	os.Exit(m.Run())
}

var (
	streamOnce       sync.Once
	w1Stream, w3Strm *workload.Stream
)

func streams() (*workload.Stream, *workload.Stream) {
	streamOnce.Do(func() {
		s := workload.Full
		w1Stream = workload.NewStream(s.W1Objects, s.W1Events)
		w3Strm = workload.NewStream(s.W3Objects, s.W3Events)
	})
	return w1Stream, w3Strm
}

func report(b *testing.B, f workload.Figures, err error, sum workload.Figures) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range f {
		sum[k] += v
	}
}

func bench(b *testing.B, run func(workload.Side) (workload.Figures, error)) {
	for _, side := range workload.Sides {
		b.Run("side="+string(side), func(b *testing.B) { runBench(b, side, run) })
	}
}

// benchOurs runs a variant of a workload on our side only (client-go's side would run as in
// the plain workload), as the sub-benchmark side=ours/<name>.
func benchOurs(b *testing.B, name string, run func(workload.Side) (workload.Figures, error)) {
	b.Run("side=ours/"+name, func(b *testing.B) { runBench(b, workload.Ours, run) })
}

func runBench(b *testing.B, side workload.Side, run func(workload.Side) (workload.Figures, error)) {
	sum := workload.Figures{}
	for range b.N {
		f, err := run(side)
		report(b, f, err, sum)
	}
	for k, v := range sum {
		b.ReportMetric(v/float64(b.N), k)
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkW1: throughput; 50,000 listed, 500,000 events, 2 indexes, 4 handlers. Our
// side runs again keyed by struct{Namespace, Name string} (side=ours/key=struct).
func BenchmarkW1(b *testing.B) {
	s, _ := streams()
	bench(b, func(side workload.Side) (workload.Figures, error) { return workload.W1(side, s, 0) })
	benchOurs(b, "key=struct", func(side workload.Side) (workload.Figures, error) {
		return workload.W1With(side, s, workload.Variant{StructKey: true})
	})
}

// BenchmarkW2: heap overhead per object, 200,000 listed. Our side runs again keyed by
// struct{Namespace, Name string} (side=ours/key=struct).
func BenchmarkW2(b *testing.B) {
	n := workload.Full.W2Objects
	bench(b, func(side workload.Side) (workload.Figures, error) { return workload.W2(side, n) })
	benchOurs(b, "key=struct", func(side workload.Side) (workload.Figures, error) {
		return workload.W2With(side, n, workload.Variant{StructKey: true})
	})
}

// BenchmarkW3: delivery latency to 64 handlers, 100,000 events at a fixed rate.
func BenchmarkW3(b *testing.B) {
	_, s := streams()
	f := workload.Full
	bench(b, func(side workload.Side) (workload.Figures, error) {
		return workload.W3(side, s, f.W3Handlers, f.W3Rate)
	})
}

// BenchmarkW4: W1 with 8 goroutines reading the namespace index meanwhile, with ByIndex
// (an iterator on our side, a new slice per read on client-go's).
func BenchmarkW4(b *testing.B) {
	s, _ := streams()
	readers := workload.Full.W4Readers
	bench(b, func(side workload.Side) (workload.Figures, error) { return workload.W1(side, s, readers) })
}

// BenchmarkW5: relist of 100,000 objects with 1 % changed.
func BenchmarkW5(b *testing.B) {
	bench(b, func(side workload.Side) (workload.Figures, error) { return workload.W5(side, workload.Full.W5Objects) })
}

// TestWorkloadsSmall runs every workload once per side at small sizes: a correctness check
// of the harness (every handler sees every event on both sides), quick under -race.
func TestWorkloadsSmall(t *testing.T) {
	sz := workload.Small
	s1 := workload.NewStream(sz.W1Objects, sz.W1Events)
	s3 := workload.NewStream(sz.W3Objects, sz.W3Events)
	for _, side := range workload.Sides {
		runs := map[string]func() (workload.Figures, error){
			"W1": func() (workload.Figures, error) { return workload.W1(side, s1, 0) },
			"W2": func() (workload.Figures, error) { return workload.W2(side, sz.W2Objects) },
			"W3": func() (workload.Figures, error) { return workload.W3(side, s3, sz.W3Handlers, sz.W3Rate) },
			"W4": func() (workload.Figures, error) { return workload.W1(side, s1, sz.W4Readers) },
			"W1 struct key": func() (workload.Figures, error) {
				return workload.W1With(side, s1, workload.Variant{StructKey: true})
			},
			"W2 struct key": func() (workload.Figures, error) {
				return workload.W2With(side, sz.W2Objects, workload.Variant{StructKey: true})
			},
			"W5": func() (workload.Figures, error) { return workload.W5(side, sz.W5Objects) },
		}
		for name, run := range runs {
			if _, err := run(); err != nil {
				t.Errorf("%s/%s: %v", name, side, err)
			}
		}
	}
}
