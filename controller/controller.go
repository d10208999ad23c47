package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/workqueue"
)

// Defaults of Options.
const (
	DefaultCacheSyncTimeout = 2 * time.Minute  // Options.CacheSyncTimeout
	DefaultShutdownTimeout  = 30 * time.Second // Options.ShutdownTimeout
)

// Options configures a Controller. Every zero value is a documented default.
type Options[K comparable] struct {
	// Name identifies the controller in logs, errors, metrics and the name of its handlers;
	// default "controller".
	Name string
	// MaxConcurrentReconciles is the number of workers, and so the most keys reconciled
	// at once; default 1.
	MaxConcurrentReconciles int
	// RateLimiter decides how long a key waits before it is retried after an error or a
	// Result{Requeue: true}. Nil means workqueue's default: per key 5 ms doubling up to
	// 1000 s, and at most 10 retries per second overall (burst 100), on Clock.
	RateLimiter workqueue.RateLimiter[K]
	// CacheSyncTimeout bounds how long Start waits for the informers to sync before it
	// fails with a *CacheSyncError; default DefaultCacheSyncTimeout (2 minutes).
	CacheSyncTimeout time.Duration
	// ShutdownTimeout bounds how long Start, once its context is done, lets the reconciles
	// in flight and the keys already queued finish before it cancels the reconciles'
	// context; default DefaultShutdownTimeout (30 s). Negative means no drain: the
	// reconciles' context is cancelled at once and queued keys are dropped.
	ShutdownTimeout time.Duration
	// Logger receives the controller's logs; default slog.Default(). Reconcile errors and
	// panics are logged at Error level, ignored Results at Warn, successes at Debug.
	Logger *slog.Logger
	// Clock drives the queue's delays and the default rate limiter, the sync and shutdown
	// timeouts and the metrics; default clock.Real.
	Clock clock.Clock
	// Metrics receives the controller's metrics; nil means none, at no cost.
	Metrics MetricsProvider
	// QueueMetrics receives the metrics of the controller's queue, named Name; nil means
	// none.
	QueueMetrics workqueue.MetricsProvider
}

// ErrAlreadyStarted is returned by Start, For and Watches once Start has been called.
var ErrAlreadyStarted = errors.New("controller: already started")

// ErrShutDown is returned by Start, For and Watches after Shutdown was called on a controller
// that had not been started.
var ErrShutDown = errors.New("controller: shut down")

// Controller reconciles keys of type K: its handlers queue the keys of the objects that
// change in the informers it watches (see For and Watches), and its workers call the
// Reconciler for each. See the package documentation for the guarantees.
//
// A Controller runs once: Start may be called only once.
type Controller[K comparable] struct {
	name            string
	rec             Reconciler[K]
	workers         int
	syncTimeout     time.Duration
	shutdownTimeout time.Duration
	clk             clock.Clock
	log             *slog.Logger
	queue           *workqueue.Queue[K]
	metrics         *metrics // nil: no metrics
	onStop          StopObserver
	stopOnce        sync.Once

	mu       sync.Mutex
	watches  []*watch
	started  bool
	stopping bool            // Shutdown called, or Start's context done
	stop     chan struct{}   // closed by Shutdown on a started controller
	drainCtx context.Context // Shutdown's context
	done     chan struct{}   // closed when Start returns
	drainErr error           // set before done is closed

	abandoned atomic.Bool // the drain was cut short: workers drop the keys left
	working   atomic.Bool // the workers run: the caches synced, and Start's context is not done
}

// New returns a controller that runs r. It does nothing until Start.
func New[K comparable](r Reconciler[K], opts Options[K]) (*Controller[K], error) {
	if r == nil {
		return nil, errors.New("controller: New: nil Reconciler")
	}
	if opts.Name == "" {
		opts.Name = "controller"
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 1
	}
	if opts.CacheSyncTimeout <= 0 {
		opts.CacheSyncTimeout = DefaultCacheSyncTimeout
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	c := &Controller[K]{
		name:            opts.Name,
		rec:             r,
		workers:         opts.MaxConcurrentReconciles,
		syncTimeout:     opts.CacheSyncTimeout,
		shutdownTimeout: opts.ShutdownTimeout,
		clk:             opts.Clock,
		log:             opts.Logger.With("controller", opts.Name),
		queue: workqueue.New(workqueue.Options[K]{
			Name:        opts.Name,
			Clock:       opts.Clock,
			RateLimiter: opts.RateLimiter,
			Metrics:     opts.QueueMetrics,
		}),
		metrics: newMetrics(opts.Metrics, opts.Name, opts.MaxConcurrentReconciles),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	c.onStop, _ = opts.Metrics.(StopObserver)
	return c, nil
}

// Name returns the controller's name.
func (c *Controller[K]) Name() string { return c.name }

// Queue returns the controller's queue, to add keys from elsewhere than an informer (Add,
// AddAfter) or to inspect it (Len, NumRequeues). Get, Done, Forget and the ShutDown
// methods belong to the controller's workers: do not call them.
func (c *Controller[K]) Queue() *workqueue.Queue[K] { return c.queue }

func (c *Controller[K]) addWatch(w *watch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.started:
		return ErrAlreadyStarted
	case c.stopping:
		return ErrShutDown
	}
	c.watches = append(c.watches, w)
	return nil
}

// Start runs the controller until ctx is done. It registers a handler on every watched
// informer (informers may be started before or after), waits until each informer has
// synced and the handler has been given its initial list, then starts
// Options.MaxConcurrentReconciles workers and blocks.
//
// When ctx is done (or Shutdown is called) it stops taking notifications and drains: the
// reconciles in flight and the keys already queued are reconciled with a context that is
// not yet cancelled, for at most Options.ShutdownTimeout (or until Shutdown's context ends).
// Then it cancels the reconciles' context, drops the keys left, and returns once every
// worker has returned. The reconciles' context carries ctx's values.
//
// Start returns nil after a complete drain. It returns an error wrapping
// context.DeadlineExceeded (or Shutdown's context error) if the drain was cut short; a
// *CacheSyncError if the informers did not sync within Options.CacheSyncTimeout; the
// informer's error if a handler could not be registered (a stopped informer); nil if ctx
// ended before the caches synced; and ErrAlreadyStarted or ErrShutDown if it was called
// before.
func (c *Controller[K]) Start(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.started:
		c.mu.Unlock()
		return ErrAlreadyStarted
	case c.stopping:
		c.mu.Unlock()
		return ErrShutDown
	}
	c.started = true
	c.mu.Unlock()
	defer close(c.done)
	defer c.notifyStopped()

	if err := c.register(); err != nil {
		c.queue.ShutDown()
		return err
	}
	c.log.Info("waiting for caches to sync", "informers", len(c.watches))
	if ok, err := c.waitForSync(ctx); !ok {
		c.unregister()
		c.queue.ShutDown()
		return err
	}

	c.working.Store(true)
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	c.log.Info("starting workers", "workers", c.workers)
	var wg sync.WaitGroup
	for range c.workers {
		wg.Go(func() { c.work(workCtx) })
	}

	select {
	case <-ctx.Done():
	case <-c.stop:
	}
	c.working.Store(false)
	drainCtx, timedOut, release := c.drainContext()
	c.log.Info("shutting down: draining the reconciles in flight and queued")
	c.unregister()
	err := c.queue.ShutDownWithDrain(drainCtx)
	release()
	if err != nil {
		switch {
		case c.shutdownTimeout < 0 && timedOut():
			err = fmt.Errorf("controller %s: shut down without a drain (negative ShutdownTimeout): %w", c.name, context.DeadlineExceeded)
		case timedOut():
			err = fmt.Errorf("controller %s: shutdown timeout (%v) reached before the queue drained: %w", c.name, c.shutdownTimeout, context.DeadlineExceeded)
		default:
			err = fmt.Errorf("controller %s: shutdown cut short before the queue drained: %w", c.name, err)
		}
		c.abandoned.Store(true)
		c.log.Warn("drain cut short: cancelling the reconciles in flight and dropping the keys queued", "err", err)
	}
	cancelWork()
	wg.Wait()
	c.log.Info("all workers finished")
	c.drainErr = err
	return err
}

// Ready returns nil while the controller reconciles: from when Start has seen every
// watched informer synced and started the workers until it begins to stop. Otherwise it
// says why not, naming each informer behind: one never started ("never started: add it to
// the manager, or call its Run"), one not synced yet; or that the controller is not
// started, or stopping. It never waits. A manager's /readyz asks it of a controller added
// as a runnable.
func (c *Controller[K]) Ready() error {
	if c.working.Load() {
		return nil
	}
	c.mu.Lock()
	started, stopping, watches := c.started, c.stopping, c.watches
	c.mu.Unlock()
	var why []string
	for _, w := range watches {
		if b := w.Behind(false); b != "" && !slices.Contains(why, b) {
			why = append(why, b)
		}
	}
	switch {
	case stopping || closed(c.done):
		why = []string{"stopping"}
	case len(why) > 0:
	case !started:
		why = []string{"not started"}
	default:
		why = []string{"starting"}
	}
	return fmt.Errorf("controller %s: %s", c.name, strings.Join(why, "; "))
}

// Shutdown stops a running controller gracefully, as cancelling Start's context does, but
// with the drain bounded by ctx instead of Options.ShutdownTimeout: when ctx ends, the
// reconciles' context is cancelled and the keys still queued are dropped. It returns once
// Start has returned, with Start's error, or ctx.Err() if ctx ends first (Start returns
// soon after, once the workers have returned).
//
// On a controller not started, Shutdown makes a later Start fail with ErrShutDown and
// returns nil. On a controller already stopping or stopped it only waits.
func (c *Controller[K]) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		if !c.stopping {
			c.stopping = true
			c.queue.ShutDown()
			defer c.notifyStopped()
		}
		c.mu.Unlock()
		return nil
	}
	if !c.stopping {
		c.stopping = true
		c.drainCtx = ctx
		close(c.stop)
	}
	c.mu.Unlock()
	select {
	case <-c.done:
		return c.drainErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notifyStopped tells the metrics provider, once, that the controller has stopped.
func (c *Controller[K]) notifyStopped() {
	if c.onStop != nil {
		c.stopOnce.Do(func() { c.onStop.ControllerStopped(c.name) })
	}
}

// drainContext returns the context bounding the drain: Shutdown's, or one that ends after
// Options.ShutdownTimeout on the controller's clock. timedOut reports whether the latter
// ended; release frees its timer and goroutine.
func (c *Controller[K]) drainContext() (ctx context.Context, timedOut func() bool, release func()) {
	no := func() bool { return false }
	c.mu.Lock()
	if c.stopping {
		ctx := c.drainCtx
		c.mu.Unlock()
		return ctx, no, func() {}
	}
	c.stopping = true
	c.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	if c.shutdownTimeout < 0 {
		cancel()
		return ctx, func() bool { return true }, func() {}
	}
	var fired atomic.Bool
	t := c.clk.NewTimer(c.shutdownTimeout)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-t.C():
			fired.Store(true)
			cancel()
		case <-quit:
		}
	})
	return ctx, fired.Load, func() {
		close(quit)
		wg.Wait()
		t.Stop()
		cancel()
	}
}

// register adds the controller's handler to every watched informer.
func (c *Controller[K]) register() error {
	for _, w := range c.watches {
		reg, err := w.add("controller/" + c.name)
		if err != nil {
			c.unregister()
			return fmt.Errorf("controller %s: adding a handler to informer %s: %w", c.name, w.name, err)
		}
		w.reg = reg
	}
	return nil
}

// unregister removes the handlers register added.
func (c *Controller[K]) unregister() {
	for _, w := range c.watches {
		if w.reg != nil {
			w.remove(w.reg)
			w.reg = nil
		}
	}
}

// waitForSync waits until every informer has synced and every handler has been given its
// initial list. It returns false and nil if ctx ended or Shutdown was called first, false
// and a *CacheSyncError on timeout.
func (c *Controller[K]) waitForSync(ctx context.Context) (bool, error) {
	if ctx.Err() != nil {
		return false, nil
	}
	if len(c.watches) == 0 {
		return true, nil
	}
	t := c.clk.NewTimer(c.syncTimeout)
	defer t.Stop()
	// On the real clock: one more timer of the controller's clock would change what tests
	// that count its timers see.
	grace := time.NewTimer(informer.NeverStartedAfter)
	defer grace.Stop()
	for _, w := range c.watches {
		for _, ch := range [...]<-chan struct{}{w.synced(), w.reg.Synced()} {
		wait:
			select {
			case <-ch:
			case <-ctx.Done():
				return false, nil
			case <-c.stop:
				return false, nil
			case <-grace.C:
				if idle := c.neverStarted(); len(idle) > 0 {
					c.log.Error("informers never started: they will never sync; add them to the manager, or call their Run (or Factory.Start)",
						"informers", idle, "cache_sync_timeout", c.syncTimeout)
				}
				goto wait
			case <-t.C():
				if err := c.syncError(); len(err.Informers) > 0 {
					c.log.Error("caches did not sync", "err", err)
					return false, err
				}
				// Everything synced at the deadline: go on, the channels are all closed.
			}
		}
	}
	c.log.Info("caches synced")
	return true, nil
}

// neverStarted names the watched informers whose Run has not been called.
func (c *Controller[K]) neverStarted() []string {
	var idle []string
	for _, w := range c.watches {
		if w.NeverStarted() && !slices.Contains(idle, w.name) {
			idle = append(idle, w.name)
		}
	}
	return idle
}

func (c *Controller[K]) syncError() *CacheSyncError {
	e := &CacheSyncError{Controller: c.name, Timeout: c.syncTimeout}
	seen := make(map[string]bool)
	for _, w := range c.watches {
		why := w.Behind(true)
		if why == "" {
			continue
		}
		if !seen[w.name] {
			seen[w.name] = true
			e.Informers = append(e.Informers, w.name)
			e.reasons = append(e.reasons, why)
		}
	}
	return e
}

// CacheSyncError is returned by Start when the watched informers did not sync within
// Options.CacheSyncTimeout. It matches context.DeadlineExceeded with errors.Is.
type CacheSyncError struct {
	// Controller is the controller's name.
	Controller string
	// Timeout is the Options.CacheSyncTimeout that passed.
	Timeout time.Duration
	// Informers names, in the order they were watched, each informer that had not synced
	// or whose handler for this controller had not yet been given the initial list.
	Informers []string

	reasons []string
}

// Error says which informers did not sync, and whether the informer itself or only the
// controller's handler on it was behind.
func (e *CacheSyncError) Error() string {
	why := strings.Join(e.reasons, "; ")
	if why == "" {
		why = "informers " + strings.Join(e.Informers, ", ") + " have not synced"
	}
	return fmt.Sprintf("controller %s: caches not synced after %v: %s", e.Controller, e.Timeout, why)
}

// Unwrap returns context.DeadlineExceeded.
func (e *CacheSyncError) Unwrap() error { return context.DeadlineExceeded }

// --- workers ---

// work is one worker: it reconciles keys until the queue is shut down and empty.
func (c *Controller[K]) work(ctx context.Context) {
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		if !c.abandoned.Load() {
			c.reconcile(ctx, key)
		}
		c.queue.Done(key)
	}
}

// reconcile runs the Reconciler for key and acts on its result.
func (c *Controller[K]) reconcile(ctx context.Context, key K) {
	m := c.metrics
	var start time.Time
	if m != nil {
		m.active.Inc()
		start = c.clk.Now()
	}
	res, err := c.call(ctx, key)
	if m != nil {
		m.time.Observe(c.clk.Since(start).Seconds())
		m.active.Dec()
	}
	o := c.handleResult(key, res, err)
	if m != nil {
		if err != nil {
			m.errors.Inc()
		}
		if _, ok := err.(*panicError); ok {
			m.panics.Inc()
		}
		if o == OutcomeTerminal {
			m.terminal.Inc()
		}
		m.total[o].Inc()
	}
}

// call runs the Reconciler with a panic turned into a *panicError.
func (c *Controller[K]) call(ctx context.Context, key K) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = Result{}, &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return c.rec.Reconcile(ctx, key)
}

// panicError is a recovered panic of Reconcile.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("reconcile panicked: %v", e.value) }

// handleResult applies a reconcile's outcome to the queue (see the package documentation)
// and logs it.
func (c *Controller[K]) handleResult(key K, res Result, err error) Outcome {
	if err != nil && !res.IsZero() {
		c.log.Warn("Reconcile returned both an error and a non-zero Result; the Result is ignored",
			"key", key, "requeue", res.Requeue, "requeueAfter", res.RequeueAfter, "err", err)
	}
	switch {
	case err != nil && errors.Is(err, ErrTerminal):
		c.queue.Forget(key)
		c.log.Error("reconcile failed with a terminal error; not retried", "key", key, "err", err)
		return OutcomeTerminal
	case err != nil:
		c.queue.AddRateLimited(key)
		if p, ok := err.(*panicError); ok {
			c.log.Error("reconcile panicked; retrying with backoff", "key", key, "panic", p.value,
				"retries", c.queue.NumRequeues(key), "stack", string(p.stack))
		} else {
			c.log.Error("reconcile failed; retrying with backoff", "key", key, "err", err,
				"retries", c.queue.NumRequeues(key))
		}
		return OutcomeError
	case res.RequeueAfter > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, res.RequeueAfter)
		if c.log.Enabled(context.Background(), slog.LevelDebug) {
			c.log.Debug("reconciled; requeued after a delay", "key", key, "after", res.RequeueAfter)
		}
		return OutcomeRequeueAfter
	case res.Requeue:
		c.queue.AddRateLimited(key)
		if c.log.Enabled(context.Background(), slog.LevelDebug) {
			c.log.Debug("reconciled; requeued with backoff", "key", key, "retries", c.queue.NumRequeues(key))
		}
		return OutcomeRequeue
	default:
		c.queue.Forget(key)
		if c.log.Enabled(context.Background(), slog.LevelDebug) {
			c.log.Debug("reconciled", "key", key)
		}
		return OutcomeSuccess
	}
}
