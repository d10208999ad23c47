package metrics_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/informer-go/informer/controller"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
)

// TestControllerSeries reconciles five keys with every kind of result — a success, an error
// then a success, a terminal error, a panic then a success, a RequeueAfter then a success —
// and checks the controller's and its queue's series once the work is done, then that
// they go away with the controller (and the informer's with the informer).
func TestControllerSeries(t *testing.T) {
	src := memory.New(itemName, memory.Options{})
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		src.Put(&item{Name: name})
	}
	reg, inf, im := registered(t, src)
	cm, err := metrics.RegisterController(reg, "items")
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	attempts := map[string]int{}
	finished := make(chan string, 5)
	reconcile := func(_ context.Context, key string) (controller.Result, error) {
		mu.Lock()
		attempts[key]++
		first := attempts[key] == 1
		mu.Unlock()
		switch {
		case key == "b" && first:
			return controller.Result{}, errors.New("transient")
		case key == "c":
			finished <- key
			return controller.Result{}, controller.TerminalError(errors.New("invalid"))
		case key == "d" && first:
			panic("reconciler bug")
		case key == "e" && first:
			return controller.Result{RequeueAfter: time.Millisecond}, nil
		}
		finished <- key
		return controller.Result{}, nil
	}
	c, err := controller.New(controller.ReconcilerFunc[string](reconcile), controller.Options[string]{
		Name:                    "items",
		MaxConcurrentReconciles: 2,
		RateLimiter:             noDelay[string]{},
		Logger:                  quiet(),
		Metrics:                 cm,
		QueueMetrics:            cm.Queue(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.For(c, inf, func(it *item) (string, error) { return it.Name, nil }); err != nil {
		t.Fatal(err)
	}
	expectSeries(t, reg, exposition(
		`controller_runtime_max_concurrent_reconciles{controller="items"} 2`,
		`controller_runtime_reconcile_total{controller="items",result="error"} 0`,
		`controller_runtime_reconcile_total{controller="items",result="requeue"} 0`,
		`controller_runtime_reconcile_total{controller="items",result="requeue_after"} 0`,
		`controller_runtime_reconcile_total{controller="items",result="success"} 0`,
		`controller_runtime_reconcile_total{controller="items",result="terminal"} 0`,
	), "controller_runtime_max_concurrent_reconciles", "controller_runtime_reconcile_total")

	stopInformer := run(t, inf)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- c.Start(ctx) }()
	timeout := time.After(30 * time.Second)
	for range 5 {
		select {
		case <-finished:
		case err := <-started:
			t.Fatalf("Start returned early: %v", err)
		case <-timeout:
			t.Fatal("the keys were not all reconciled")
		}
	}
	// 8 reconciles: a; b twice; c; d twice; e twice. 8 adds: the 5 keys, b's and d's
	// retries and e's requeue. The last reconcile's counts land just after its key is
	// reported finished: wait for the expected state, which is then stable.
	want := exposition(
		`controller_runtime_reconcile_total{controller="items",result="error"} 2`,
		`controller_runtime_reconcile_total{controller="items",result="requeue"} 0`,
		`controller_runtime_reconcile_total{controller="items",result="requeue_after"} 1`,
		`controller_runtime_reconcile_total{controller="items",result="success"} 4`,
		`controller_runtime_reconcile_total{controller="items",result="terminal"} 1`,
		`controller_runtime_reconcile_errors_total{controller="items"} 3`,
		`controller_runtime_terminal_reconcile_errors_total{controller="items"} 1`,
		`controller_runtime_reconcile_panics_total{controller="items"} 1`,
		`controller_runtime_active_workers{controller="items"} 0`,
		`controller_runtime_max_concurrent_reconciles{controller="items"} 2`,
		`workqueue_depth{name="items"} 0`,
		`workqueue_adds_total{name="items"} 8`,
		`workqueue_retries_total{name="items"} 2`,
		`workqueue_unfinished_work_seconds{name="items"} 0`,
		`workqueue_longest_running_processor_seconds{name="items"} 0`,
		`informer_store_objects{name="items"} 5`,
	)
	names := []string{"controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
		"controller_runtime_terminal_reconcile_errors_total", "controller_runtime_reconcile_panics_total",
		"controller_runtime_active_workers", "controller_runtime_max_concurrent_reconciles",
		"workqueue_depth", "workqueue_adds_total", "workqueue_retries_total",
		"workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds",
		"informer_store_objects"}
	deadline := time.Now().Add(10 * time.Second)
	for testutil.GatherAndCompare(reg, strings.NewReader(want), names...) != nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	expectSeries(t, reg, want, names...)
	for _, name := range []string{
		"controller_runtime_reconcile_time_seconds",
		"workqueue_queue_duration_seconds",
		"workqueue_work_duration_seconds",
	} {
		if n, _ := histogram(t, reg, name); n != 8 {
			t.Errorf("%s: %d samples, want 8", name, n)
		}
	}
	lint(t, reg)

	if cm.Queue().Unregister() {
		t.Error("Unregister of a controller's queue: true, want false (it goes with the controller)")
	}
	cancel()
	if err := <-started; err != nil {
		t.Fatalf("Start: %v", err)
	}
	// Start has returned: the controller's and its queue's series are gone, the
	// informer's remain until it stops.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "informer_") {
			t.Errorf("after the controller stopped: %s left", mf.GetName())
		}
	}
	if len(mfs) == 0 {
		t.Error("the informer's series went with the controller")
	}
	stopInformer()
	expectNoSeries(t, reg)
	if cm.Unregister() || im.Unregister() {
		t.Error("Unregister after the stops removed the series: true, want false")
	}
	// The names are free again.
	cm2, err := metrics.RegisterController(reg, "items")
	if err != nil {
		t.Fatalf("RegisterController after the controller stopped: %v", err)
	}
	cm2.Unregister()
}

// TestControllerNeverStarted: Shutdown of a controller that never started removes its
// series too.
func TestControllerNeverStarted(t *testing.T) {
	reg := prometheus.NewRegistry()
	cm, err := metrics.RegisterController(reg, "idle")
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.ReconcilerFunc[string](func(context.Context, string) (controller.Result, error) {
		return controller.Result{}, nil
	}), controller.Options[string]{Name: "idle", Metrics: cm, QueueMetrics: cm.Queue(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Fatalf("before Shutdown: %d series (%v), want some", n, err)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectNoSeries(t, reg)
	if err := c.Start(context.Background()); !errors.Is(err, controller.ErrShutDown) {
		t.Fatalf("Start after Shutdown: %v, want ErrShutDown", err)
	}
	expectNoSeries(t, reg)
}

// TestControllerNames: a controller's name is taken by its controller series and by its
// queue's; either clash is refused, and nothing is registered then.
func TestControllerNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	qm, err := metrics.RegisterQueue(reg, "apps")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.RegisterController(reg, "apps"); err == nil {
		t.Error("RegisterController over a queue of the same name: no error")
	}
	qm.Unregister()
	expectNoSeries(t, reg) // the refused controller left nothing
	expectNames(t, reg, metrics.RegisterController, "apps", "web", "")
}
