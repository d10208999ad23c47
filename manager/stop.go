package manager

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
)

// leaderElection names the campaign loop and the leader-only runnables it runs.
const leaderElection = "leader election"

// running is one started thing, as the stop sees it.
type running struct {
	name string
	stop func()        // cancels it
	done chan struct{} // closed when it has returned
}

// runState is a running manager: what it started, by group, and its first failure. The
// groups start in the order of the fields and stop in reverse, the members of a group
// together.
type runState struct {
	m      *Manager
	base   context.Context // Start's context without its cancellation: each thing's own stop ends it
	ctx    context.Context // done when Start's context is, or at the first failure
	cancel context.CancelFunc

	mu                                  sync.Mutex
	health, caches, runnables, election []*running
	err                                 error

	stopBy atomic.Int64 // unix nanos by which the stop must be done; 0 before it begins

	// Guarded by m.mu.
	running  bool     // the caches synced: entries start as they are added
	stopping bool     // the stop began: nothing starts any more
	term     *termRun // the term in progress, for leader-only runnables added during it
}

func newRunState(m *Manager, ctx context.Context) *runState {
	rs := &runState{m: m, base: context.WithoutCancel(ctx)}
	rs.ctx, rs.cancel = context.WithCancel(ctx)
	return rs
}

// Fail records the first failure and stops the manager.
func (rs *runState) Fail(err error) {
	rs.mu.Lock()
	if rs.err == nil {
		rs.err = err
	}
	rs.mu.Unlock()
	rs.cancel()
}

// Abort ends the run's context, if the stop has not.
func (rs *runState) Abort() { rs.cancel() }

// Context is done when Start's context is, or at the first failure: then the stop begins.
func (rs *runState) Context() context.Context { return rs.ctx }

// Accepting reports whether things added may still start: the stop has not begun. The
// caller holds m.mu.
func (rs *runState) Accepting() bool { return !rs.stopping }

// Running reports whether the caches synced, so runnables added start at once. The
// caller holds m.mu.
func (rs *runState) Running() bool { return rs.running }

// SetRunning marks the caches synced. The caller holds m.mu.
func (rs *runState) SetRunning() { rs.running = true }

// SetStopping marks the stop begun: nothing starts any more. The caller holds m.mu.
func (rs *runState) SetStopping() { rs.stopping = true }

// SetTerm records the term in progress (nil: none), which leader-only runnables added
// during it join. The caller holds m.mu.
func (rs *runState) SetTerm(t *termRun) { rs.term = t }

// StopBy returns when the stop must be done; the zero time before it begins.
func (rs *runState) StopBy() time.Time {
	if by := rs.stopBy.Load(); by != 0 {
		return time.Unix(0, by)
	}
	return time.Time{}
}

func (rs *runState) Failure() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.err
}

// launch runs fn in its own goroutine, in group, on a context only its stop cancels.
func (rs *runState) launch(group *[]*running, name string, fn func(ctx context.Context) error) {
	rctx, cancel := context.WithCancel(rs.base)
	r := &running{name: name, stop: cancel, done: make(chan struct{})}
	rs.mu.Lock()
	*group = append(*group, r)
	rs.mu.Unlock()
	go func() {
		defer close(r.done)
		if err := fn(rctx); err != nil && rctx.Err() == nil {
			rs.Fail(fmt.Errorf("manager: %s: %w", name, err))
		}
	}()
}

// LaunchCache launches a cache (or a factory's informers) in the caches' group.
func (rs *runState) LaunchCache(name string, fn func(ctx context.Context) error) {
	rs.launch(&rs.caches, name, fn)
}

// StartFactory starts f's informers and launches its shutdown in the caches' group:
// Shutdown stops what Start started.
func (rs *runState) StartFactory(i int, f *informer.Factory) {
	f.Start(rs.base)
	rs.LaunchCache(fmt.Sprintf("factory %d", i), func(ctx context.Context) error {
		<-ctx.Done()
		return f.Shutdown()
	})
}

// LaunchElection launches the campaign loop, which runs the leader-only runnables.
func (rs *runState) LaunchElection(fn func(ctx context.Context) error) {
	rs.launch(&rs.election, leaderElection, fn)
}

// AdoptHealth adds a server (health, metrics) to the health group: stop begins its stop,
// to be done by the stop's deadline, and returns at once; done is closed once it has
// returned.
func (rs *runState) AdoptHealth(name string, stop func(by time.Time), done chan struct{}) {
	r := &running{name: name, done: done}
	r.stop = func() { stop(time.Unix(0, rs.stopBy.Load())) }
	rs.mu.Lock()
	rs.health = append(rs.health, r)
	rs.mu.Unlock()
}

// StartEntry starts e: a runnable at once, a leader-only runnable in the term in progress
// (the next terms start it from the entries). The caller holds m.mu.
func (rs *runState) StartEntry(e entry) {
	if !e.LeaderOnly() {
		rs.launch(&rs.runnables, fmt.Sprintf("runnable %q", e.Name()), e.Start)
		return
	}
	if rs.term != nil {
		rs.term.Start(e)
	}
}

// group returns a copy of a group's members.
func (rs *runState) group(g *[]*running) []*running {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]*running(nil), *g...)
}

// StopAll stops the groups in reverse order: the leader-only runnables and the runnables
// within Options.ShutdownTimeout less Options.CacheStopTimeout, then the caches and the
// health server within the rest. A group that overruns its part is named and abandoned,
// and the stop goes on, so the caches always stop and save their snapshots.
func (rs *runState) StopAll() error {
	m := rs.m
	end := time.Now().Add(m.opts.ShutdownTimeout)
	rs.stopBy.Store(end.UnixNano())
	runnablesBy := end.Add(-m.opts.CacheStopTimeout)
	runnablesPart := fmt.Sprintf("%v (ShutdownTimeout %v less CacheStopTimeout %v)",
		m.opts.ShutdownTimeout-m.opts.CacheStopTimeout, m.opts.ShutdownTimeout, m.opts.CacheStopTimeout)
	stages := []struct {
		members []*running
		by      time.Time
		part    string
	}{
		{rs.group(&rs.election), runnablesBy, runnablesPart},
		{rs.group(&rs.runnables), runnablesBy, runnablesPart},
		{rs.group(&rs.caches), end, fmt.Sprintf("%v (ShutdownTimeout)", m.opts.ShutdownTimeout)},
		{rs.group(&rs.health), end, fmt.Sprintf("%v (ShutdownTimeout)", m.opts.ShutdownTimeout)},
	}
	var overran []string
	for _, st := range stages {
		late := stopGroup(st.members, st.by)
		if len(late) == 0 {
			continue
		}
		for i, name := range late {
			if name == leaderElection {
				late[i] = fmt.Sprintf("%s (%s)", name, m.electionDoing())
			}
		}
		msg := fmt.Sprintf("%s did not return within %s", strings.Join(late, ", "), st.part)
		m.log.Error("shutdown timeout: abandoning what did not return", "runnables", late, "within", st.part)
		overran = append(overran, msg)
	}
	if len(overran) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; abandoned", ErrShutdownTimeout, strings.Join(overran, "; "))
}

// stopGroup stops every member at once and waits for them until by; it returns the names
// of those that had not returned then.
func stopGroup(members []*running, by time.Time) (late []string) {
	for _, r := range members {
		r.stop()
	}
	timer := time.NewTimer(time.Until(by))
	defer timer.Stop()
	spent := false
	for _, r := range members {
		if !spent {
			select {
			case <-r.done:
				continue
			case <-timer.C:
				spent = true
			}
		}
		select {
		case <-r.done:
		default:
			late = append(late, r.name)
		}
	}
	return late
}
