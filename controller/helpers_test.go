package controller

// This file holds what the package's tests share: an informer over source/memory, a
// started controller, a recording reconciler and metrics provider, waits with a bound.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
	"github.com/informer-go/informer/workqueue"
)

// waitLimit bounds every wait of the tests; reaching it is a failure, never a way to
// synchronise.
const waitLimit = testkit.WaitLimit

// recv waits for a value from ch, failing the test after waitLimit.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testkit.Recv(t, ch, what)
}

// eventually polls cond until it holds, for the few states nothing can be waited on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Until(t, what, time.Millisecond, cond)
}

// obj is the object the tests' informers hold.
type obj struct {
	Name  string
	Owner string
	Gen   int
}

func objKey(o *obj) string                    { return o.Name }
func objKeyErr(o *obj) (string, error)        { return o.Name, nil }
func newSource() *memory.Source[string, *obj] { return memory.New(objKey, memory.Options{}) }

// runInformer builds an informer over lw and runs it until the test ends.
func runInformer(t *testing.T, lw informer.ListerWatcher[*obj], opts informer.Options[string, *obj]) *informer.Informer[string, *obj] {
	t.Helper()
	if opts.Key == nil {
		opts.Key = objKeyErr
	}
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	inf, err := informer.New(lw, opts)
	if err != nil {
		t.Fatal(err)
	}
	informertest.Run(t, inf)
	return inf
}

// started is a controller running in the background.
type started struct {
	cancel context.CancelFunc
	done   chan error
}

// start runs c.Start until the test ends (or stop is called) and returns a handle.
func start[K comparable](t *testing.T, c *Controller[K]) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(waitLimit):
			t.Errorf("controller %s: Start did not return", c.Name())
		}
	})
	return s
}

// stop cancels Start's context and returns what Start returned.
func (s *started) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	return s.returned(t, "Start to return")
}

// returned waits for Start to return, failing the test with what after waitLimit, and
// gives what it returned, leaving it in s.done for the cleanup.
func (s *started) returned(t *testing.T, what string) error {
	t.Helper()
	err := recv(t, s.done, what)
	s.done <- err
	return err
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// recording returns a controller whose reconciler records each key in the returned log and
// succeeds. A nil opts.Logger discards.
func recording(t *testing.T, opts Options[string]) (*Controller[string], *testkit.Log) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	calls := testkit.NewLog()
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(key)
		return Result{}, nil
	}), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, calls
}

// logBuffer collects log output safely from many goroutines.
type logBuffer struct{ testkit.LogBuffer }

func (b *logBuffer) logger() *slog.Logger { return b.Logger(slog.LevelDebug) }

// testMetrics records a controller's metrics; each reconcile outcome is also sent on
// outcomes, after the controller has acted on it.
type testMetrics struct {
	outcomes chan Outcome
	total    [numOutcomes]counter
	errors   counter
	terminal counter
	panics   counter
	active   gauge
	maxWork  func() float64
	observed atomic.Int64
}

type counter struct{ n atomic.Int64 }

func (c *counter) Inc() { c.n.Add(1) }

type gauge struct{ n, peak atomic.Int64 }

func (g *gauge) Inc() {
	v := g.n.Add(1)
	for {
		p := g.peak.Load()
		if v <= p || g.peak.CompareAndSwap(p, v) {
			return
		}
	}
}
func (g *gauge) Dec() { g.n.Add(-1) }

type outcomeCounter struct {
	m *testMetrics
	o Outcome
}

func (c outcomeCounter) Inc() {
	c.m.total[c.o].Inc()
	c.m.outcomes <- c.o
}

type histogram struct{ m *testMetrics }

func (h histogram) Observe(float64) { h.m.observed.Add(1) }

func newTestMetrics() *testMetrics { return &testMetrics{outcomes: make(chan Outcome, 100_000)} }

func (m *testMetrics) NewReconcileTotalMetric(_ string, o Outcome) workqueue.Counter {
	return outcomeCounter{m, o}
}
func (m *testMetrics) NewReconcileErrorsMetric(string) workqueue.Counter { return &m.errors }
func (m *testMetrics) NewTerminalReconcileErrorsMetric(string) workqueue.Counter {
	return &m.terminal
}
func (m *testMetrics) NewReconcilePanicsMetric(string) workqueue.Counter         { return &m.panics }
func (m *testMetrics) NewReconcileTimeMetric(string) workqueue.Histogram         { return histogram{m} }
func (m *testMetrics) NewActiveWorkersMetric(string) workqueue.Gauge             { return &m.active }
func (m *testMetrics) NewMaxConcurrentReconcilesFunc(_ string, v func() float64) { m.maxWork = v }

var errBoom = errors.New("boom")

func joined(keys []string) string { return strings.Join(keys, " ") }
