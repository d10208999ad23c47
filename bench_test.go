package informer_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// benchObj is a small, realistic object: identity, two indexed fields, a revision and a
// payload. The pipeline benchmarks measure what the informer adds on top of such objects.
type benchObj struct {
	Key             string // namespace/name, computed once when the object is built
	Namespace, Name string
	App, Tier       string
	Revision        string
	Payload         []byte
}

func benchKey(o *benchObj) string { return o.Key }

// The workload of the pipeline benchmark (issue "Core pipeline", item 12).
const (
	benchInitial = 50_000
	benchEvents  = 500_000
	benchNS      = 100
	benchApps    = 500
)

// benchOp is one change of the workload: a put of obj, or its delete.
type benchOp = testkit.Op[*benchObj]

// benchWorkload builds the initial objects and the event sequence of W1 (testkit.W1: 70 %
// modify, 15 % add, 15 % delete), all constructed before timing starts.
func benchWorkload() (initial []*benchObj, ops []benchOp) {
	mk := func(i int, rev int) *benchObj {
		o := benchObj0(i)
		o.Revision = fmt.Sprint(rev)
		return o
	}
	return testkit.W1(benchInitial, benchEvents, mk)
}

// benchObj0 returns object i of the benchmarks at revision 0.
func benchObj0(i int) *benchObj {
	ns, name := fmt.Sprintf("ns-%03d", i%benchNS), fmt.Sprintf("obj-%07d", i)
	return &benchObj{
		Key:       ns + "/" + name,
		Namespace: ns,
		Name:      name,
		App:       fmt.Sprintf("app-%03d", (i*7919)%benchApps), // a label: stable across modifies
		Revision:  "0",
		Payload:   make([]byte, 64),
	}
}

func benchOptions() informer.Options[string, *benchObj] {
	return informer.Options[string, *benchObj]{
		Key: func(o *benchObj) (string, error) { return benchKey(o), nil },
		Indexers: informer.Indexers[*benchObj]{
			"namespace": informer.IndexBy(func(o *benchObj) (string, error) { return o.Namespace, nil }),
			"app":       informer.IndexBy(func(o *benchObj) (string, error) { return o.App, nil }),
		},
		Revision: func(o *benchObj) string { return o.Revision },
	}
}

// applyOps feeds the events to the source.
func applyOps(src *memory.Source[string, *benchObj], ops []benchOp) {
	for _, op := range ops {
		if op.Delete {
			src.Delete(benchKey(op.Obj))
		} else {
			src.Put(op.Obj)
		}
	}
}

// BenchmarkPipeline: list 50,000 objects, then 500,000 events (70 % modify, 15 % add, 15 %
// delete) with 2 indexes and 4 handlers, until every handler has seen every event. It
// reports events/s, allocations per event inside the pipeline (the source's own
// allocations, measured by feeding the same events to a source without an informer, are
// subtracted) and the cache's bytes per object beyond the objects themselves.
func BenchmarkPipeline(b *testing.B) {
	initial, ops := benchWorkload()
	srcAllocs := sourceAllocsPerEvent(initial, ops)
	b.ReportAllocs()
	b.ResetTimer()
	var totalDur time.Duration
	var pipeAllocs, bytesPerObj float64
	for range b.N {
		b.StopTimer()
		src := memory.New[string, *benchObj](benchKey, memory.Options{})
		for _, o := range initial {
			src.Put(o)
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)

		inf, err := informer.New[string, *benchObj](src, benchOptions())
		if err != nil {
			b.Fatal(err)
		}
		handlers := make([]*testkit.CallCounter[*benchObj], 4)
		for i := range handlers {
			handlers[i] = &testkit.CallCounter[*benchObj]{}
			handlers[i].Expect(benchInitial)
			inf.AddHandler(handlers[i], informer.HandlerOptions{Policy: informer.Block})
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		b.StartTimer()
		go func() { done <- inf.Run(ctx) }()
		_ = informer.WaitForCacheSync(ctx, inf)
		for _, h := range handlers {
			h.Wait(time.Minute)
			h.Expect(benchInitial + benchEvents)
		}
		b.StopTimer()
		runtime.GC()
		var synced runtime.MemStats
		runtime.ReadMemStats(&synced)
		bytesPerObj = float64(int64(synced.HeapAlloc)-int64(before.HeapAlloc)) / benchInitial
		b.StartTimer()

		start := time.Now()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		applyOps(src, ops)
		for _, h := range handlers {
			h.WaitFor(b, 2*time.Minute)
		}
		totalDur += time.Since(start)
		runtime.ReadMemStats(&m1)
		pipeAllocs = float64(m1.Mallocs-m0.Mallocs)/benchEvents - srcAllocs
		b.StopTimer()
		cancel()
		<-done
		b.StartTimer()
	}
	b.ReportMetric(float64(benchEvents*b.N)/totalDur.Seconds(), "events/s")
	b.ReportMetric(pipeAllocs, "allocs/event")
	b.ReportMetric(bytesPerObj, "cache-B/obj")
}

// sourceAllocsPerEvent measures the memory source's own allocations for the event phase.
func sourceAllocsPerEvent(initial []*benchObj, ops []benchOp) float64 {
	src := memory.New[string, *benchObj](benchKey, memory.Options{})
	for _, o := range initial {
		src.Put(o)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	applyOps(src, ops)
	runtime.ReadMemStats(&m1)
	return float64(m1.Mallocs-m0.Mallocs) / benchEvents
}

// BenchmarkGet measures a cache read by key while nothing changes.
func BenchmarkGet(b *testing.B) {
	initial, _ := benchWorkload()
	src := memory.New[string, *benchObj](benchKey, memory.Options{})
	for _, o := range initial {
		src.Put(o)
	}
	inf, _ := informer.New[string, *benchObj](src, benchOptions())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	_ = informer.WaitForCacheSync(ctx, inf)
	keys := make([]string, len(initial))
	for i, o := range initial {
		keys[i] = benchKey(o)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, ok := inf.Get(keys[i%len(keys)]); !ok {
			b.Fatal("missing")
		}
	}
}

// BenchmarkIndexedUpdates: 50,000 objects listed with 3 indexes, then 200,000 updates that
// each change one index value (the tier) and leave the other two alone, until one handler
// has seen them all. It measures the writer's index upkeep; events/s is the figure.
func BenchmarkIndexedUpdates(b *testing.B) {
	const objects, updates, tiers = 50_000, 200_000, 8
	mk := func(i, rev int) *benchObj {
		o := *benchObj0(i)
		o.Revision = fmt.Sprint(rev)
		o.Tier = fmt.Sprintf("tier-%d", rev%tiers)
		return &o
	}
	initial := make([]*benchObj, objects)
	for i := range initial {
		initial[i] = mk(i, 0)
	}
	ops := make([]*benchObj, updates)
	for j := range ops {
		ops[j] = mk((j*7919)%objects, j+1)
	}
	opts := benchOptions()
	opts.Indexers["tier"] = informer.IndexBy(func(o *benchObj) (string, error) { return o.Tier, nil })
	b.ReportAllocs()
	var total time.Duration
	for range b.N {
		b.StopTimer()
		src := memory.New[string, *benchObj](benchKey, memory.Options{})
		for _, o := range initial {
			src.Put(o)
		}
		inf, err := informer.New[string, *benchObj](src, opts)
		if err != nil {
			b.Fatal(err)
		}
		h := &testkit.CallCounter[*benchObj]{}
		h.Expect(objects)
		inf.AddHandler(h, informer.HandlerOptions{Policy: informer.Block})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- inf.Run(ctx) }()
		h.WaitFor(b, time.Minute)
		h.Expect(objects + updates)
		b.StartTimer()
		start := time.Now()
		for _, o := range ops {
			src.Put(o)
		}
		h.WaitFor(b, 2*time.Minute)
		total += time.Since(start)
		b.StopTimer()
		cancel()
		<-done
		b.StartTimer()
	}
	b.ReportMetric(float64(updates*b.N)/total.Seconds(), "events/s")
}
