package metrics

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer/workqueue"
)

// QueueMetrics is the registration of one work queue's workqueue_* series, and the
// workqueue.MetricsProvider that feeds them: set it as the queue's Config.Metrics. It
// serves one queue; its series are labelled with the name given to RegisterQueue, and the
// name the queue passes to the provider is not used.
type QueueMetrics struct {
	reg prometheus.Registerer
	set *collectorSet

	depth        prometheus.Gauge
	adds         prometheus.Counter
	latency      prometheus.Histogram
	workDuration prometheus.Histogram
	retries      prometheus.Counter
	unfinished   funcGauge
	longest      funcGauge

	unregistered atomic.Bool
}

// queueBuckets are the buckets of the queue and work duration histograms: 10 ns to 1000 s,
// one per power of ten, as client-go's and controller-runtime's. Scrapes in the protobuf
// format also get a native histogram (bucket factor 1.1).
var queueBuckets = prometheus.ExponentialBuckets(10e-9, 10, 12)

// RegisterQueue registers the workqueue_* series of the queue named name on reg (see the
// package documentation) and returns the provider to set as the queue's Config.Metrics:
//
//	qm, err := metrics.RegisterQueue(reg, "pods")
//	q := workqueue.New(workqueue.Options[string]{Name: "pods", Metrics: qm})
//	...
//	q.ShutDown() // removes the series
//
// The series are removed when the queue shuts down (the first ShutDown or
// ShutDownWithDrain), or earlier by Unregister.
//
// It fails, registering nothing, if reg refuses the series, typically with a
// prometheus.AlreadyRegisteredError because a queue of the same name is registered on reg.
func RegisterQueue(reg prometheus.Registerer, name string) (*QueueMetrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: RegisterQueue: nil Registerer")
	}
	m := newQueueMetrics(name)
	if err := reg.Register(m.set); err != nil {
		return nil, fmt.Errorf("metrics: registering queue %q: %w", name, err)
	}
	m.reg = reg
	return m, nil
}

func newQueueMetrics(name string) *QueueMetrics {
	labels := prometheus.Labels{"name": name}
	histogram := func(n, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem:                       "workqueue",
			Name:                            n,
			Help:                            help,
			ConstLabels:                     labels,
			Buckets:                         queueBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		})
	}
	m := &QueueMetrics{
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "depth", ConstLabels: labels,
			Help: "Current depth of the work queue: items waiting for Get.",
		}),
		adds: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "adds_total", ConstLabels: labels,
			Help: "Total number of adds handled by the work queue (adds merged into an item already queued are not counted).",
		}),
		latency:      histogram("queue_duration_seconds", "How long in seconds an item stays in the work queue before being requested."),
		workDuration: histogram("work_duration_seconds", "How long in seconds processing an item from the work queue takes."),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "retries_total", ConstLabels: labels,
			Help: "Total number of retries (rate-limited adds) handled by the work queue.",
		}),
		unfinished: funcGauge{desc: prometheus.NewDesc("workqueue_unfinished_work_seconds",
			"How many seconds of work has been done that is in progress and hasn't been observed by work_duration. "+
				"Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
			nil, labels)},
		longest: funcGauge{desc: prometheus.NewDesc("workqueue_longest_running_processor_seconds",
			"How many seconds has the longest running processor for the work queue been running.",
			nil, labels)},
	}
	m.set = &collectorSet{m.depth, m.adds, m.latency, m.workDuration, m.retries, &m.unfinished, &m.longest}
	return m
}

// NewDepthMetric returns the workqueue_depth gauge.
func (m *QueueMetrics) NewDepthMetric(string) workqueue.Gauge { return m.depth }

// NewAddsMetric returns the workqueue_adds_total counter.
func (m *QueueMetrics) NewAddsMetric(string) workqueue.Counter { return m.adds }

// NewLatencyMetric returns the workqueue_queue_duration_seconds histogram.
func (m *QueueMetrics) NewLatencyMetric(string) workqueue.Histogram { return m.latency }

// NewWorkDurationMetric returns the workqueue_work_duration_seconds histogram.
func (m *QueueMetrics) NewWorkDurationMetric(string) workqueue.Histogram { return m.workDuration }

// NewRetriesMetric returns the workqueue_retries_total counter.
func (m *QueueMetrics) NewRetriesMetric(string) workqueue.Counter { return m.retries }

// NewUnfinishedWorkSecondsFunc makes value the source of workqueue_unfinished_work_seconds,
// called when the registry is gathered. The series is absent until it is set.
func (m *QueueMetrics) NewUnfinishedWorkSecondsFunc(_ string, value func() float64) {
	m.unfinished.set(value)
}

// NewLongestRunningProcessorSecondsFunc makes value the source of
// workqueue_longest_running_processor_seconds, called when the registry is gathered. The
// series is absent until it is set.
func (m *QueueMetrics) NewLongestRunningProcessorSecondsFunc(_ string, value func() float64) {
	m.longest.set(value)
}

// Unregister removes every series of the queue from the registry now, rather than when
// the queue shuts down. It reports whether it removed them: false on a second call or after
// the shutdown removed them. It does not shut the queue down. The queue may go on updating
// the metrics, which are no longer exported. The queue of a controller (ControllerMetrics.Queue) is unregistered with the
// controller: its Unregister does nothing and returns false.
func (m *QueueMetrics) Unregister() bool {
	return m.reg != nil && !m.unregistered.Swap(true) && m.reg.Unregister(m.set)
}

// QueueShutDown removes the queue's series when it shuts down (workqueue.ShutDownObserver).
// The provider of a controller's queue does nothing: the series go with the controller's.
func (m *QueueMetrics) QueueShutDown(string) { m.Unregister() }

var (
	_ workqueue.MetricsProvider  = (*QueueMetrics)(nil)
	_ workqueue.ShutDownObserver = (*QueueMetrics)(nil)
)

// funcGauge is a gauge whose value a function computes when it is collected; it has no
// series until the function is set.
type funcGauge struct {
	desc  *prometheus.Desc
	value atomic.Pointer[func() float64]
}

func (g *funcGauge) set(value func() float64) { g.value.Store(&value) }

// Describe sends the gauge's description.
func (g *funcGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect calls the function, if set, and sends its value.
func (g *funcGauge) Collect(ch chan<- prometheus.Metric) {
	if f := g.value.Load(); f != nil && *f != nil {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, (*f)())
	}
}

// collectorSet is collectors registered and unregistered together, so that either all of
// them are registered or none is.
type collectorSet []prometheus.Collector

// Describe sends the descriptions of every collector of the set.
func (s *collectorSet) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range *s {
		c.Describe(ch)
	}
}

// Collect collects every collector of the set.
func (s *collectorSet) Collect(ch chan<- prometheus.Metric) {
	for _, c := range *s {
		c.Collect(ch)
	}
}
