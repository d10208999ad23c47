package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
)

// Defaults of Options.
const (
	DefaultCacheSyncTimeout     = 2 * time.Minute
	DefaultShutdownTimeout      = 30 * time.Second
	DefaultCampaignRetry        = time.Second
	DefaultLeaderStopMargin     = time.Second
	DefaultSourceErrorThreshold = 30 * time.Second
)

// Runnable is anything the manager runs: Start blocks until ctx is done (or its work is
// finished) and returns nil, or an error that stops the manager.
type Runnable interface {
	// Start runs until ctx is done or the work is finished. A non-nil error returned
	// before ctx is done stops the manager.
	Start(ctx context.Context) error
}

// RunnableFunc adapts a function to Runnable.
type RunnableFunc func(ctx context.Context) error

// Start calls f(ctx).
func (f RunnableFunc) Start(ctx context.Context) error { return f(ctx) }

// Cache is an informer as the manager runs it; *informer.Informer[K, V] satisfies it. The
// manager runs it, waits for it to sync before it starts any runnable, and checks it for
// readiness.
type Cache interface {
	// Name identifies the cache in errors and health checks.
	Name() string
	// Run runs the cache until ctx is done; an error returned before stops the manager.
	Run(ctx context.Context) error
	// Synced is closed once the cache holds its initial list.
	Synced() <-chan struct{}
	// Stats are the counters /readyz reads to tell a failing source: list and watch
	// errors, and lists and watches that succeeded.
	Stats() informer.Stats
}

var _ Cache = (*informer.Informer[string, int])(nil)

// Options configures a Manager. Every zero value is a documented default.
type Options struct {
	// Elector campaigns for leadership; nil means the manager leads alone, at once, with
	// the zero Term.
	Elector Elector
	// CacheSyncTimeout bounds the wait for the caches to sync at Start; default
	// DefaultCacheSyncTimeout (2 minutes).
	CacheSyncTimeout time.Duration
	// ShutdownTimeout bounds the whole stop, from Start's context done to every runnable
	// and cache returned; default DefaultShutdownTimeout (30 s). A runnable still running
	// when it is spent is named in Start's error and abandoned.
	ShutdownTimeout time.Duration
	// CampaignRetry is the pause after a failed campaign; default DefaultCampaignRetry.
	CampaignRetry time.Duration
	// LeaderStopMargin is how long before the lease may expire (Leadership.Expires) the
	// leader-only runnables must have returned once leadership is lost; default
	// DefaultLeaderStopMargin (1 s). They get at least LeaderStopMargin in any case.
	LeaderStopMargin time.Duration
	// OnLeaderStuck is called, from a timer that no runnable can block, when leader-only
	// runnables have not returned by their hard deadline after leadership was lost; names
	// are theirs. Default: log at Error level and exit the process with status 1, since a
	// leader acting past its lease is exactly what must not happen.
	OnLeaderStuck func(names []string)
	// SourceErrorThreshold is how long a cache's source may keep failing (errors and no
	// successful list or watch since) before /readyz fails; default
	// DefaultSourceErrorThreshold (30 s).
	SourceErrorThreshold time.Duration
	// HealthAddr, if set, is the address (host:port) on which Start serves Handler: it
	// listens before the caches start and stops after everything else.
	HealthAddr string
	// Metrics, if set, is served at /metrics by Handler.
	Metrics prometheus.Gatherer
	// Logger receives the manager's logs; default slog.Default().
	Logger *slog.Logger
}

// ErrAlreadyStarted is returned by Start and the Add methods once Start has been called.
var ErrAlreadyStarted = errors.New("manager: already started")

// ErrShutdownTimeout is wrapped by Start's error when Options.ShutdownTimeout was spent
// before every runnable returned.
var ErrShutdownTimeout = errors.New("manager: shutdown timeout")

// phases of a Manager, for the health checks.
const (
	phaseNew int32 = iota
	phaseSyncing
	phaseRunning
	phaseStopping
	phaseStopped
)

// entry is something added to the manager.
type entry struct {
	name       string
	r          Runnable
	leaderOnly bool
}

// Manager runs a service's caches, runnables and leader-only runnables, in order: the
// health server, then the caches (informers and factories) until they have synced, then
// the runnables, then — while this replica leads — the leader-only runnables, with the
// term in their context. It stops them in reverse order within Options.ShutdownTimeout.
// Followers keep their caches running, so a new leader starts warm; a manager that loses
// leadership stops its leader-only runnables and campaigns again.
//
// Add everything before Start. Methods are safe for concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	caches    []Cache
	factories []*informer.Factory
	entries   []entry
	watchdogs []*Watchdog
	started   bool
	// leaderRunning counts the leader-only runnables running now, by name.
	leaderRunning map[string]int

	phase    atomic.Int32
	leader   atomic.Pointer[leaderState] // nil: not leading
	failedAt atomic.Pointer[string]      // why Start ended with an error

	stopBy atomic.Int64 // unix nanos by which the stop must be done; 0 before it begins

	srcMu     sync.Mutex
	srcHealth map[Cache]*sourceHealth
}

// leaderState is the current term as the health checks see it.
type leaderState struct{ l Leadership }

// New returns a manager configured by opts.
func New(opts Options) *Manager {
	if opts.CacheSyncTimeout <= 0 {
		opts.CacheSyncTimeout = DefaultCacheSyncTimeout
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.CampaignRetry <= 0 {
		opts.CampaignRetry = DefaultCampaignRetry
	}
	if opts.LeaderStopMargin <= 0 {
		opts.LeaderStopMargin = DefaultLeaderStopMargin
	}
	if opts.SourceErrorThreshold <= 0 {
		opts.SourceErrorThreshold = DefaultSourceErrorThreshold
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Manager{opts: opts, log: opts.Logger, srcHealth: map[Cache]*sourceHealth{}}
	if m.opts.OnLeaderStuck == nil {
		m.opts.OnLeaderStuck = func(names []string) {
			m.log.Error("leader-only runnables did not stop before the lease could expire: exiting", "runnables", names)
			os.Exit(1)
		}
	}
	return m
}

// AddInformer adds a cache: it is started before every runnable and must sync within
// Options.CacheSyncTimeout. It is stopped after every runnable.
func (m *Manager) AddInformer(c Cache) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return ErrAlreadyStarted
	}
	m.caches = append(m.caches, c)
	m.srcHealth[c] = &sourceHealth{}
	return nil
}

// AddFactory adds a factory: its informers registered before Start are started and waited
// for with the caches; it is shut down with them.
func (m *Manager) AddFactory(f *informer.Factory) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return ErrAlreadyStarted
	}
	m.factories = append(m.factories, f)
	return nil
}

// Add adds a runnable that runs on every replica, leader or not, once the caches have
// synced. name identifies it in logs, errors and health checks.
func (m *Manager) Add(name string, r Runnable) error { return m.add(entry{name: name, r: r}) }

// AddLeader adds a leader-only runnable: it is started at the beginning of each term this
// replica leads, with the Term in its context (TermFrom), and its context is cancelled
// when the term ends. Since it may be started once per term, Start must be callable more
// than once: a *controller.Controller runs once, so add a RunnableFunc that builds the
// controller and starts it.
func (m *Manager) AddLeader(name string, r Runnable) error {
	return m.add(entry{name: name, r: r, leaderOnly: true})
}

func (m *Manager) add(e entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return ErrAlreadyStarted
	}
	if e.r == nil {
		return fmt.Errorf("manager: %q: nil Runnable", e.name)
	}
	m.entries = append(m.entries, e)
	return nil
}

// leaderElection names the campaign loop and the leader-only runnables it runs.
const leaderElection = "leader election"

// running is one started thing, as the stop sees it.
type running struct {
	name string
	stop func()        // cancels it
	done chan struct{} // closed when it has returned
}

// Start runs everything added until ctx is done or a runnable fails, then stops it all in
// reverse order and returns. It returns nil after a clean stop; the error of the first
// runnable or cache that failed; an error naming the caches not synced within
// Options.CacheSyncTimeout; and, joined to those, an error wrapping ErrShutdownTimeout that
// names what had not returned when Options.ShutdownTimeout was spent. Start may be called
// once.
func (m *Manager) Start(ctx context.Context) (err error) {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return ErrAlreadyStarted
	}
	m.started = true
	caches, factories, entries := m.caches, m.factories, m.entries
	m.mu.Unlock()

	base := context.WithoutCancel(ctx)
	var (
		stack   []*running
		failMu  sync.Mutex
		failure error
	)
	runCtx, abort := context.WithCancel(ctx)
	defer abort()
	fail := func(err error) {
		failMu.Lock()
		if failure == nil {
			failure = err
		}
		failMu.Unlock()
		abort()
	}
	// launch runs fn in its own goroutine on a context only its stop cancels.
	launch := func(name string, fn func(ctx context.Context) error) {
		rctx, cancel := context.WithCancel(base)
		r := &running{name: name, stop: cancel, done: make(chan struct{})}
		stack = append(stack, r)
		go func() {
			defer close(r.done)
			if err := fn(rctx); err != nil && rctx.Err() == nil {
				fail(fmt.Errorf("manager: %s: %w", name, err))
			}
		}()
	}

	if m.opts.HealthAddr != "" {
		if err := m.serveHealth(&stack); err != nil {
			return err
		}
	}
	m.phase.Store(phaseSyncing)
	var syncers []informer.Syncer
	for _, c := range caches {
		launch(fmt.Sprintf("informer %q", c.Name()), c.Run)
		syncers = append(syncers, c)
	}
	for i, f := range factories {
		f.Start(base) // before the wait; Shutdown stops what it started
		launch(fmt.Sprintf("factory %d", i), func(ctx context.Context) error {
			<-ctx.Done()
			return f.Shutdown()
		})
	}
	if err := m.waitForSync(runCtx, syncers, factories); err != nil {
		if ctx.Err() == nil {
			fail(err) // the first failure wins: a cache that failed while syncing
		}
	} else {
		m.phase.Store(phaseRunning)
		for _, e := range entries {
			if !e.leaderOnly {
				launch(fmt.Sprintf("runnable %q", e.name), e.r.Start)
			}
		}
		var leaders []entry
		for _, e := range entries {
			if e.leaderOnly {
				leaders = append(leaders, e)
			}
		}
		launch(leaderElection, func(lctx context.Context) error { return m.lead(lctx, leaders, fail) })
	}

	<-runCtx.Done()
	m.phase.Store(phaseStopping)
	stopErr := m.stopAll(stack)
	m.phase.Store(phaseStopped)
	failMu.Lock()
	err = failure
	failMu.Unlock()
	if err != nil {
		msg := err.Error()
		m.failedAt.Store(&msg)
	}
	return errors.Join(err, stopErr)
}

// waitForSync waits for the caches and factories, bounded by Options.CacheSyncTimeout.
func (m *Manager) waitForSync(ctx context.Context, syncers []informer.Syncer, factories []*informer.Factory) error {
	sctx, cancel := context.WithTimeout(ctx, m.opts.CacheSyncTimeout)
	defer cancel()
	if err := informer.WaitForCacheSync(sctx, syncers...); err != nil {
		return fmt.Errorf("manager: caches not synced within %v: %w", m.opts.CacheSyncTimeout, err)
	}
	for i, f := range factories {
		if err := f.WaitForCacheSync(sctx); err != nil {
			return fmt.Errorf("manager: factory %d not synced within %v: %w", i, m.opts.CacheSyncTimeout, err)
		}
	}
	return nil
}

// stopAll stops the stack in reverse order within Options.ShutdownTimeout and names what
// had not returned when it was spent.
func (m *Manager) stopAll(stack []*running) error {
	deadline := time.Now().Add(m.opts.ShutdownTimeout)
	m.stopBy.Store(deadline.UnixNano())
	timer := time.NewTimer(m.opts.ShutdownTimeout)
	defer timer.Stop()
	var overran, abandoned []string
	spent := false
	for i := len(stack) - 1; i >= 0; i-- {
		r := stack[i]
		r.stop()
		if spent {
			select {
			case <-r.done:
			default:
				abandoned = append(abandoned, r.name)
			}
			continue
		}
		select {
		case <-r.done:
		case <-timer.C:
			spent = true
			name := r.name
			if name == leaderElection {
				name = fmt.Sprintf("%s (leader-only runnables running: %s)", name, quoted(m.leaderRunningNames()))
			}
			overran = append(overran, name)
			m.log.Error("shutdown timeout spent waiting for a runnable", "runnable", r.name, "timeout", m.opts.ShutdownTimeout)
		}
	}
	if !spent {
		return nil
	}
	msg := fmt.Sprintf("%s did not return within %v", strings.Join(overran, ", "), m.opts.ShutdownTimeout)
	if len(abandoned) > 0 {
		msg += fmt.Sprintf("; not waited for: %s", strings.Join(abandoned, ", "))
	}
	return fmt.Errorf("%w: %s", ErrShutdownTimeout, msg)
}

// quoted renders names as a comma-separated list of quoted strings.
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// serveHealth listens on Options.HealthAddr and serves Handler until the stop.
func (m *Manager) serveHealth(stack *[]*running) error {
	ln, err := net.Listen("tcp", m.opts.HealthAddr)
	if err != nil {
		return fmt.Errorf("manager: health server: %w", err)
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
	r := &running{name: "health server", done: make(chan struct{})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error("health server stopped", "err", err)
		}
	}()
	r.stop = func() {
		go func() {
			defer close(r.done)
			ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, m.stopBy.Load()))
			defer cancel()
			if srv.Shutdown(ctx) != nil {
				srv.Close()
			}
			<-served
		}()
	}
	*stack = append(*stack, r)
	return nil
}

// Leading reports whether the manager leads now, and the term.
func (m *Manager) Leading() (Term, bool) {
	s := m.leader.Load()
	if s == nil {
		return Term{}, false
	}
	return s.l.Term(), true
}
