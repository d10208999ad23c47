package manager

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/informer-go/informer"
)

// Handler returns the manager's HTTP handler:
//
//   - /healthz fails (503) when the manager is not running (not started, or Start returned
//     after a failure), when a Watchdog has a call in flight longer than its bound (named),
//     or when this replica leads but no renewal was acknowledged within the renew deadline.
//   - /readyz fails until the caches have synced and the runnables have started (so it
//     never passes before the informers it checks exist), when a cache is not synced
//     (named), when a cache's source has kept failing for Options.SourceErrorThreshold
//     (named), and while stopping. A follower is ready: readiness says nothing of the role.
//   - ?verbose lists every check, [+] or [-], then the role and term, as kube-apiserver
//     does; a failing probe always lists its checks.
//   - /metrics serves Options.Metrics, if set.
//
// Each probe reads atomics and channels only: it never blocks on the manager.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { m.serveProbe(w, r, "healthz", m.healthChecks()) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { m.serveProbe(w, r, "readyz", m.readyChecks()) })
	if m.opts.Metrics != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(m.opts.Metrics, promhttp.HandlerOpts{}))
	}
	return mux
}

// check is one line of a probe: its name and nil or why it fails.
type check struct {
	name string
	err  error
}

func (m *Manager) serveProbe(w http.ResponseWriter, r *http.Request, probe string, checks []check) {
	failed := false
	var b strings.Builder
	for _, c := range checks {
		if c.err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, c.err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	role, term := "follower", "none"
	if t, ok := m.Leading(); ok {
		role, term = "leader", t.String()
	}
	fmt.Fprintf(&b, "role: %s, term: %s\n", role, term)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
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

// healthChecks are /healthz's checks.
func (m *Manager) healthChecks() []check {
	checks := []check{{name: "manager", err: m.aliveErr()}}
	m.mu.Lock()
	dogs := append([]*Watchdog(nil), m.watchdogs...)
	m.mu.Unlock()
	now := time.Now()
	for _, d := range dogs {
		checks = append(checks, check{name: fmt.Sprintf("watchdog %q", d.name), err: d.check(now)})
	}
	if s := m.leader.Load(); s != nil && m.opts.Elector != nil {
		var err error
		if since := now.Sub(s.l.Renewed()); since > s.l.RenewDeadline() {
			err = fmt.Errorf("leading term %d but no renewal acknowledged for %v (renew deadline %v)",
				s.l.Term().Value, since.Round(time.Millisecond), s.l.RenewDeadline())
		}
		checks = append(checks, check{name: "leader election", err: err})
	}
	return checks
}

func (m *Manager) aliveErr() error {
	switch m.phase.Load() {
	case phaseNew:
		return fmt.Errorf("not started")
	case phaseStopped:
		if msg := m.failedAt.Load(); msg != nil {
			return fmt.Errorf("stopped after a failure: %s", *msg)
		}
		return fmt.Errorf("stopped")
	}
	return nil
}

// readyChecks are /readyz's checks.
func (m *Manager) readyChecks() []check {
	var err error
	switch m.phase.Load() {
	case phaseRunning:
	case phaseSyncing:
		err = fmt.Errorf("caches syncing")
	case phaseStopping, phaseStopped:
		err = fmt.Errorf("stopping")
	default:
		err = fmt.Errorf("not started")
	}
	checks := []check{{name: "manager", err: err}}
	m.mu.Lock()
	caches, factories := m.caches, m.factories
	m.mu.Unlock()
	now := time.Now()
	for _, c := range caches {
		checks = append(checks, check{name: fmt.Sprintf("informer %q", c.Name()), err: m.cacheErr(c, now)})
	}
	for i, f := range factories {
		checks = append(checks, check{name: fmt.Sprintf("factory %d", i), err: factoryErr(f)})
	}
	return checks
}

// cacheErr says why c is not ready, or nil.
func (m *Manager) cacheErr(c Cache, now time.Time) error {
	select {
	case <-c.Synced():
	default:
		return fmt.Errorf("not synced")
	}
	m.srcMu.Lock()
	defer m.srcMu.Unlock()
	since := m.srcHealth[c].observe(c.Stats(), now)
	if !since.IsZero() && now.Sub(since) >= m.opts.SourceErrorThreshold {
		s := c.Stats()
		return fmt.Errorf("source failing for %v, no successful list or watch since (list errors %d, watch errors %d)",
			now.Sub(since).Round(time.Millisecond), s.ListErrors, s.WatchErrors)
	}
	return nil
}

// factoryErr asks f, without waiting, whether its started informers have synced.
func factoryErr(f *informer.Factory) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return f.WaitForCacheSync(ctx)
}

// sourceHealth follows a cache's counters from probe to probe: failingSince is the first
// probe that saw new errors with no success (a list applied, a watch opened) since.
type sourceHealth struct {
	errors, successes uint64
	failingSince      time.Time
}

func (h *sourceHealth) observe(s informer.Stats, now time.Time) (failingSince time.Time) {
	errs, oks := s.ListErrors+s.WatchErrors, s.Relists+s.Watches
	switch {
	case oks != h.successes:
		h.failingSince = time.Time{}
	case errs != h.errors && h.failingSince.IsZero():
		h.failingSince = now
	}
	h.errors, h.successes = errs, oks
	return h.failingSince
}

// Watchdog bounds the time of calls that must not hang, such as an informer handler's:
// /healthz fails, naming it, while one of its calls has been running longer than its bound.
// Make one with Manager.Watchdog; wrap a handler with TrackHandler, or call Begin yourself.
type Watchdog struct {
	name  string
	bound time.Duration

	mu     sync.Mutex
	next   uint64
	flight map[uint64]time.Time
}

// Watchdog returns a watchdog named name whose calls may each last up to bound; it is
// checked by /healthz from then on.
func (m *Manager) Watchdog(name string, bound time.Duration) *Watchdog {
	d := &Watchdog{name: name, bound: bound, flight: map[uint64]time.Time{}}
	m.mu.Lock()
	m.watchdogs = append(m.watchdogs, d)
	m.mu.Unlock()
	return d
}

// Begin marks a call started; call the returned function when it ends.
func (d *Watchdog) Begin() (end func()) {
	d.mu.Lock()
	id := d.next
	d.next++
	d.flight[id] = time.Now()
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		delete(d.flight, id)
		d.mu.Unlock()
	}
}

func (d *Watchdog) check(now time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var oldest time.Time
	for _, t := range d.flight {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	if !oldest.IsZero() && now.Sub(oldest) > d.bound {
		return fmt.Errorf("a call has been running for %v (bound %v)", now.Sub(oldest).Round(time.Millisecond), d.bound)
	}
	return nil
}

// TrackHandler returns h with each of its calls tracked by d.
func TrackHandler[V any](d *Watchdog, h informer.Handler[V]) informer.Handler[V] {
	return tracked[V]{d: d, h: h}
}

type tracked[V any] struct {
	d *Watchdog
	h informer.Handler[V]
}

func (t tracked[V]) OnAdd(obj V, initial bool) {
	defer t.d.Begin()()
	t.h.OnAdd(obj, initial)
}

func (t tracked[V]) OnUpdate(old, new V) {
	defer t.d.Begin()()
	t.h.OnUpdate(old, new)
}

func (t tracked[V]) OnDelete(obj V, finalStateUnknown bool) {
	defer t.d.Begin()()
	t.h.OnDelete(obj, finalStateUnknown)
}
