package metrics_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
	"github.com/informer-go/informer/workqueue"
)

// The workload of the root package's BenchmarkPipeline (testkit.W1): 50,000 objects
// listed, then 500,000 events (70 % modify, 15 % add, 15 % delete) drawn from the same
// seed, 2 indexes, 4 handlers with the Block policy.
const (
	pipeInitial = 50_000
	pipeEvents  = 500_000
)

type pipeObj struct {
	Key, Namespace, Name, App, Revision string
	Payload                             []byte
}

func pipeKey(o *pipeObj) string { return o.Key }

type pipeOp = testkit.Op[*pipeObj]

func pipeWorkload() (initial []*pipeObj, ops []pipeOp) {
	return testkit.W1(pipeInitial, pipeEvents, func(i, rev int) *pipeObj {
		ns, name := fmt.Sprintf("ns-%03d", i%100), fmt.Sprintf("obj-%07d", i)
		return &pipeObj{Key: ns + "/" + name, Namespace: ns, Name: name,
			App: fmt.Sprintf("app-%03d", (i*7919)%500), Revision: fmt.Sprint(rev), Payload: make([]byte, 64)}
	})
}

// BenchmarkPipeline runs the root package's BenchmarkPipeline workload twice per round,
// alternating: without metrics (off), and with the informer and its 4 handlers registered
// on a Prometheus registry that is gathered once the events are through, the gather timed
// (on). Informer metrics are read from counters the informer keeps anyway, so the two
// should differ only by noise. Besides events/s (wall time, which a loaded machine
// inflates) it reports cpu-ns/event: the process's CPU time over the event phase, source
// included, per event.
func BenchmarkPipeline(b *testing.B) {
	initial, ops := pipeWorkload()
	for _, on := range []bool{false, true} {
		name := "metrics=off"
		if on {
			name = "metrics=on"
		}
		b.Run(name, func(b *testing.B) { benchPipeline(b, initial, ops, on) })
	}
}

func benchPipeline(b *testing.B, initial []*pipeObj, ops []pipeOp, withMetrics bool) {
	b.ReportAllocs()
	var total, cpu time.Duration
	for range b.N {
		b.StopTimer()
		src := memory.New(pipeKey, memory.Options{})
		for _, o := range initial {
			src.Put(o)
		}
		inf, err := informer.New(src, informer.Options[string, *pipeObj]{
			Name: "bench",
			Key:  func(o *pipeObj) (string, error) { return o.Key, nil },
			Indexers: informer.Indexers[*pipeObj]{
				"namespace": informer.IndexBy(func(o *pipeObj) (string, error) { return o.Namespace, nil }),
				"app":       informer.IndexBy(func(o *pipeObj) (string, error) { return o.App, nil }),
			},
			Revision: func(o *pipeObj) string { return o.Revision },
		})
		if err != nil {
			b.Fatal(err)
		}
		var reg *prometheus.Registry
		var im *metrics.InformerMetrics
		if withMetrics {
			reg = prometheus.NewRegistry()
			if im, err = metrics.RegisterInformer(reg, inf); err != nil {
				b.Fatal(err)
			}
		}
		handlers := make([]*testkit.CallCounter[*pipeObj], 4)
		for i := range handlers {
			handlers[i] = &testkit.CallCounter[*pipeObj]{}
			handlers[i].Expect(pipeInitial)
			if _, err := inf.AddHandler(handlers[i], informer.HandlerOptions{Name: fmt.Sprint("h", i), Policy: informer.Block}); err != nil {
				b.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		runtime.GC()
		b.StartTimer()
		go func() { done <- inf.Run(ctx) }()
		_ = informer.WaitForCacheSync(ctx, inf)
		for _, h := range handlers {
			h.WaitFor(b, 2*time.Minute)
			h.Expect(pipeInitial + pipeEvents)
		}
		start, startCPU := time.Now(), cpuTime()
		for _, op := range ops {
			if op.Delete {
				src.Delete(op.Obj.Key)
			} else {
				src.Put(op.Obj)
			}
		}
		for _, h := range handlers {
			h.WaitFor(b, 2*time.Minute)
		}
		if reg != nil {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
		total += time.Since(start)
		cpu += cpuTime() - startCPU
		b.StopTimer()
		cancel()
		<-done
		if im != nil {
			im.Unregister()
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(pipeEvents*b.N)/total.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(pipeEvents*b.N), "cpu-ns/event")
}

// BenchmarkInformerGather measures one gather of an informer with 4 handlers: the whole
// cost of informer metrics, paid by the scraper.
func BenchmarkInformerGather(b *testing.B) {
	src := memory.New(pipeKey, memory.Options{})
	inf, err := informer.New(src, informer.Options[string, *pipeObj]{
		Name: "bench",
		Key:  func(o *pipeObj) (string, error) { return o.Key, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	im, err := metrics.RegisterInformer(reg, inf)
	if err != nil {
		b.Fatal(err)
	}
	defer im.Unregister()
	for i := range 4 {
		if _, err := inf.AddHandler(informer.HandlerFuncs[*pipeObj]{}, informer.HandlerOptions{Name: fmt.Sprint("h", i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

// nopQueueMetrics is a workqueue.MetricsProvider that leaves every metric out: the queue
// still keeps its timestamps, so it measures the hooks' own cost without Prometheus.
type nopQueueMetrics struct{}

func (nopQueueMetrics) NewDepthMetric(string) workqueue.Gauge                        { return nil }
func (nopQueueMetrics) NewAddsMetric(string) workqueue.Counter                       { return nil }
func (nopQueueMetrics) NewLatencyMetric(string) workqueue.Histogram                  { return nil }
func (nopQueueMetrics) NewWorkDurationMetric(string) workqueue.Histogram             { return nil }
func (nopQueueMetrics) NewRetriesMetric(string) workqueue.Counter                    { return nil }
func (nopQueueMetrics) NewUnfinishedWorkSecondsFunc(string, func() float64)          {}
func (nopQueueMetrics) NewLongestRunningProcessorSecondsFunc(string, func() float64) {}

// BenchmarkQueue measures Add, Get and Done of one item on a queue with no metrics
// (off), with a provider that leaves every metric out (nop: the queue's own bookkeeping
// for metrics) and with a QueueMetrics (prometheus).
func BenchmarkQueue(b *testing.B) {
	for _, mode := range []string{"off", "nop", "prometheus"} {
		b.Run("metrics="+mode, func(b *testing.B) {
			cfg := workqueue.Options[int]{Name: "bench"}
			switch mode {
			case "nop":
				cfg.Metrics = nopQueueMetrics{}
			case "prometheus":
				qm, err := metrics.RegisterQueue(prometheus.NewRegistry(), "bench")
				if err != nil {
					b.Fatal(err)
				}
				defer qm.Unregister()
				cfg.Metrics = qm
			}
			q := workqueue.New(cfg)
			defer q.ShutDown()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				q.Add(i & 1023)
				item, _ := q.Get()
				q.Done(item)
				i++
			}
		})
	}
}
