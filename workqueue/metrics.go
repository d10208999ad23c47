package workqueue

import (
	"time"

	"github.com/informer-go/informer/clock"
)

// Gauge is a value that goes up and down. prometheus.Gauge implements it.
type Gauge interface {
	// Inc adds one.
	Inc()
	// Dec subtracts one.
	Dec()
}

// Counter is a value that only goes up. prometheus.Counter implements it.
type Counter interface {
	// Inc adds one.
	Inc()
}

// Histogram records observations, in seconds. prometheus.Histogram and prometheus.Summary
// implement it.
type Histogram interface {
	// Observe records one observation of seconds.
	Observe(seconds float64)
}

// ShutDownObserver may be implemented by a MetricsProvider that wants to know when the
// queue shuts down, typically to remove the queue's series so that short-lived queues leave
// none behind. The queue calls QueueShutDown once, with Options.Name, from the first
// ShutDown or ShutDownWithDrain (before the drain), outside its lock; values recorded
// afterwards, while workers finish, may be dropped.
type ShutDownObserver interface {
	// QueueShutDown is called once, with the queue's Options.Name, when it shuts down.
	QueueShutDown(name string)
}

// MetricsProvider creates the metrics of a queue. New calls each method once, with the
// queue's Options.Name. A constructor may return nil to leave that metric out.
//
// The queue updates Gauge, Counter and Histogram values from whichever goroutine made the
// call, possibly concurrently and mostly while holding its lock, so they must be safe for
// concurrent use, fast (an atomic add), and must not call back into the queue. Time is
// measured on the queue's clock.
type MetricsProvider interface {
	// NewDepthMetric returns the gauge of items queued and waiting for Get: it always
	// equals Queue.Len.
	NewDepthMetric(name string) Gauge
	// NewAddsMetric returns the counter of adds that queued an item, or marked an item
	// being processed for another round. Adds merged into an item already queued are not
	// counted.
	NewAddsMetric(name string) Counter
	// NewLatencyMetric returns the histogram of the time from the add that queued an item
	// to the Get that returned it.
	NewLatencyMetric(name string) Histogram
	// NewWorkDurationMetric returns the histogram of the time from Get to Done.
	NewWorkDurationMetric(name string) Histogram
	// NewRetriesMetric returns the counter of AddRateLimited calls that were not ignored.
	NewRetriesMetric(name string) Counter
	// NewUnfinishedWorkSecondsFunc registers value, which returns the total time spent so
	// far by the items being processed (Get called, Done not yet). It is computed when
	// called, in O(items being processed), under the queue's lock; call it when the metric
	// is read, not from a metric hook. It stays callable after shutdown.
	NewUnfinishedWorkSecondsFunc(name string, value func() float64)
	// NewLongestRunningProcessorSecondsFunc registers value, which returns how long the
	// oldest item being processed has been, or 0. It costs as
	// NewUnfinishedWorkSecondsFunc.
	NewLongestRunningProcessorSecondsFunc(name string, value func() float64)
}

// queueMetrics holds a queue's metrics and the timestamps they need. Its methods are
// called with the queue's lock held.
type queueMetrics[T comparable] struct {
	clk          clock.Clock
	depth        Gauge
	adds         Counter
	latency      Histogram
	workDuration Histogram
	retries      Counter

	addedAt   map[T]time.Time // item queued (or marked for requeue) → when
	startedAt map[T]time.Time // item being processed → when Get returned it
}

func newQueueMetrics[T comparable](p MetricsProvider, name string, clk clock.Clock) *queueMetrics[T] {
	return &queueMetrics[T]{
		clk:          clk,
		depth:        orNop[Gauge](p.NewDepthMetric(name)),
		adds:         orNop[Counter](p.NewAddsMetric(name)),
		latency:      orNop[Histogram](p.NewLatencyMetric(name)),
		workDuration: orNop[Histogram](p.NewWorkDurationMetric(name)),
		retries:      orNop[Counter](p.NewRetriesMetric(name)),
		addedAt:      make(map[T]time.Time),
		startedAt:    make(map[T]time.Time),
	}
}

// added records an add that queued item (queued) or marked it for requeue (!queued).
func (m *queueMetrics[T]) added(item T, queued bool) {
	m.adds.Inc()
	if queued {
		m.depth.Inc()
	}
	m.addedAt[item] = m.clk.Now()
}

// requeued records Done putting an item marked for requeue back in the FIFO.
func (m *queueMetrics[T]) requeued() {
	m.depth.Inc()
}

func (m *queueMetrics[T]) got(item T) {
	now := m.clk.Now()
	m.depth.Dec()
	if t, ok := m.addedAt[item]; ok {
		m.latency.Observe(now.Sub(t).Seconds())
		delete(m.addedAt, item)
	}
	m.startedAt[item] = now
}

func (m *queueMetrics[T]) done(item T) {
	if t, ok := m.startedAt[item]; ok {
		m.workDuration.Observe(m.clk.Since(t).Seconds())
		delete(m.startedAt, item)
	}
}

func (q *Queue[T]) unfinishedWorkSeconds() float64 {
	total, _ := q.inProgress()
	return total.Seconds()
}

func (q *Queue[T]) longestRunningProcessorSeconds() float64 {
	_, longest := q.inProgress()
	return longest.Seconds()
}

// inProgress returns the total and the longest time the items being processed have been
// processed for.
func (q *Queue[T]) inProgress() (total, longest time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.metrics.clk.Now()
	for _, t := range q.metrics.startedAt {
		d := now.Sub(t)
		total += d
		longest = max(longest, d)
	}
	return total, longest
}

// nop stands in for a metric the provider left out.
type nop struct{}

func (nop) Inc()            {}
func (nop) Dec()            {}
func (nop) Observe(float64) {}

// orNop returns m, or nop if m is nil.
func orNop[M any](m M) M {
	if any(m) == nil {
		return any(nop{}).(M)
	}
	return m
}
