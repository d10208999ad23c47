package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
	"github.com/informer-go/informer/workqueue"
)

// TestMain fails the run if any test leaves a goroutine behind: a worker, the queue's delay
// goroutine, a handler, a shutdown timer.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// limiterOp is one call the controller made to the rate limiter.
type limiterOp struct {
	Op    string // "when" or "forget"
	Key   string
	Delay time.Duration // for "when"
}

func (o limiterOp) String() string {
	if o.Op == "when" {
		return fmt.Sprintf("when(%s)=%v", o.Key, o.Delay)
	}
	return fmt.Sprintf("%s(%s)", o.Op, o.Key)
}

// recordingLimiter is an exponential limiter (1 s doubling) that records When and Forget.
type recordingLimiter struct {
	*workqueue.ExponentialRateLimiter[string]
	mu  sync.Mutex
	ops []limiterOp
}

func newRecordingLimiter() *recordingLimiter {
	return &recordingLimiter{ExponentialRateLimiter: workqueue.NewExponentialRateLimiter[string](time.Second, time.Hour)}
}

func (r *recordingLimiter) When(key string) time.Duration {
	d := r.ExponentialRateLimiter.When(key)
	r.mu.Lock()
	r.ops = append(r.ops, limiterOp{"when", key, d})
	r.mu.Unlock()
	return d
}

func (r *recordingLimiter) Forget(key string) {
	r.ExponentialRateLimiter.Forget(key)
	r.mu.Lock()
	r.ops = append(r.ops, limiterOp{Op: "forget", Key: key})
	r.mu.Unlock()
}

// take returns the calls recorded since the last take.
func (r *recordingLimiter) take() []limiterOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := r.ops
	r.ops = nil
	return ops
}

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

// TestRequeueAfterPeriodic shows the per-object periodic reconcile: a key whose reconcile
// returns RequeueAfter comes back every period on the fake clock, while a key that returns
// the zero Result is not reconciled again.
func TestRequeueAfterPeriodic(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "poll"})
	src.Put(&obj{Name: "once"})
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs"})

	clk := clock.NewFake(time.Unix(0, 0))
	calls := testkit.NewLog()
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(fmt.Sprintf("%s@%v", key, clk.Since(time.Unix(0, 0))))
		if key == "poll" {
			return Result{RequeueAfter: time.Minute}, nil
		}
		return Result{}, nil
	}), Options[string]{Clock: clk, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := For(c, inf, objKeyErr); err != nil {
		t.Fatal(err)
	}
	start(t, c)

	if got := joined(calls.Next(t, 2)); got != "once@0s poll@0s" {
		t.Fatalf("initial reconciles: %s", got)
	}
	for i := 1; i <= 3; i++ {
		clk.WaitForWaiters(1, nil) // the queue's delay timer, armed for poll
		clk.Step(time.Minute - 1)
		calls.ExpectNoMore(t)
		clk.Step(1)
		if got, want := calls.Next(t, 1)[0], fmt.Sprintf("poll@%dm0s", i); got != want {
			t.Fatalf("period %d: reconciled %s, want %s", i, got, want)
		}
	}
	calls.ExpectNoMore(t)
}

// TestResyncPeriodic shows the informer-wide periodic reconcile: an informer with a resync
// period (controller-runtime's SyncPeriod) re-delivers every cached object as an update
// each period on its fake clock, and the controller reconciles every key again.
func TestResyncPeriodic(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "a"})
	src.Put(&obj{Name: "b"})
	ic := clock.NewFake(time.Unix(0, 0)) // the informer's clock: only its resync timer runs on it
	const syncPeriod = 10 * time.Minute
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs", Clock: ic, ResyncPeriod: syncPeriod})

	calls := testkit.NewLog()
	var resyncs atomic.Int64
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(key)
		return Result{}, nil
	}), Options[string]{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	countResyncs := PredicateFuncs[*obj]{UpdateFunc: func(old, new *obj) bool {
		if old == new {
			resyncs.Add(1)
		}
		return true
	}}
	if err := For(c, inf, objKeyErr, countResyncs); err != nil {
		t.Fatal(err)
	}
	start(t, c)

	if got := joined(calls.Next(t, 2)); got != "a b" {
		t.Fatalf("initial reconciles: %s", got)
	}
	for i := 1; i <= 3; i++ {
		ic.WaitForWaiters(1, nil) // the reflector's resync timer
		ic.Step(syncPeriod)
		got := calls.Next(t, 2)
		slices.Sort(got)
		if joined(got) != "a b" {
			t.Fatalf("resync %d: reconciled %s, want a b", i, joined(got))
		}
		if r := resyncs.Load(); r != int64(2*i) {
			t.Fatalf("resync %d: %d resync updates seen, want %d", i, r, 2*i)
		}
	}
	calls.ExpectNoMore(t)
}

// TestOneWorkerPerKey runs 8 workers under 10,000 updates to 32 keys from 4 writers and
// checks that no key is ever reconciled by two workers at once, and that every key's last
// reconcile saw its last write.
func TestOneWorkerPerKey(t *testing.T) {
	const keys, writers, writes = 32, 4, 10_000
	src := newSource()
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("k%02d", i)
		src.Put(&obj{Name: names[i]})
	}
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs"})

	var (
		inFlight sync.Map // key → *atomic.Int32
		mu       sync.Mutex
		seen     = map[string]int{} // key → Gen its last reconcile read
		progress = make(chan struct{}, 1)
		overlaps atomic.Int64
	)
	met := newTestMetrics()
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		v, _ := inFlight.LoadOrStore(key, new(atomic.Int32))
		n := v.(*atomic.Int32)
		if n.Add(1) != 1 {
			overlaps.Add(1)
		}
		for range 3 {
			runtime.Gosched() // widen the window a second worker would need
		}
		o, ok := inf.Get(key)
		n.Add(-1)
		if ok {
			mu.Lock()
			seen[key] = o.Gen
			mu.Unlock()
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		return Result{}, nil
	}), Options[string]{MaxConcurrentReconciles: 8, Metrics: met, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := For(c, inf, objKeyErr); err != nil {
		t.Fatal(err)
	}
	start(t, c)

	var gens [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range writes / writers {
				i := r.IntN(keys)
				// Gens are per key and increase; concurrent writers may put them out
				// of order, so the final state is whatever the source holds last.
				src.Put(&obj{Name: names[i], Gen: int(gens[i].Add(1))})
				runtime.Gosched() // let the pipeline keep up, so that keys come back while in flight
			}
		})
	}
	wg.Wait()
	final := map[string]int{}
	for _, o := range src.Items() {
		final[o.Name] = o.Gen
	}
	deadline := time.After(waitLimit)
	for {
		mu.Lock()
		done := maps.Equal(seen, final)
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-progress:
		case <-deadline:
			t.Fatalf("last reconciles did not see the last writes")
		}
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d reconciles overlapped another of the same key", n)
	}
	if peak := met.active.peak.Load(); peak > 8 {
		t.Fatalf("%d reconciles at once, want at most 8", peak)
	}
	if m := met.maxWork(); m != 8 {
		t.Fatalf("max concurrent reconciles metric %v, want 8", m)
	}
	t.Logf("%d reconciles for %d writes, at most %d at once", met.total[OutcomeSuccess].n.Load(), writes, met.active.peak.Load())
}

// nextOutcome waits for the next reconcile call and its outcome, and fails the test unless
// the outcome is want.
func nextOutcome(t *testing.T, calls *testkit.Log, met *testMetrics, want Outcome) {
	t.Helper()
	calls.Next(t, 1)
	if o := recv(t, met.outcomes, "outcome"); o != want {
		t.Fatalf("outcome %v, want %v", o, want)
	}
}

// TestPanicRecovered: a panicking Reconcile is recovered, logged with its value and
// stack, counted, and the key is retried with backoff; the process survives.
func TestPanicRecovered(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	lim := newRecordingLimiter()
	met := newTestMetrics()
	var logs logBuffer
	calls := testkit.NewLog()
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(key)
		if len(calls.Calls()) == 1 {
			var s []int
			_ = s[len(key)] // a runtime panic: index out of range
		}
		return Result{}, nil
	}), Options[string]{Clock: clk, RateLimiter: lim, Metrics: met, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	c.Queue().Add("k")

	nextOutcome(t, calls, met, OutcomeError)
	if p, e := met.panics.n.Load(), met.errors.n.Load(); p != 1 || e != 1 {
		t.Fatalf("panics %d errors %d, want 1 and 1", p, e)
	}
	if ops := fmt.Sprint(lim.take()); ops != "[when(k)=1s]" {
		t.Fatalf("rate limiter calls %s, want a retry after 1s", ops)
	}
	log := logs.String()
	for _, want := range []string{"reconcile panicked", "index out of range", "TestPanicRecovered"} {
		if !strings.Contains(log, want) {
			t.Errorf("log does not contain %q:\n%s", want, log)
		}
	}
	clk.Step(time.Second)
	nextOutcome(t, calls, met, OutcomeSuccess) // the retry
	if r := c.Queue().NumRequeues("k"); r != 0 {
		t.Fatalf("NumRequeues %d after success, want 0", r)
	}
}

// TestTerminalError: a terminal error is counted, logged and not retried — the key's
// backoff is forgotten — but a later notification reconciles the key again.
func TestTerminalError(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	met := newTestMetrics()
	calls := testkit.NewLog()
	errs := []error{errBoom, TerminalError(errBoom), nil}
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(key)
		err := errs[0]
		errs = errs[1:]
		return Result{}, err
	}), Options[string]{Clock: clk, RateLimiter: newRecordingLimiter(), Metrics: met, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	c.Queue().Add("k")
	calls.Next(t, 1)
	recv(t, met.outcomes, "outcome")
	clk.Step(time.Second)
	nextOutcome(t, calls, met, OutcomeTerminal)
	if r := c.Queue().NumRequeues("k"); r != 0 {
		t.Errorf("NumRequeues %d after a terminal error, want 0 (forgotten)", r)
	}
	if w := clk.Waiters(); w != 0 {
		t.Errorf("%d timers armed after a terminal error, want none (no retry)", w)
	}
	if e, te := met.errors.n.Load(), met.terminal.n.Load(); e != 2 || te != 1 {
		t.Errorf("errors %d terminal %d, want 2 and 1", e, te)
	}
	clk.Step(time.Hour)
	calls.ExpectNoMore(t)

	c.Queue().Add("k") // a new notification
	nextOutcome(t, calls, met, OutcomeSuccess)
	var totals []int64
	for o := range met.total {
		totals = append(totals, met.total[o].n.Load())
	}
	if fmt.Sprint(totals) != "[1 1 0 0 1]" { // success, error, requeue, requeue_after, terminal
		t.Errorf("reconcile totals %v, want [1 1 0 0 1]", totals)
	}
	if n := met.observed.Load(); n != 3 {
		t.Errorf("%d reconcile times observed, want 3", n)
	}
	if a, p := met.active.n.Load(), met.active.peak.Load(); a != 0 || p != 1 {
		t.Errorf("active workers %d (peak %d), want 0 (peak 1)", a, p)
	}
}

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

func TestTerminalErrorMatching(t *testing.T) {
	err := fmt.Errorf("reconcile: %w", TerminalError(errBoom))
	if !errors.Is(err, ErrTerminal) || !errors.Is(err, errBoom) {
		t.Fatalf("%v: does not match ErrTerminal and its cause", err)
	}
	if errors.Is(errBoom, ErrTerminal) {
		t.Fatal("a plain error matches ErrTerminal")
	}
	if TerminalError(nil) != ErrTerminal {
		t.Fatal("TerminalError(nil) is not ErrTerminal")
	}
	if got := TerminalError(errBoom).Error(); got != "terminal error: boom" {
		t.Fatalf("Error() = %q", got)
	}
}

// gatedLW holds every List of a memory source until its gate opens.
type gatedLW struct {
	informer.ListerWatcher[*obj]
	gate chan struct{}
}

func (g gatedLW) List(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return informer.List[*obj]{}, ctx.Err()
	}
	return g.ListerWatcher.List(ctx, opts)
}

// TestWorkersWaitForSync: no reconcile runs before every watched informer has synced,
// not even for a key queued by hand.
func TestWorkersWaitForSync(t *testing.T) {
	fast := newSource()
	fast.Put(&obj{Name: "f"})
	slow := newSource()
	slow.Put(&obj{Name: "s"})
	gate := make(chan struct{})
	fastInf := runInformer(t, fast, informer.Options[string, *obj]{Name: "fast"})
	slowInf := runInformer(t, gatedLW{slow, gate}, informer.Options[string, *obj]{Name: "slow"})

	var released atomic.Bool
	calls := testkit.NewLog()
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		if !released.Load() || !slowInf.Stats().Synced || !fastInf.Stats().Synced {
			t.Errorf("reconcile of %s before the caches synced", key)
		}
		calls.Record(key)
		return Result{}, nil
	}), Options[string]{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := For(c, fastInf, objKeyErr); err != nil {
		t.Fatal(err)
	}
	if err := For(c, slowInf, objKeyErr); err != nil {
		t.Fatal(err)
	}
	c.Queue().Add("early")
	start(t, c)
	recv(t, fastInf.Synced(), "the fast informer to sync")

	released.Store(true)
	close(gate)
	got := calls.Next(t, 3)
	slices.Sort(got)
	if joined(got) != "early f s" {
		t.Fatalf("reconciled %s", joined(got))
	}
}

// TestCacheSyncTimeout: Start gives up after CacheSyncTimeout (2 minutes by default, on
// the controller's fake clock) with an error that names the informer that did not sync,
// and runs no reconcile.
func TestCacheSyncTimeout(t *testing.T) {
	ready := newSource()
	ready.Put(&obj{Name: "r"})
	stuck := newSource()
	stuck.SetDelay(time.Hour) // every List waits an hour of real time: never syncs here
	readyInf := runInformer(t, ready, informer.Options[string, *obj]{Name: "ready"})
	stuckInf := runInformer(t, stuck, informer.Options[string, *obj]{Name: "stuck"})

	clk := clock.NewFake(time.Unix(0, 0))
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		t.Errorf("reconcile of %s although the caches did not sync", key)
		return Result{}, nil
	}), Options[string]{Name: "ctl", Clock: clk, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	for _, inf := range []*informer.Informer[string, *obj]{readyInf, stuckInf} {
		if err := For(c, inf, objKeyErr); err != nil {
			t.Fatal(err)
		}
	}
	s := start(t, c)
	clk.WaitForWaiters(1, nil) // the sync timeout, armed after the handlers were registered
	recv(t, c.watches[0].reg.Synced(), "the controller's handler on the ready informer to sync")
	clk.Step(DefaultCacheSyncTimeout - 1)
	select {
	case err := <-s.done:
		t.Fatalf("Start returned %v before the timeout", err)
	default:
	}
	clk.Step(1)
	err = s.returned(t, "Start to time out")

	var se *CacheSyncError
	if !errors.As(err, &se) {
		t.Fatalf("Start returned %v, want a *CacheSyncError", err)
	}
	if !slices.Equal(se.Informers, []string{"stuck"}) || se.Timeout != DefaultCacheSyncTimeout || se.Controller != "ctl" {
		t.Fatalf("CacheSyncError %+v", *se)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not match context.DeadlineExceeded", err)
	}
	if want := "controller ctl: caches not synced after 2m0s: informer stuck has not synced"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestCacheSyncTimeoutHandler: an informer that synced but has not yet given the
// controller's handler its initial list holds the workers back too, and is named.
func TestCacheSyncTimeoutHandler(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "a"})
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs"})

	clk := clock.NewFake(time.Unix(0, 0))
	var logs logBuffer
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		t.Errorf("reconcile of %s before the handler synced", key)
		return Result{}, nil
	}), Options[string]{Name: "ctl", Clock: clk, CacheSyncTimeout: time.Minute, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	slowAdd := PredicateFuncs[*obj]{AddFunc: func(*obj) bool {
		close(entered)
		<-release
		return true
	}}
	if err := For(c, inf, objKeyErr, slowAdd); err != nil {
		t.Fatal(err)
	}
	s := start(t, c)
	recv(t, entered, "the handler to get the initial list")
	recv(t, inf.Synced(), "the informer to sync")
	clk.WaitForWaiters(1, nil)
	clk.Step(time.Minute)
	// Start logs the error, then removes its handler, which waits for the call in progress.
	eventually(t, "the sync error to be logged", func() bool { return strings.Contains(logs.String(), "caches did not sync") })
	close(release)
	err = s.returned(t, "Start to time out")
	var se *CacheSyncError
	if !errors.As(err, &se) || !slices.Equal(se.Informers, []string{"objs"}) {
		t.Fatalf("Start returned %v, want a CacheSyncError naming objs", err)
	}
	if !strings.Contains(err.Error(), "informer objs has synced but has not yet given the controller's handler its initial list") {
		t.Errorf("error %q does not say the handler is behind", err)
	}
}

// blocker is a Reconciler whose calls for "slow" block until released or until their
// context ends, and which records every call with the state of its context.
type blocker struct {
	calls   *testkit.Log
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	ctxErrs map[string]error // the context's error as each call returned
}

func newBlocker() *blocker {
	return &blocker{calls: testkit.NewLog(), entered: make(chan struct{}), release: make(chan struct{}), ctxErrs: map[string]error{}}
}

func (b *blocker) Reconcile(ctx context.Context, key string) (Result, error) {
	if key == "slow" {
		close(b.entered)
		select {
		case <-b.release:
		case <-ctx.Done():
		}
	}
	b.mu.Lock()
	b.ctxErrs[key] = ctx.Err()
	b.mu.Unlock()
	b.calls.Record(key)
	return Result{}, nil
}

func (b *blocker) ctxErr(key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ctxErrs[key]
}

// newBlocked returns a controller with one worker busy reconciling "slow" and two keys
// queued behind it.
func newBlocked(t *testing.T, opts Options[string]) (*Controller[string], *blocker, *started) {
	t.Helper()
	b := newBlocker()
	opts.Logger = discard()
	c, err := New[string](b, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"slow", "q1", "q2"} {
		c.Queue().Add(k)
	}
	s := start(t, c)
	recv(t, b.entered, "the slow reconcile to start")
	return c, b, s
}

// TestShutdownDrains: once Start's context is done, the reconcile in flight finishes with a
// live context and the keys queued behind it are reconciled before Start returns nil.
func TestShutdownDrains(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	c, b, s := newBlocked(t, Options[string]{Clock: clk})
	s.cancel()
	eventually(t, "the queue to shut down", c.Queue().ShuttingDown)
	c.Queue().Add("late") // ignored: the controller no longer takes keys
	close(b.release)
	if err := recv(t, s.done, "Start to return"); err != nil {
		t.Fatalf("Start returned %v after a complete drain", err)
	}
	s.done <- nil
	if got := joined(b.calls.Calls()); got != "slow q1 q2" {
		t.Fatalf("reconciled %s, want slow q1 q2", got)
	}
	for _, k := range []string{"slow", "q1", "q2"} {
		if err := b.ctxErr(k); err != nil {
			t.Errorf("reconcile of %s ran with a cancelled context (%v) during the drain", k, err)
		}
	}
}

// TestShutdownBoundedByContext: Shutdown's context bounds the drain; when it ends, the
// reconcile in flight sees its context cancelled, the keys still queued are dropped, and
// both Shutdown and Start report the context's error.
func TestShutdownBoundedByContext(t *testing.T) {
	c, b, s := newBlocked(t, Options[string]{})
	ctx, cancel := context.WithCancel(context.Background())
	shut := make(chan error, 1)
	go func() { shut <- c.Shutdown(ctx) }()
	eventually(t, "the queue to shut down", c.Queue().ShuttingDown)
	cancel()
	if err := recv(t, shut, "Shutdown to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown returned %v, want context.Canceled", err)
	}
	err := s.returned(t, "Start to return")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start returned %v, want context.Canceled", err)
	}
	if got := joined(b.calls.Calls()); got != "slow" {
		t.Fatalf("reconciled %s, want only slow (q1 and q2 dropped)", got)
	}
	if err := b.ctxErr("slow"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the slow reconcile's context ended with %v, want context.Canceled", err)
	}
	if err := c.Shutdown(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("a second Shutdown returned %v, want Start's error", err)
	}
}

// TestShutdownTimeout: without Shutdown, Options.ShutdownTimeout bounds the drain, on the
// controller's fake clock.
func TestShutdownTimeout(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	_, b, s := newBlocked(t, Options[string]{Clock: clk, ShutdownTimeout: 5 * time.Second})
	s.cancel()
	clk.WaitForWaiters(1, nil) // the shutdown timer
	clk.Step(5*time.Second - 1)
	select {
	case err := <-s.done:
		t.Fatalf("Start returned %v before the shutdown timeout", err)
	default:
	}
	clk.Step(1)
	err := s.returned(t, "Start to return")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start returned %v, want context.DeadlineExceeded", err)
	}
	if got := joined(b.calls.Calls()); got != "slow" {
		t.Fatalf("reconciled %s, want only slow", got)
	}
	if err := b.ctxErr("slow"); err == nil {
		t.Fatal("the slow reconcile's context was not cancelled at the timeout")
	}
}

func TestStartOnce(t *testing.T) {
	c, calls := recording(t, Options[string]{})
	s := start(t, c)
	c.Queue().Add("k")
	calls.Next(t, 1) // Start is running
	inf := runInformer(t, newSource(), informer.Options[string, *obj]{})
	if err := c.Start(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Start: %v", err)
	}
	if err := For(c, inf, objKeyErr); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("For after Start: %v", err)
	}
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}

	c, _ = recording(t, Options[string]{})
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, ErrShutDown) {
		t.Fatalf("Start after Shutdown: %v", err)
	}
	if err := Watches(c, inf, func(o *obj) []string { return nil }); !errors.Is(err, ErrShutDown) {
		t.Fatalf("Watches after Shutdown: %v", err)
	}
	if _, err := New[string](nil, Options[string]{}); err == nil {
		t.Fatal("New accepted a nil Reconciler")
	}
}

// TestStoppedInformer: Start fails, naming the informer, if a handler cannot be added.
func TestStoppedInformer(t *testing.T) {
	inf, err := informer.New(newSource(), informer.Options[string, *obj]{Name: "gone", Key: objKeyErr, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := inf.Run(ctx); err != nil {
		t.Fatal(err)
	}
	c, _ := New(ReconcilerFunc[string](func(context.Context, string) (Result, error) { return Result{}, nil }), Options[string]{Logger: discard()})
	if err := For(c, inf, objKeyErr); err != nil {
		t.Fatal(err)
	}
	err = c.Start(context.Background())
	if !errors.Is(err, informer.ErrStopped) || !strings.Contains(err.Error(), "informer gone") {
		t.Fatalf("Start returned %v", err)
	}
}

// TestWatchesMapsAndFilters: Watches maps objects to their owners' keys, an update queues the
// old owner and the new, and predicates drop notifications. One worker, so the order of
// the reconciles is the order of the notifications.
func TestWatchesMapsAndFilters(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "x", Owner: "A"})
	src.Put(&obj{Name: "y", Owner: "B"})
	src.Put(&obj{Name: "z"}) // no owner
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "children"})

	c, calls := recording(t, Options[string]{})
	owner := func(o *obj) []string {
		if o.Owner == "" {
			return nil
		}
		return []string{o.Owner}
	}
	genChanged := PredicateFuncs[*obj]{UpdateFunc: func(old, new *obj) bool { return old.Gen != new.Gen }}
	if err := Watches(c, inf, owner, genChanged); err != nil {
		t.Fatal(err)
	}
	start(t, c)

	expect := func(when string, want ...string) {
		t.Helper()
		if got := joined(calls.Next(t, len(want))); got != joined(want) {
			t.Fatalf("%s: reconciled %s, want %s", when, got, joined(want))
		}
	}
	expect("initial list", "A", "B")
	src.Put(&obj{Name: "x", Owner: "C", Gen: 1})
	expect("owner change", "A", "C")
	src.Put(&obj{Name: "y", Owner: "B"}) // same Gen: filtered
	src.Put(&obj{Name: "w", Owner: "D"}) // a marker: y's update would have come first
	expect("filtered update", "D")
	src.Delete("x")
	expect("delete", "C")
	calls.ExpectNoMore(t)
}

// TestKeyFuncError: a key function that fails drops that notification and logs it.
func TestKeyFuncError(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "bad"})
	src.Put(&obj{Name: "good"})
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs"})
	var logs logBuffer
	c, calls := recording(t, Options[string]{Logger: logs.logger()})
	key := func(o *obj) (string, error) {
		if o.Name == "bad" {
			return "", errBoom
		}
		return o.Name, nil
	}
	if err := For(c, inf, key); err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if got := calls.Next(t, 1)[0]; got != "good" {
		t.Fatalf("reconciled %s", got)
	}
	if !strings.Contains(logs.String(), "key function failed") {
		t.Errorf("key error not logged:\n%s", logs.String())
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

// TestStartBeforeInformer: the controller may start before its informer runs; it waits
// for the informer's first list.
func TestStartBeforeInformer(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "a"})
	inf, err := informer.New(src, informer.Options[string, *obj]{Name: "late", Key: objKeyErr, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(0, 0))
	c, calls := recording(t, Options[string]{Clock: clk})
	if err := For(c, inf, objKeyErr); err != nil {
		t.Fatal(err)
	}
	s := start(t, c)
	clk.WaitForWaiters(1, nil) // Start registered its handler and waits for the sync
	calls.ExpectNoMore(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	if got := calls.Next(t, 1)[0]; got != "a" {
		t.Fatalf("reconciled %s", got)
	}
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := recv(t, done, "the informer to stop"); err != nil {
		t.Fatal(err)
	}
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

// For with a nil key function keys by the informer's own key (Informer.Key), written once;
// an informer without a Key method of the controller's key type is an error.
func TestForDefaultsToTheInformersKey(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "a"})
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs", Key: func(o *obj) (string, error) { return "k/" + o.Name, nil }})
	c, calls := recording(t, Options[string]{})
	if err := For(c, inf, nil); err != nil {
		t.Fatal(err)
	}
	c2, err := New(ReconcilerFunc[int](func(context.Context, int) (Result, error) { return Result{}, nil }), Options[int]{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := For[int](c2, inf, nil); err == nil || !strings.Contains(err.Error(), "no Key method") {
		t.Fatalf("For with a nil key on an informer of another key type: %v", err)
	}
	start(t, c)
	if got := joined(calls.Next(t, 1)); got != "k/a" {
		t.Fatalf("reconciled %s, want the informer's key k/a", got)
	}
}

// TestNeverStartedInformerSaidWithinASecond: a controller over an informer nobody runs
// says so within a second (informer.NeverStartedAfter), naming it and what to do, and the
// CacheSyncError at the timeout says the same.
func TestNeverStartedInformerSaidWithinASecond(t *testing.T) {
	idle, err := informer.New[string, *obj](newSource(), informer.Options[string, *obj]{Name: "idle", Key: objKeyErr, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	clk := clock.NewFake(time.Unix(0, 0))
	c, err := New(ReconcilerFunc[string](func(context.Context, string) (Result, error) { return Result{}, nil }),
		Options[string]{Name: "ctl", Clock: clk, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := For(c, idle, objKeyErr); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	s := start(t, c)
	const want = "informers never started: they will never sync; add them to the manager, or call their Run (or Factory.Start)"
	testkit.Until(t, "the controller to say the informer was never started", 10*time.Millisecond, func() bool { return strings.Contains(logs.String(), want) })
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("said after %v, want about %v", took, informer.NeverStartedAfter)
	}
	if out := logs.String(); !strings.Contains(out, "informers=[idle]") {
		t.Errorf("the log does not name the informer: %s", out)
	}
	clk.WaitForWaiters(1, nil) // the sync timeout
	clk.Step(DefaultCacheSyncTimeout)
	err = s.returned(t, "Start to time out")
	if want := "controller ctl: caches not synced after 2m0s: informer idle was never started: add it to the manager, or call its Run (or Factory.Start)"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// Ready says, without waiting, why a controller does not reconcile: an informer never
// started (named, with what to do), the controller not started; nil once its workers run;
// stopping once its context is done.
func TestReadySaysWhyNot(t *testing.T) {
	idle, err := informer.New[string, *obj](newSource(), informer.Options[string, *obj]{Name: "idle", Key: objKeyErr, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(ReconcilerFunc[string](func(context.Context, string) (Result, error) { return Result{}, nil }),
		Options[string]{Name: "ctl", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); err == nil || err.Error() != "controller ctl: not started" {
		t.Fatalf("Ready before Start and For = %v", err)
	}
	if err := For(c, idle, objKeyErr); err != nil {
		t.Fatal(err)
	}
	const never = "controller ctl: informer idle was never started: add it to the manager, or call its Run (or Factory.Start)"
	if err := c.Ready(); err == nil || err.Error() != never {
		t.Fatalf("Ready over an informer never started = %v; want %q", err, never)
	}
	s := start(t, c)
	if err := c.Ready(); err == nil || err.Error() != never {
		t.Fatalf("Ready of a started controller over an informer never started = %v; want %q", err, never)
	}
	informertest.Run(t, idle)
	eventually(t, "the controller to be ready", func() bool { return c.Ready() == nil })
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); err == nil || err.Error() != "controller ctl: stopping" {
		t.Fatalf("Ready after the stop = %v", err)
	}
}
