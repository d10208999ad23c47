package controller

import (
	"context"
	"errors"
	"fmt"
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
)

// TestMain fails the run if any test leaves a goroutine behind: a worker, the queue's delay
// goroutine, a handler, a shutdown timer.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
