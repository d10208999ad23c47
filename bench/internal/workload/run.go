package workload

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/informer-go/informer/internal/testkit"
)

// Sizes of the workloads.
type Sizes struct {
	W1Objects, W1Events int     // W1 and W4: objects listed, then events
	W2Objects           int     // objects cached in W2
	W3Objects, W3Events int     // W3: objects listed, then events
	W3Handlers          int     // handlers W3 fans out to
	W3Rate              float64 // events/s the W3 source emits at
	W4Readers           int     // goroutines reading an index during W4
	W5Objects           int     // objects relisted in W5
}

// Full are the sizes of issue #8.
var Full = Sizes{
	W1Objects: 50_000, W1Events: 500_000,
	W2Objects: 200_000,
	W3Objects: 10_000, W3Events: 100_000, W3Handlers: 64, W3Rate: 20_000,
	W4Readers: 8,
	W5Objects: 100_000,
}

// Small are sizes for a quick correctness run (the race-detector test).
var Small = Sizes{
	W1Objects: 300, W1Events: 3_000,
	W2Objects: 500,
	W3Objects: 100, W3Events: 1_000, W3Handlers: 8, W3Rate: 0,
	W4Readers: 2,
	W5Objects: 1_000,
}

const timeout = 5 * time.Minute

// W4Cap bounds a W4 run: when the readers slow the writer so much that the events have not
// all been delivered by then, the run stops and the writer's rate is the events the
// slowest handler received per second.
var W4Cap = 30 * time.Second

// Figures of one run: name → value.
type Figures map[string]float64

// profileEvents starts a CPU profile of W1's event phase when WORKLOAD_CPUPROFILE names a
// file (each run overwrites it; a variant's run writes to the name with suffix appended),
// and returns the function that stops it.
//
// WORKLOAD_ALLOCPROFILE names files for the allocations of the event phase: the heap
// profile is written at its start (<name><suffix>.before) and end (.after), to be read
// with go tool pprof -sample_index=alloc_objects -diff_base <before> <after>.
func profileEvents(suffix string) func() {
	if path := os.Getenv("WORKLOAD_ALLOCPROFILE"); path != "" {
		writeAllocs(path + suffix + ".before")
		stopCPU := profileCPU(suffix)
		return func() { stopCPU(); writeAllocs(path + suffix + ".after") }
	}
	return profileCPU(suffix)
}

// writeAllocs writes the heap profile, with the allocations counted up to now, to path.
func writeAllocs(path string) {
	runtime.GC() // the profile's counts are those of the last completed cycle
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	pprof.Lookup("allocs").WriteTo(f, 0)
}

// profileCPU is profileEvents' CPU profile.
func profileCPU(suffix string) func() {
	path := os.Getenv("WORKLOAD_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	path += suffix
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// writeHeapProfile writes the live heap to the file WORKLOAD_HEAPPROFILE names, if set
// (W2: what the informer keeps per object).
func writeHeapProfile() {
	path := os.Getenv("WORKLOAD_HEAPPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	pprof.Lookup("heap").WriteTo(f, 0)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// W1 lists s.Objects objects, then streams s.Events events through 2 indexes and 4
// handlers and times until every handler has seen every event. With readers > 0 (W4) that
// many goroutines read the namespace index in a loop while the events flow.
//
// Figures: events/s, allocs/event and bytes/event (the whole process during the event
// phase: the sources allocate nothing per event, the events are pre-built), cpu-s and
// cpu-ns/event (process CPU time of the event phase); with readers, reads/s.
func W1(side Side, s *Stream, readers int) (Figures, error) {
	return W1With(side, s, Variant{Readers: readers})
}

// Variant is how a run of W1, W2 or W4 differs from the plain one, on our side only
// (client-go's side runs as in the plain workload).
type Variant struct {
	// Readers read the namespace index meanwhile (W4).
	Readers int
	// StructKey keys our informer by struct{Namespace, Name string} instead of the
	// "namespace/name" string client-go uses.
	StructKey bool
}

// W1With is W1 (and W4, with readers) as v says.
func W1With(side Side, s *Stream, v Variant) (Figures, error) {
	readers := v.Readers
	r, stop, err := startRig(side, rigConfig{
		lists:     []*listSpec{{items: s.Initial, rev: s.InitialRev}},
		stream:    s,
		handlers:  4,
		structKey: v.StructKey,
	}, s.Objects, s.Events)
	if err != nil {
		return nil, err
	}
	defer stop()

	var reads atomic.Int64
	var halt atomic.Bool
	var wg sync.WaitGroup
	readGate := make(chan struct{})
	for g := range readers {
		wg.Go(func() {
			<-readGate
			var n int64
			for i := g; !halt.Load(); i++ {
				r.byIndex("namespace", fmt.Sprintf("ns-%03d", i%namespaces))
				n++
			}
			reads.Add(n)
		})
	}

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	suffix := ""
	if v != (Variant{}) {
		suffix = fmt.Sprintf(".readers%d", v.Readers)
		if v.StructKey {
			suffix += ".structkey"
		}
	}
	stopProfile := profileEvents(suffix)
	c0 := cpuTime()
	t0 := time.Now()
	close(readGate)
	r.release()
	limit := timeout
	if readers > 0 {
		limit = W4Cap
	}
	err = r.wait(limit)
	d := time.Since(t0)
	c1 := cpuTime()
	stopProfile()
	runtime.ReadMemStats(&m1)
	halt.Store(true)
	wg.Wait()
	ev := float64(s.Events)
	if err != nil {
		if readers == 0 || !errors.Is(err, errTimeout) {
			return nil, err
		}
		// W4 cut short: the writer's rate is what the slowest handler received.
		least := int64(s.Events)
		for _, h := range r.handlers {
			least = min(least, h.n.Load()-int64(s.Objects))
		}
		ev = float64(least)
	}
	f := Figures{
		"events/s":     ev / d.Seconds(),
		"allocs/event": float64(m1.Mallocs-m0.Mallocs) / ev,
		"B/event":      float64(m1.TotalAlloc-m0.TotalAlloc) / ev,
		"cpu-s":        (c1 - c0).Seconds(),
		"cpu-ns/event": float64(c1-c0) / ev,
	}
	if readers > 0 {
		f["reads/s"] = float64(reads.Load()) / d.Seconds()
	}
	return f, nil
}

// W2 lists n objects into an informer with 2 indexes and 4 handlers, waits until every
// handler has seen them, and reports the live heap the informer adds beyond the objects
// themselves, per object ("B/object"). The objects exist before the baseline is taken and
// the source forgets its list once served, so whichever copy the informer keeps is counted
// once, in the baseline (client-go shallow-copies every listed item, as it does with a
// real API server; the original array is then garbage).
func W2(side Side, n int) (Figures, error) { return W2With(side, n, Variant{}) }

// W2With is W2 as v says (StructKey).
func W2With(side Side, n int, v Variant) (Figures, error) {
	spec := &listSpec{items: list(n, "1"), rev: "1"}
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err := newRig(side, rigConfig{lists: []*listSpec{spec}, handlers: 4, structKey: v.StructKey})
	spec = nil
	if err != nil {
		return nil, err
	}
	r.expect(int64(n))
	stop := r.start()
	defer stop()
	if err := r.wait(timeout); err != nil {
		return nil, err
	}
	time.Sleep(50 * time.Millisecond) // let the queues go idle
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	writeHeapProfile()
	runtime.KeepAlive(r)
	return Figures{"B/object": (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)}, nil
}

// W3 lists s.Objects objects into an informer with handlers handlers, then the source
// emits s.Events events at rate events/s (0: as fast as it can); each handler records,
// for every event, the time from the source's emit to its call. Figures: p50-µs, p99-µs,
// and events/s reached.
func W3(side Side, s *Stream, handlers int, rate float64) (Figures, error) {
	emit := make([]int64, s.Events+1)
	r, stop, err := startRig(side, rigConfig{
		lists:    []*listSpec{{items: s.Initial, rev: s.InitialRev}},
		stream:   s,
		handlers: handlers,
		emit:     emit,
		base:     time.Now(),
		rate:     rate,
	}, s.Objects, s.Events)
	if err != nil {
		return nil, err
	}
	defer stop()
	runtime.GC()
	t0 := time.Now()
	r.release()
	if err := r.wait(timeout); err != nil {
		return nil, err
	}
	d := time.Since(t0)
	var h histogram
	for _, c := range r.handlers {
		h.add(c.hist)
	}
	return Figures{
		"p50-µs":   h.quantile(0.50) / 1e3,
		"p99-µs":   h.quantile(0.99) / 1e3,
		"events/s": float64(s.Events) / d.Seconds(),
	}, nil
}

// W5 lists n objects into an informer with 2 indexes and 4 handlers, then the watch
// expires and the informer relists: the same n objects (new copies, as a real relist
// decodes them), 1 % of them changed (new revision). The relist is timed from the start
// of the second List call (so the reflectors' different backoff after an expired watch
// does not count) until every handler has seen the 1 % as updates (the unchanged 99 % are
// resyncs, which reach no handler on either side). Figures: relist-ms, peak-MB (the
// highest heap, live plus not yet collected, above the steady state before the relist,
// sampled every ms) and alloc-MB (bytes allocated during the relist).
func W5(side Side, n int) (Figures, error) {
	second := list(n, "1")
	changed := 0
	for i := range second {
		if i%100 == 99 {
			fill(&second[i], i, "3", 0)
			second[i].Data = map[string]string{"payload": payload, "changed": "yes"}
			changed++
		}
	}
	var listStart atomic.Int64
	base := time.Now()
	r, err := newRig(side, rigConfig{
		lists:    []*listSpec{{items: list(n, "1"), rev: "1"}, {items: second, rev: "3"}},
		expire:   true,
		handlers: 4,
		onList: func(call int) {
			if call == 1 {
				listStart.Store(int64(time.Since(base)))
			}
		},
	})
	second = nil
	if err != nil {
		return nil, err
	}
	stop, err := r.startListed(n, changed)
	if err != nil {
		return nil, err
	}
	defer stop()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	stopPeak := testkit.PeakHeap()
	r.release()
	err = r.wait(timeout)
	end := time.Since(base)
	runtime.ReadMemStats(&m1)
	peak := stopPeak()
	if err != nil {
		return nil, err
	}
	return Figures{
		"relist-ms": float64(end-time.Duration(listStart.Load())) / 1e6,
		"peak-MB":   (float64(peak) - float64(m0.HeapAlloc)) / 1e6,
		"alloc-MB":  float64(m1.TotalAlloc-m0.TotalAlloc) / 1e6,
	}, nil
}
