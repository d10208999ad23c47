package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/informer-go/informer/workqueue"
)

// leftOut is a MetricsProvider that leaves every metric out.
type leftOut struct{}

func (leftOut) NewReconcileTotalMetric(string, Outcome) workqueue.Counter { return nil }
func (leftOut) NewReconcileErrorsMetric(string) workqueue.Counter         { return nil }
func (leftOut) NewTerminalReconcileErrorsMetric(string) workqueue.Counter { return nil }
func (leftOut) NewReconcilePanicsMetric(string) workqueue.Counter         { return nil }
func (leftOut) NewReconcileTimeMetric(string) workqueue.Histogram         { return nil }
func (leftOut) NewActiveWorkersMetric(string) workqueue.Gauge             { return nil }
func (leftOut) NewMaxConcurrentReconcilesFunc(string, func() float64)     {}

// TestMetricsLeftOut: a provider may return nil for any metric.
func TestMetricsLeftOut(t *testing.T) {
	c, _ := New(ReconcilerFunc[string](func(context.Context, string) (Result, error) { panic("boom") }),
		Options[string]{Metrics: leftOut{}, Logger: discard()})
	c.reconcile(context.Background(), "k")
	c.Queue().ShutDown()
}

func TestOutcomeString(t *testing.T) {
	var got []string
	for o := range Outcome(numOutcomes + 1) {
		got = append(got, o.String())
	}
	if want := "success error requeue requeue_after terminal unknown"; joined(got) != want {
		t.Fatalf("%s, want %s", joined(got), want)
	}
}

// TestNoMetricsNoAllocs: a successful reconcile with no metrics allocates nothing.
func TestNoMetricsNoAllocs(t *testing.T) {
	c, _ := New(ReconcilerFunc[int](func(context.Context, int) (Result, error) { return Result{}, nil }),
		Options[int]{Logger: discard()})
	ctx := context.Background()
	c.reconcile(ctx, 1) // warm up
	if n := testing.AllocsPerRun(1000, func() { c.reconcile(ctx, 1) }); n != 0 {
		t.Fatalf("%v allocations per reconcile", n)
	}
	c.Queue().ShutDown()
}

// stopRecorder is a MetricsProvider that leaves every metric out and records
// ControllerStopped calls.
type stopRecorder struct {
	leftOut
	calls chan string
}

func (r stopRecorder) ControllerStopped(name string) { r.calls <- name }

// TestStopObserver: the provider hears once that the controller stopped — after Start
// returned, not for a second Start refused, not for a later Shutdown — and a controller
// shut down before it started is reported at Shutdown.
func TestStopObserver(t *testing.T) {
	nop := ReconcilerFunc[string](func(context.Context, string) (Result, error) { return Result{}, nil })
	expect := func(r stopRecorder, want int) {
		t.Helper()
		if got := len(r.calls); got != want {
			t.Fatalf("ControllerStopped called %d times, want %d", got, want)
		}
	}

	r := stopRecorder{calls: make(chan string, 4)}
	c, err := New(nop, Options[string]{Name: "ran", Metrics: r, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- c.Start(ctx) }()
	cancel()
	if err := <-started; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if name := <-r.calls; name != "ran" {
		t.Fatalf("ControllerStopped(%q), want ran", name)
	}
	if err := c.Start(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Start: %v", err)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after the stop: %v", err)
	}
	expect(r, 0)

	r2 := stopRecorder{calls: make(chan string, 4)}
	c2, err := New(nop, Options[string]{Name: "idle", Metrics: r2, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect(r2, 1)
	if name := <-r2.calls; name != "idle" {
		t.Fatalf("ControllerStopped(%q), want idle", name)
	}
}
