package metrics

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer/controller"
	"github.com/informer-go/informer/workqueue"
)

// ControllerMetrics is the registration of one controller's controller_runtime_* series
// and of its queue's workqueue_* series, and the controller.MetricsProvider that feeds the
// former: set it as the controller's Options.Metrics, and Queue() as its
// Options.QueueMetrics. It serves one controller; its series are labelled with the name
// given to RegisterController, and the name the controller passes is not used.
type ControllerMetrics struct {
	reg   prometheus.Registerer
	set   *collectorSet
	queue *QueueMetrics

	total    *prometheus.CounterVec
	errors   prometheus.Counter
	terminal prometheus.Counter
	panics   prometheus.Counter
	time     prometheus.Histogram
	active   prometheus.Gauge
	workers  funcGauge

	unregistered atomic.Bool
}

// reconcileBuckets are controller-runtime's buckets for
// controller_runtime_reconcile_time_seconds: 5 ms to 60 s.
var reconcileBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6,
	0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60}

// outcomes are every controller.Outcome, each given a reconcile_total series at 0 on
// registration.
var outcomes = [...]controller.Outcome{
	controller.OutcomeSuccess, controller.OutcomeError, controller.OutcomeRequeue,
	controller.OutcomeRequeueAfter, controller.OutcomeTerminal,
}

// RegisterController registers the series of the controller named name on reg — its
// controller_runtime_* series labelled controller=name, and the workqueue_* series of its
// queue labelled name=name (see the package documentation) — and returns the providers to
// configure the controller with:
//
//	cm, err := metrics.RegisterController(reg, "apps")
//	c, err := controller.New(r, controller.Options[string]{
//		Name: "apps", Metrics: cm, QueueMetrics: cm.Queue(),
//	})
//	...
//	err = c.Start(ctx) // returns once stopped; the series are gone then
//
// The series are removed when the controller stops (Start returns, or Shutdown ends a
// controller never started), or earlier by Unregister.
//
// It fails, registering nothing, if reg refuses the series, typically with a
// prometheus.AlreadyRegisteredError because a controller or queue of the same name is
// registered on reg.
func RegisterController(reg prometheus.Registerer, name string) (*ControllerMetrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: RegisterController: nil Registerer")
	}
	m := newControllerMetrics(name)
	if err := reg.Register(m.set); err != nil {
		return nil, fmt.Errorf("metrics: registering controller %q: %w", name, err)
	}
	m.reg = reg
	return m, nil
}

func newControllerMetrics(name string) *ControllerMetrics {
	labels := prometheus.Labels{"controller": name}
	counter := func(n, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: n, Help: help, ConstLabels: labels})
	}
	m := &ControllerMetrics{
		queue: newQueueMetrics(name),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_reconcile_total", ConstLabels: labels,
			Help: "Total number of reconciliations per controller, by result: success, error, requeue, requeue_after, terminal.",
		}, []string{"result"}),
		errors:   counter("controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller (terminal errors and panics included)."),
		terminal: counter("controller_runtime_terminal_reconcile_errors_total", "Total number of terminal reconciliation errors per controller."),
		panics:   counter("controller_runtime_reconcile_panics_total", "Total number of reconciliation panics per controller."),
		time: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "controller_runtime_reconcile_time_seconds", ConstLabels: labels,
			Help:    "Length of time per reconciliation per controller.",
			Buckets: reconcileBuckets,
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "controller_runtime_active_workers", ConstLabels: labels,
			Help: "Number of currently used workers per controller.",
		}),
		workers: funcGauge{desc: prometheus.NewDesc("controller_runtime_max_concurrent_reconciles",
			"Maximum number of concurrent reconciles per controller.", nil, labels)},
	}
	for _, o := range outcomes {
		m.total.WithLabelValues(o.String())
	}
	m.set = &collectorSet{m.total, m.errors, m.terminal, m.panics, m.time, m.active, &m.workers, m.queue.set}
	return m
}

// Queue returns the provider of the controller's queue metrics, to set as the
// controller's Options.QueueMetrics. Its series are registered and unregistered with the
// controller's: its own Unregister does nothing and returns false.
func (m *ControllerMetrics) Queue() *QueueMetrics { return m.queue }

// NewReconcileTotalMetric returns the controller_runtime_reconcile_total counter of
// outcome.
func (m *ControllerMetrics) NewReconcileTotalMetric(_ string, outcome controller.Outcome) workqueue.Counter {
	return m.total.WithLabelValues(outcome.String())
}

// NewReconcileErrorsMetric returns the controller_runtime_reconcile_errors_total counter.
func (m *ControllerMetrics) NewReconcileErrorsMetric(string) workqueue.Counter { return m.errors }

// NewTerminalReconcileErrorsMetric returns the
// controller_runtime_terminal_reconcile_errors_total counter.
func (m *ControllerMetrics) NewTerminalReconcileErrorsMetric(string) workqueue.Counter {
	return m.terminal
}

// NewReconcilePanicsMetric returns the controller_runtime_reconcile_panics_total counter.
func (m *ControllerMetrics) NewReconcilePanicsMetric(string) workqueue.Counter { return m.panics }

// NewReconcileTimeMetric returns the controller_runtime_reconcile_time_seconds histogram.
func (m *ControllerMetrics) NewReconcileTimeMetric(string) workqueue.Histogram { return m.time }

// NewActiveWorkersMetric returns the controller_runtime_active_workers gauge.
func (m *ControllerMetrics) NewActiveWorkersMetric(string) workqueue.Gauge { return m.active }

// NewMaxConcurrentReconcilesFunc makes value the source of
// controller_runtime_max_concurrent_reconciles, called when the registry is gathered. The
// series is absent until it is set.
func (m *ControllerMetrics) NewMaxConcurrentReconcilesFunc(_ string, value func() float64) {
	m.workers.set(value)
}

// Unregister removes every series of the controller and of its queue from the registry
// now, rather than when the controller stops. It reports whether it removed them: false on
// a second call or after the stop removed them. It does not stop the controller.
func (m *ControllerMetrics) Unregister() bool {
	return !m.unregistered.Swap(true) && m.reg.Unregister(m.set)
}

// ControllerStopped removes the controller's and its queue's series when it stops
// (controller.StopObserver).
func (m *ControllerMetrics) ControllerStopped(string) { m.Unregister() }

var (
	_ controller.MetricsProvider = (*ControllerMetrics)(nil)
	_ controller.StopObserver    = (*ControllerMetrics)(nil)
)
