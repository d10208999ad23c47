package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/informer-go/informer"
)

// Checker is a health or readiness check added with AddHealthzCheck or AddReadyzCheck: it
// returns nil when the check passes and an error saying why not otherwise. It is called
// on each probe, with the probe's request, and must not block.
type Checker func(req *http.Request) error

// phases of a Manager, for the health checks.
const (
	phaseNew int32 = iota
	phaseSyncing
	phaseRunning
	phaseStopping
	phaseStopped
)

// lifecycle is where a Manager is in its life, as the probes read it.
type lifecycle struct {
	phase    atomic.Int32
	failedAt atomic.Pointer[string] // why Start ended with an error
}

// Syncing marks the caches started and not yet synced.
func (l *lifecycle) Syncing() { l.phase.Store(phaseSyncing) }

// SetRunning marks the caches synced and the runnables started.
func (l *lifecycle) SetRunning() { l.phase.Store(phaseRunning) }

// Running reports whether the caches synced and the stop has not begun.
func (l *lifecycle) Running() bool { return l.phase.Load() == phaseRunning }

// Stopping marks the stop begun.
func (l *lifecycle) Stopping() { l.phase.Store(phaseStopping) }

// Stopped marks the stop done, after err (nil: a clean stop).
func (l *lifecycle) Stopped(err error) {
	if err != nil {
		msg := err.Error()
		l.failedAt.Store(&msg)
	}
	l.phase.Store(phaseStopped)
}

// checkList is the checks added by AddHealthzCheck and AddReadyzCheck.
type checkList struct {
	mu   sync.Mutex
	list []namedCheck
}

// namedCheck is a Checker added by the user.
type namedCheck struct {
	name  string
	ready bool // a /readyz check; else /healthz
	check Checker
}

// AddHealthzCheck adds a check to /healthz under name, as controller-runtime's
// AddHealthzCheck does: /healthz fails while it fails, /healthz/<name> runs it alone, and
// ?exclude=<name> leaves it out. It fails on an empty or repeated name or a nil check.
func (m *Manager) AddHealthzCheck(name string, check Checker) error {
	return m.addCheck(namedCheck{name: name, check: check})
}

// AddReadyzCheck adds a check to /readyz under name: /readyz fails while it fails,
// /readyz/<name> runs it alone, and ?exclude=<name> leaves it out. It fails on an empty
// or repeated name or a nil check.
func (m *Manager) AddReadyzCheck(name string, check Checker) error {
	return m.addCheck(namedCheck{name: name, ready: true, check: check})
}

func (m *Manager) addCheck(c namedCheck) error {
	if c.name == "" || c.check == nil {
		return fmt.Errorf("manager: a check needs a name and a Checker (name %q)", c.name)
	}
	m.checks.mu.Lock()
	defer m.checks.mu.Unlock()
	if slices.ContainsFunc(m.checks.list, func(o namedCheck) bool { return o.name == c.name && o.ready == c.ready }) {
		return fmt.Errorf("manager: a check named %q was already added", c.name)
	}
	m.checks.list = append(m.checks.list, c)
	return nil
}

// Handler returns the manager's HTTP handler:
//
//   - /healthz fails (503) when the manager is not running (not started, or Start returned
//     after a failure), when a Watchdog has a call in flight longer than its bound (named),
//     when this replica leads but no renewal was acknowledged within the renew deadline,
//     or when a check added with AddHealthzCheck fails.
//   - /readyz fails until the caches have synced and the runnables have started (so it
//     never passes before the informers it checks exist), when a cache is not synced
//     (named, with its last error), when a cache's source has kept failing for
//     Options.SourceErrorThreshold or shown no progress for Options.SourceProgressBound
//     (named, with since when), while stopping, and when a check added with
//     AddReadyzCheck fails. A follower is ready: readiness says nothing of the role.
//   - ?verbose lists every check, [+] or [-], then the role, the term and the leader, as
//     kube-apiserver does; a failing probe always lists its checks. ?exclude=<name>
//     (repeatable) leaves a check out; /healthz/<name> and /readyz/<name> run one check.
//   - /metrics serves Options.Metrics, if set and Options.MetricsAddr is not (it is then
//     served there alone); /debug/pprof/ serves net/http/pprof if Options.Pprof is set.
//
// Each probe reads atomics and channels only: it never blocks on the manager.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, probe := range []string{"healthz", "readyz"} {
		checks := m.healthChecks
		if probe == "readyz" {
			checks = m.readyChecks
		}
		serve := func(w http.ResponseWriter, r *http.Request) { m.serveProbe(w, r, probe, checks(r)) }
		mux.HandleFunc("/"+probe, serve)
		mux.HandleFunc("/"+probe+"/{check...}", serve)
	}
	if m.opts.Metrics != nil && m.opts.MetricsAddr == "" {
		mux.Handle("/metrics", m.MetricsHandler())
	}
	if m.opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// MetricsHandler serves Options.Metrics (404 if it is nil): the handler of /metrics,
// which Handler includes unless Options.MetricsAddr serves it apart.
func (m *Manager) MetricsHandler() http.Handler {
	if m.opts.Metrics == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.opts.Metrics, promhttp.HandlerOpts{})
}

// metricsMux serves MetricsHandler at /metrics alone, for Options.MetricsAddr.
func (m *Manager) metricsMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.MetricsHandler())
	return mux
}

// check is one line of a probe: its name and nil or why it fails.
type check struct {
	name string
	err  error
	note string // added to a passing line
}

func (m *Manager) serveProbe(w http.ResponseWriter, r *http.Request, probe string, checks []check) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if one := r.PathValue("check"); one != "" {
		i := slices.IndexFunc(checks, func(c check) bool { return c.name == one })
		if i < 0 {
			http.Error(w, fmt.Sprintf("no %s check named %q", probe, one), http.StatusNotFound)
			return
		}
		checks = checks[i : i+1]
	}
	exclude := r.URL.Query()["exclude"]
	failed := false
	var b strings.Builder
	for _, c := range checks {
		switch {
		case slices.Contains(exclude, c.name):
			fmt.Fprintf(&b, "[+]%s excluded: ok\n", c.name)
		case c.err != nil:
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, c.err)
		case c.note != "":
			fmt.Fprintf(&b, "[+]%s ok (%s)\n", c.name, c.note)
		default:
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	role, term := "follower", "none"
	if t, ok := m.Leading(); ok {
		role, term = "leader", t.String()
	}
	fmt.Fprintf(&b, "role: %s, term: %s\n", role, term)
	if id := m.Leader(); id != "" {
		fmt.Fprintf(&b, "leader: %s\n", id)
	}
	if failed {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%s%s check failed\n", b.String(), probe)
		return
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		fmt.Fprintf(w, "%s%s check passed\n", b.String(), probe)
		return
	}
	fmt.Fprint(w, "ok")
}

// userChecks runs the checks added for /readyz (ready) or /healthz.
func (m *Manager) userChecks(r *http.Request, ready bool) []check {
	m.checks.mu.Lock()
	added := slices.Clone(m.checks.list)
	m.checks.mu.Unlock()
	var checks []check
	for _, c := range added {
		if c.ready == ready {
			checks = append(checks, check{name: c.name, err: c.check(r)})
		}
	}
	return checks
}

// healthChecks are /healthz's checks.
func (m *Manager) healthChecks(r *http.Request) []check {
	checks := []check{{name: "manager", err: m.aliveErr()}}
	now := time.Now()
	for name, err := range m.watchdogErrs(now) {
		checks = append(checks, check{name: fmt.Sprintf("watchdog %q", name), err: err})
	}
	if l := m.leadership(); l != nil && m.opts.Elector != nil {
		var err error
		if since := now.Sub(l.Renewed()); since > l.RenewDeadline() {
			err = fmt.Errorf("leading term %d but no renewal acknowledged for %v (renew deadline %v)",
				l.Term().Value, since.Round(time.Millisecond), l.RenewDeadline())
		}
		checks = append(checks, check{name: "leader election", err: err})
	}
	return append(checks, m.userChecks(r, false)...)
}

func (m *Manager) aliveErr() error {
	switch m.life.phase.Load() {
	case phaseNew:
		return fmt.Errorf("not started")
	case phaseStopped:
		if msg := m.life.failedAt.Load(); msg != nil {
			return fmt.Errorf("stopped after a failure: %s", *msg)
		}
		return fmt.Errorf("stopped")
	}
	return nil
}

// readyChecks are /readyz's checks.
func (m *Manager) readyChecks(r *http.Request) []check {
	var err error
	switch m.life.phase.Load() {
	case phaseRunning:
	case phaseSyncing:
		err = fmt.Errorf("caches syncing")
	case phaseStopping, phaseStopped:
		err = fmt.Errorf("stopping")
	default:
		err = fmt.Errorf("not started")
	}
	checks := []check{{name: "manager", err: err}}
	caches, factories, runnables := m.added()
	now := time.Now()
	for _, c := range caches {
		checks = append(checks, check{name: fmt.Sprintf("informer %q", c.Name()), err: m.cacheErr(c, now), note: cacheNote(c.Stats())})
	}
	for i, f := range factories {
		checks = append(checks, check{name: fmt.Sprintf("factory %d", i), err: factoryErr(f)})
	}
	_, leading := m.Leading()
	for _, e := range runnables {
		rep, ok := e.Reporter()
		switch {
		case !ok:
		case !e.LeaderOnly() && m.life.Running():
			checks = append(checks, check{name: fmt.Sprintf("runnable %q", e.Name()), err: rep.Ready()})
		case e.LeaderOnly() && leading:
			checks = append(checks, check{name: fmt.Sprintf("leader-only runnable %q", e.Name()), err: rep.Ready()})
		}
	}
	return append(checks, m.userChecks(r, true)...)
}

// ReadyReporter is a Runnable that says whether it does its work, as a
// *controller.Controller does (nil: ready; otherwise why not, such as an informer it
// watches that was never started). /readyz asks each one added with Add while the
// manager runs, and each one added with AddLeader while this replica leads.
type ReadyReporter interface {
	Runnable
	// Ready returns nil when the runnable does its work, or why not; it must not block.
	Ready() error
}

// factoryErr asks f, without waiting, whether its started informers have synced.
func factoryErr(f *informer.Factory) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return f.WaitForCacheSync(ctx)
}

// serve listens on addr and serves h, for what (in errors). stop begins the server's
// shutdown, bounded by by, and returns at once; done is closed once the server has
// returned.
func (m *Manager) serve(what, addr string, h http.Handler) (stop func(by time.Time), done chan struct{}, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("manager: %s: %w", what, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done = make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error(what+" stopped", "err", err)
		}
	}()
	stop = func(by time.Time) {
		go func() {
			defer close(done)
			ctx, cancel := context.WithDeadline(context.Background(), by)
			defer cancel()
			if srv.Shutdown(ctx) != nil {
				srv.Close()
			}
			<-served
		}()
	}
	return stop, done, nil
}
