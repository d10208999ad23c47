package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
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
	DefaultSourceProgressBound  = 20 * time.Second
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

// LossPolicy is what a manager does when its term is lost.
type LossPolicy int

const (
	// CampaignAgain stops the leader-only runnables and campaigns again: a demoted
	// replica needs no restart. The default.
	CampaignAgain LossPolicy = iota
	// ExitOnLoss stops the leader-only runnables and then stops the manager: Start
	// returns an error wrapping ErrLeadershipLost, as client-go's leader election does.
	ExitOnLoss
)

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
	// when its part is spent is named in Start's error and abandoned.
	ShutdownTimeout time.Duration
	// CacheStopTimeout is the part of ShutdownTimeout kept for the caches, which stop
	// last and save their snapshots: the runnables get ShutdownTimeout less it, and the
	// caches stop even after a runnable overran its part. Default a third of
	// ShutdownTimeout; it must be below ShutdownTimeout.
	CacheStopTimeout time.Duration
	// CampaignRetry is the pause after a failed campaign; default DefaultCampaignRetry.
	CampaignRetry time.Duration
	// LeaderStopMargin is how long before the lease may expire (Leadership.Expires) the
	// leader-only runnables must have returned once leadership is lost. Default: half of
	// the elector's TTL − RenewDeadline for a TimedElector, at most DefaultLeaderStopMargin
	// (1 s); DefaultLeaderStopMargin otherwise. New fails if it is not below TTL −
	// RenewDeadline. They get at least LeaderStopMargin in any case.
	LeaderStopMargin time.Duration
	// OnLeaderStuck is called, from a timer that no runnable can block, when leader-only
	// runnables have not returned by their hard deadline after leadership was lost; names
	// are theirs. Default: log at Error level and exit the process with status 1, since a
	// leader acting past its lease is exactly what must not happen.
	OnLeaderStuck func(names []string)
	// OnLoss is what the manager does when a term is lost; default CampaignAgain.
	OnLoss LossPolicy
	// OnNewLeader, if set, is called with the leader's identity ("" when none leads) each
	// time it changes, from one goroutine, when the Elector is a LeaderObserver.
	OnNewLeader func(identity string)
	// SourceErrorThreshold is how long a cache's source may keep failing (errors and no
	// successful list or watch since) before /readyz fails; default
	// DefaultSourceErrorThreshold (30 s).
	SourceErrorThreshold time.Duration
	// SourceProgressBound is how long a synced cache's source may show no progress (no
	// event, no bookmark, no list) before /readyz fails, naming it and since when. A
	// source that can be asked for progress (Informer.RequestProgress: etcd) is asked
	// every quarter of the bound while nothing comes, so a quiet source stays ready and a
	// cut-off one does not: for such a cache the default is DefaultSourceProgressBound
	// (20 s). A source that cannot be asked has no bound by default (a quiet source cannot
	// be told from a stalled one); set one if it sends something at least that often.
	// Negative: no bound for any cache.
	SourceProgressBound time.Duration
	// HealthAddr, if set, is the address (host:port) on which Start serves Handler: it
	// listens before the caches start and stops after everything else.
	HealthAddr string
	// Metrics, if set, is served at /metrics: by Handler, or on MetricsAddr alone.
	Metrics prometheus.Gatherer
	// MetricsAddr, if set, is the address (host:port) on which Start serves /metrics
	// (MetricsHandler) apart from the probes, as controller-runtime's metrics bind
	// address: Handler then leaves /metrics out. It listens before the caches start and
	// stops after everything else. It needs Metrics.
	MetricsAddr string
	// Pprof serves net/http/pprof's handlers under /debug/pprof/ on Handler.
	Pprof bool
	// Logger receives the manager's logs; default slog.Default().
	Logger *slog.Logger
}

// ErrAlreadyStarted is returned by Start once Start has been called, and by the Add
// methods once the manager is stopping or stopped.
var ErrAlreadyStarted = errors.New("manager: already started")

// ErrShutdownTimeout is wrapped by Start's error when Options.ShutdownTimeout, or the
// runnables' part of it, was spent before everything returned.
var ErrShutdownTimeout = errors.New("manager: shutdown timeout")

// ErrLeadershipLost is wrapped by Start's error when a term was lost and Options.OnLoss
// is ExitOnLoss.
var ErrLeadershipLost = errors.New("manager: leadership lost")

// entry is something added to the manager.
type entry struct {
	name       string
	r          Runnable
	leaderOnly bool
}

// Name identifies the runnable in logs, errors and health checks.
func (e entry) Name() string { return e.name }

// LeaderOnly reports whether it runs only while this replica leads.
func (e entry) LeaderOnly() bool { return e.leaderOnly }

// Start runs the runnable.
func (e entry) Start(ctx context.Context) error { return e.r.Start(ctx) }

// Reporter returns the runnable if it reports readiness.
func (e entry) Reporter() (ReadyReporter, bool) {
	r, ok := e.r.(ReadyReporter)
	return r, ok
}

// Manager runs a service's caches, runnables and leader-only runnables, in order: the
// health server, then the caches (informers and factories) until they have synced, then
// the runnables, then — while this replica leads — the leader-only runnables, with the
// term in their context. It stops them in reverse order within Options.ShutdownTimeout,
// each group's members together, the caches last. Followers keep their caches running, so
// a new leader starts warm; a manager that loses leadership stops its leader-only
// runnables and campaigns again (Options.OnLoss).
//
// Caches and runnables may be added before Start or while it runs. Methods are safe for
// concurrent use. Once Start has returned, the manager lets go of everything added to
// it: a stopped manager that the program keeps (its Handler mounted on a server of the
// program's, say) does not keep the informers, factories and runnables, nor their caches.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	caches    []Cache
	factories []*informer.Factory
	entries   []entry
	watchdogs []*Watchdog
	started   bool
	run       *runState // the running manager's groups; nil before Start and after the stop

	election *electionStatus // the campaign loop's state: the term held, the leader observed

	life lifecycle // where it is, for the probes

	checks  checkList // added by AddHealthzCheck and AddReadyzCheck
	sources sources   // the caches' sources, as /readyz follows them
}

// New returns a manager configured by opts. It fails on options that cannot work
// together, saying what to change: an Elector whose timing is inconsistent, a
// LeaderStopMargin that leaves no time to stop before the lease may expire, a
// CacheStopTimeout not below ShutdownTimeout.
func New(opts Options) (*Manager, error) {
	if opts.CacheSyncTimeout <= 0 {
		opts.CacheSyncTimeout = DefaultCacheSyncTimeout
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.CacheStopTimeout <= 0 {
		opts.CacheStopTimeout = opts.ShutdownTimeout / 3
	}
	if opts.CacheStopTimeout >= opts.ShutdownTimeout {
		return nil, fmt.Errorf("manager: CacheStopTimeout %v must be below ShutdownTimeout %v: the runnables stop within the difference",
			opts.CacheStopTimeout, opts.ShutdownTimeout)
	}
	if opts.MetricsAddr != "" && opts.Metrics == nil {
		return nil, fmt.Errorf("manager: MetricsAddr %q is set but Metrics is nil: set Metrics to the registry to serve", opts.MetricsAddr)
	}
	if opts.CampaignRetry <= 0 {
		opts.CampaignRetry = DefaultCampaignRetry
	}
	if err := fitMargin(&opts); err != nil {
		return nil, err
	}
	if opts.SourceErrorThreshold <= 0 {
		opts.SourceErrorThreshold = DefaultSourceErrorThreshold
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Manager{opts: opts, log: opts.Logger, election: newElectionStatus()}
	if m.opts.OnLeaderStuck == nil {
		m.opts.OnLeaderStuck = func(names []string) {
			m.log.Error("leader-only runnables did not stop before the lease could expire: exiting", "runnables", names)
			os.Exit(1)
		}
	}
	return m, nil
}

// fitMargin checks a TimedElector's timing and sets or checks LeaderStopMargin against it.
func fitMargin(opts *Options) error {
	te, ok := opts.Elector.(TimedElector)
	if !ok {
		if opts.LeaderStopMargin <= 0 {
			opts.LeaderStopMargin = DefaultLeaderStopMargin
		}
		return nil
	}
	t := te.Timing()
	if !(0 < t.RetryPeriod && t.RetryPeriod < t.RenewDeadline && t.RenewDeadline < t.TTL) {
		return fmt.Errorf("manager: the elector's timing (RetryPeriod %v, RenewDeadline %v, TTL %v) must have RetryPeriod < RenewDeadline < TTL: change the elector's options",
			t.RetryPeriod, t.RenewDeadline, t.TTL)
	}
	gap := t.TTL - t.RenewDeadline
	if opts.LeaderStopMargin <= 0 {
		opts.LeaderStopMargin = min(DefaultLeaderStopMargin, gap/2)
		return nil
	}
	if opts.LeaderStopMargin >= gap {
		return fmt.Errorf("manager: LeaderStopMargin %v is not below the elector's TTL %v less its RenewDeadline %v (%v): the hard stop of stuck leader-only work would come after the lease may expire; set LeaderStopMargin below %v (%v leaves as much time to stop as to exit), or lower the elector's RenewDeadline",
			opts.LeaderStopMargin, t.TTL, t.RenewDeadline, gap, gap, gap/2)
	}
	return nil
}

// AddInformer adds a cache. Added before Start, it is started before every runnable and
// must sync within Options.CacheSyncTimeout. Added to a running manager, it starts at
// once and /readyz fails, naming it, until it has synced; nothing waits for it. Either
// way it stops with the caches, after every runnable, and saves its snapshot there. Added
// to a stopping or stopped manager, it does not start, and AddInformer returns
// ErrAlreadyStarted.
func (m *Manager) AddInformer(c Cache) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started && (m.run == nil || !m.run.Accepting()) {
		return ErrAlreadyStarted
	}
	m.caches = append(m.caches, c)
	if m.run != nil {
		m.run.LaunchCache(fmt.Sprintf("informer %q", c.Name()), func(ctx context.Context) error { return m.runCache(ctx, c) })
	}
	return nil
}

// AddFactory adds a factory: its informers registered before Start are started and waited
// for with the caches; it is shut down with them. Added to a running manager, its
// informers start at once, and /readyz fails until they have synced. Added to a stopping
// or stopped manager, it returns ErrAlreadyStarted.
func (m *Manager) AddFactory(f *informer.Factory) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started && (m.run == nil || !m.run.Accepting()) {
		return ErrAlreadyStarted
	}
	m.factories = append(m.factories, f)
	if m.run != nil {
		m.run.StartFactory(len(m.factories)-1, f)
	}
	return nil
}

// Add adds a runnable that runs on every replica, leader or not, once the caches have
// synced. name identifies it in logs, errors and health checks. Added to a running
// manager, it starts at once (or once the caches have synced); added to a stopping or
// stopped one, it does not start, and Add returns ErrAlreadyStarted.
func (m *Manager) Add(name string, r Runnable) error { return m.add(entry{name: name, r: r}) }

// AddLeader adds a leader-only runnable: it is started at the beginning of each term this
// replica leads, with the Term in its context (TermFrom), and its context is cancelled
// when the term ends. Since it may be started once per term, Start must be callable more
// than once: a *controller.Controller runs once, so add a RunnableFunc that builds the
// controller and starts it. Added to a running manager, it starts with the next term,
// or at once in the current one; added to a stopping or stopped one, it returns
// ErrAlreadyStarted.
func (m *Manager) AddLeader(name string, r Runnable) error {
	return m.add(entry{name: name, r: r, leaderOnly: true})
}

func (m *Manager) add(e entry) error {
	if e.r == nil {
		return fmt.Errorf("manager: %q: nil Runnable", e.name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started && (m.run == nil || !m.run.Accepting()) {
		return ErrAlreadyStarted
	}
	m.entries = append(m.entries, e)
	if m.run != nil && m.run.Running() {
		m.run.StartEntry(e)
	}
	return nil
}

// Start runs everything added until ctx is done or a runnable fails, then stops it all in
// reverse order and returns. It returns nil after a clean stop; the error of the first
// runnable or cache that failed; an error naming the caches not synced within
// Options.CacheSyncTimeout; an error wrapping ErrLeadershipLost (Options.OnLoss); and,
// joined to those, an error wrapping ErrShutdownTimeout that names what had not returned
// when its part of Options.ShutdownTimeout was spent. Start may be called once.
func (m *Manager) Start(ctx context.Context) (err error) {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return ErrAlreadyStarted
	}
	m.started = true
	rs := newRunState(m, ctx)
	m.run = rs
	caches, factories := m.caches, m.factories
	m.mu.Unlock()
	defer m.release()
	defer rs.Abort()

	for _, srv := range []struct {
		what, addr string
		h          func() http.Handler
	}{{"health server", m.opts.HealthAddr, m.Handler}, {"metrics server", m.opts.MetricsAddr, m.metricsMux}} {
		if srv.addr == "" {
			continue
		}
		stop, done, err := m.serve(srv.what, srv.addr, srv.h())
		if err != nil {
			m.mu.Lock()
			rs.SetStopping()
			m.mu.Unlock()
			stopErr := rs.StopAll() // an informer added meanwhile
			m.mu.Lock()
			m.run = nil
			m.mu.Unlock()
			return errors.Join(err, stopErr)
		}
		rs.AdoptHealth(srv.what, stop, done)
	}
	m.life.Syncing()
	var syncers []informer.Syncer
	for _, c := range caches {
		rs.LaunchCache(fmt.Sprintf("informer %q", c.Name()), func(ctx context.Context) error { return m.runCache(ctx, c) })
		syncers = append(syncers, c)
	}
	for i, f := range factories {
		rs.StartFactory(i, f) // before the wait
	}
	if err := m.waitForSync(rs.Context(), syncers, factories); err != nil {
		if ctx.Err() == nil {
			rs.Fail(err) // the first failure wins: a cache that failed while syncing
		}
	} else {
		m.life.SetRunning()
		m.mu.Lock()
		rs.SetRunning()
		for _, e := range m.entries {
			rs.StartEntry(e)
		}
		m.mu.Unlock()
		rs.LaunchElection(func(lctx context.Context) error { return m.lead(lctx, rs) })
	}

	<-rs.Context().Done()
	m.life.Stopping()
	m.mu.Lock()
	rs.SetStopping()
	m.mu.Unlock()
	stopErr := rs.StopAll()
	err = rs.Failure()
	m.life.Stopped(err)
	m.mu.Lock()
	m.run = nil
	m.mu.Unlock()
	m.log.Info("stopped", "err", errors.Join(err, stopErr))
	return errors.Join(err, stopErr)
}

// release lets go of what was added, once Start has stopped it all: a stopped manager
// the program keeps (its Handler mounted elsewhere, say) does not keep the informers and
// their caches. Nothing can be added or started after that.
func (m *Manager) release() {
	m.mu.Lock()
	m.caches, m.factories, m.entries = nil, nil, nil
	m.mu.Unlock()
}

// added returns the caches, factories and runnables added so far.
func (m *Manager) added() ([]Cache, []*informer.Factory, []entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.caches, m.factories, m.entries
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
