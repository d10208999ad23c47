package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/workqueue"
)

// noDelay is a RateLimiter that retries at once.
type noDelay[T comparable] struct{}

func (noDelay[T]) When(T) time.Duration { return 0 }
func (noDelay[T]) Forget(T)             {}
func (noDelay[T]) NumRequeues(T) int    { return 0 }

// TestQueueSeries drives a queue on a fake clock and checks every workqueue_* series, then
// that Unregister leaves none.
func TestQueueSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	qm, err := metrics.RegisterQueue(reg, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	// Registered but not yet given to a queue: the gauges computed by the queue are absent.
	expectSeries(t, reg, exposition(
		`workqueue_depth{name="jobs"} 0`,
	), "workqueue_depth", "workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds")

	clk := clock.NewFake(time.Unix(1_000_000, 0))
	q := workqueue.New(workqueue.Options[string]{Name: "jobs", Clock: clk, Metrics: qm, RateLimiter: noDelay[string]{}})
	q.Add("a")
	q.Add("b")
	q.Add("a") // merged: not an add
	clk.Step(2 * time.Second)
	get := func(want string) {
		t.Helper()
		if got, _ := q.Get(); got != want {
			t.Fatalf("Get: %q, want %q", got, want)
		}
	}
	get("a") // waited 2 s
	clk.Step(time.Second)
	get("b") // waited 3 s
	clk.Step(500 * time.Millisecond)
	// a has been processed for 1.5 s, b for 0.5 s.
	expectSeries(t, reg, exposition(
		`workqueue_depth{name="jobs"} 0`,
		`workqueue_adds_total{name="jobs"} 2`,
		`workqueue_unfinished_work_seconds{name="jobs"} 2`,
		`workqueue_longest_running_processor_seconds{name="jobs"} 1.5`,
	), "workqueue_depth", "workqueue_adds_total", "workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds")

	q.Add("a")            // a is being processed: queued again on Done (an add)
	q.Done("a")           // worked 1.5 s; a queued again
	q.AddRateLimited("b") // a retry, at once: b is being processed, queued again on Done
	q.Done("b")           // worked 0.5 s; b queued again
	expectSeries(t, reg, exposition(
		`workqueue_depth{name="jobs"} 2`,
		`workqueue_adds_total{name="jobs"} 4`,
		`workqueue_retries_total{name="jobs"} 1`,
		`workqueue_unfinished_work_seconds{name="jobs"} 0`,
		`workqueue_longest_running_processor_seconds{name="jobs"} 0`,
	), "workqueue_depth", "workqueue_adds_total", "workqueue_retries_total", "workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds")
	if n, sum := histogram(t, reg, "workqueue_queue_duration_seconds"); n != 2 || sum != 5 {
		t.Errorf("workqueue_queue_duration_seconds: %d samples summing to %v, want 2 summing to 5", n, sum)
	}
	if n, sum := histogram(t, reg, "workqueue_work_duration_seconds"); n != 2 || sum != 2 {
		t.Errorf("workqueue_work_duration_seconds: %d samples summing to %v, want 2 summing to 2", n, sum)
	}
	// The buckets are client-go's: 2 s and 3 s fall in the le="10" bucket, not le="1".
	expectSeries(t, reg, exposition(histogramSamples("workqueue_queue_duration_seconds", `name="jobs"`,
		[]string{"1e-08", "1e-07", "1e-06", "9.999999999999999e-06", "9.999999999999999e-05", "0.001", "0.01", "0.1", "1", "10", "100", "1000"},
		[]int{0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2}, 2, "5")...), "workqueue_queue_duration_seconds")
	lint(t, reg)

	q.ShutDown() // removes the series
	expectNoSeries(t, reg)
	if qm.Unregister() {
		t.Error("Unregister after ShutDown removed the series: true, want false")
	}
	q.ShutDown() // a second shutdown changes nothing
	again, err := metrics.RegisterQueue(reg, "jobs")
	if err != nil {
		t.Fatalf("RegisterQueue after the queue shut down: %v", err)
	}
	again.Unregister()
	// The queue may still be used; nothing is exported.
	get("a")
	q.Done("a")
	expectNoSeries(t, reg)
}

// TestQueueNames: two queues of one name cannot be registered at once; once the first is
// unregistered the name is free.
func TestQueueNames(t *testing.T) {
	expectNames(t, prometheus.NewRegistry(), metrics.RegisterQueue, "jobs", "other", "workqueue_depth")
}
