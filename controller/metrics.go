package controller

import "github.com/informer-go/informer/workqueue"

// Outcome is how a reconcile ended, the "result" label of the reconcile counter.
type Outcome uint8

// The outcomes of a reconcile.
const (
	// OutcomeSuccess: no error and a zero Result.
	OutcomeSuccess Outcome = iota
	// OutcomeError: an error that is not terminal, or a panic; the key is retried.
	OutcomeError
	// OutcomeRequeue: Result.Requeue without RequeueAfter.
	OutcomeRequeue
	// OutcomeRequeueAfter: Result.RequeueAfter > 0.
	OutcomeRequeueAfter
	// OutcomeTerminal: a TerminalError; the key is not retried.
	OutcomeTerminal

	numOutcomes = iota
)

// String returns the outcome's label as controller-runtime spells it: "success", "error",
// "requeue", "requeue_after", or "terminal".
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeError:
		return "error"
	case OutcomeRequeue:
		return "requeue"
	case OutcomeRequeueAfter:
		return "requeue_after"
	case OutcomeTerminal:
		return "terminal"
	}
	return "unknown"
}

// MetricsProvider creates a controller's metrics; it mirrors controller-runtime's
// controller_runtime_* metrics. New calls each method once, with Options.Name (and for
// NewReconcileTotalMetric once per Outcome). A constructor may return nil to leave that
// metric out. The queue's own metrics are configured separately, with Options.QueueMetrics.
//
// Values are updated from the workers, so they must be safe for concurrent use and cheap
// (an atomic add). Times are measured on Options.Clock. A controller with no provider does
// not read the clock for metrics at all.
type MetricsProvider interface {
	// NewReconcileTotalMetric returns the counter of reconciles that ended with outcome.
	NewReconcileTotalMetric(controller string, outcome Outcome) workqueue.Counter
	// NewReconcileErrorsMetric returns the counter of reconciles that returned an error
	// (terminal or not) or panicked.
	NewReconcileErrorsMetric(controller string) workqueue.Counter
	// NewTerminalReconcileErrorsMetric returns the counter of reconciles that returned a
	// TerminalError.
	NewTerminalReconcileErrorsMetric(controller string) workqueue.Counter
	// NewReconcilePanicsMetric returns the counter of reconciles that panicked.
	NewReconcilePanicsMetric(controller string) workqueue.Counter
	// NewReconcileTimeMetric returns the histogram of the duration of Reconcile calls, in
	// seconds, whatever their outcome.
	NewReconcileTimeMetric(controller string) workqueue.Histogram
	// NewActiveWorkersMetric returns the gauge of workers running a Reconcile right now.
	NewActiveWorkersMetric(controller string) workqueue.Gauge
	// NewMaxConcurrentReconcilesFunc registers value, which returns the controller's
	// MaxConcurrentReconciles; it never changes.
	NewMaxConcurrentReconcilesFunc(controller string, value func() float64)
}

// StopObserver may be implemented by a MetricsProvider that wants to know when the
// controller has stopped, typically to remove the controller's series (and its queue's) so
// that short-lived controllers leave none behind. The controller calls ControllerStopped
// once, with Options.Name: when Start returns after having started (every worker has
// returned), or when Shutdown ends a controller that was never started.
type StopObserver interface {
	// ControllerStopped is called once, with the controller's Options.Name, when it has
	// stopped.
	ControllerStopped(controller string)
}

// metrics holds a controller's metrics, each non-nil (nop for those the provider left
// out). A controller without a provider has a nil *metrics.
type metrics struct {
	total    [numOutcomes]workqueue.Counter
	errors   workqueue.Counter
	terminal workqueue.Counter
	panics   workqueue.Counter
	time     workqueue.Histogram
	active   workqueue.Gauge
}

func newMetrics(p MetricsProvider, name string, workers int) *metrics {
	if p == nil {
		return nil
	}
	m := &metrics{
		errors:   orNop[workqueue.Counter](p.NewReconcileErrorsMetric(name)),
		terminal: orNop[workqueue.Counter](p.NewTerminalReconcileErrorsMetric(name)),
		panics:   orNop[workqueue.Counter](p.NewReconcilePanicsMetric(name)),
		time:     orNop[workqueue.Histogram](p.NewReconcileTimeMetric(name)),
		active:   orNop[workqueue.Gauge](p.NewActiveWorkersMetric(name)),
	}
	for o := range m.total {
		m.total[o] = orNop[workqueue.Counter](p.NewReconcileTotalMetric(name, Outcome(o)))
	}
	n := float64(workers)
	p.NewMaxConcurrentReconcilesFunc(name, func() float64 { return n })
	return m
}

// orNop returns m, or a metric that does nothing if m is nil.
func orNop[M any](m M) M {
	if any(m) == nil {
		return any(nop{}).(M)
	}
	return m
}

type nop struct{}

func (nop) Inc()            {}
func (nop) Dec()            {}
func (nop) Observe(float64) {}
