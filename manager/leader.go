package manager

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// electionStatus is the campaign loop's state as the rest of the manager reads it: the
// term held, the leader observed, the leader-only runnables running, and what the loop is
// doing.
type electionStatus struct {
	leader    atomic.Pointer[leaderState] // nil: not leading
	leaderID  atomic.Pointer[string]      // the observed leader's identity
	elected   chan struct{}               // closed when this replica first leads
	electOnce sync.Once

	mu sync.Mutex
	// running counts the leader-only runnables running now, by name.
	running map[string]int
	doing   string // what the campaign loop is doing, for a stop that overruns
}

func newElectionStatus() *electionStatus {
	return &electionStatus{elected: make(chan struct{})}
}

// leaderState is the current term as the health checks see it.
type leaderState struct{ l Leadership }

// Leading reports whether the manager leads now, and the term.
func (m *Manager) Leading() (Term, bool) {
	s := m.election.leader.Load()
	if s == nil {
		return Term{}, false
	}
	return s.l.Term(), true
}

// Elected returns a channel closed when this replica first leads (at once without an
// Elector), as controller-runtime's Elected does. It is never closed on a replica that
// never leads.
func (m *Manager) Elected() <-chan struct{} { return m.election.elected }

// Leader returns the identity of the replica that leads, as the Elector last observed it
// ("" when none leads or the Elector is not a LeaderObserver).
func (m *Manager) Leader() string {
	if id := m.election.leaderID.Load(); id != nil {
		return *id
	}
	return ""
}

// leadership returns the term held, or nil when not leading.
func (m *Manager) leadership() Leadership {
	if s := m.election.leader.Load(); s != nil {
		return s.l
	}
	return nil
}

// lead campaigns, runs the leader-only runnables for each term won, and campaigns again
// when a term is lost (Options.OnLoss), until ctx is done.
func (m *Manager) lead(ctx context.Context, rs *runState) error {
	if o, ok := m.opts.Elector.(LeaderObserver); ok {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { o.ObserveLeader(ctx, m.observed) })
	}
	for {
		var l Leadership
		if m.opts.Elector == nil {
			l = alone{never: make(chan struct{})}
		} else {
			m.setElectionDoing("campaigning")
			m.log.Info("campaigning")
			var err error
			l, err = m.opts.Elector.Campaign(ctx)
			if ctx.Err() != nil {
				if err == nil && l != nil {
					m.resign(rs, l, false)
				}
				return nil
			}
			if err != nil {
				m.log.Warn("campaign failed; campaigning again", "err", err, "after", m.opts.CampaignRetry)
				t := time.NewTimer(m.opts.CampaignRetry)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
				continue
			}
		}
		m.log.Info("leading", "term", l.Term().String())
		lost := m.runTerm(ctx, rs, l)
		if !lost || ctx.Err() != nil {
			return nil
		}
		if m.opts.OnLoss == ExitOnLoss {
			return fmt.Errorf("%w: term %s", ErrLeadershipLost, l.Term())
		}
		m.log.Warn("leadership lost; campaigning again", "term", l.Term().String())
	}
}

// observed records the leader the Elector observed.
func (m *Manager) observed(id string) {
	if old := m.election.leaderID.Swap(&id); old != nil && *old == id {
		return
	}
	if id == "" {
		m.log.Info("no leader")
	} else {
		m.log.Info("leader is " + id)
	}
	if m.opts.OnNewLeader != nil {
		m.opts.OnNewLeader(id)
	}
}

// termRun is one term's leader-only runnables.
type termRun struct {
	m   *Manager
	rs  *runState
	ctx context.Context
	l   Leadership
	wg  sync.WaitGroup
}

// Start runs e in the term.
func (t *termRun) Start(e entry) {
	t.m.setLeaderRunning(e.Name(), true)
	t.wg.Go(func() {
		defer t.m.setLeaderRunning(e.Name(), false)
		if err := e.Start(t.ctx); err != nil && t.ctx.Err() == nil {
			t.rs.Fail(fmt.Errorf("manager: leader-only runnable %q (term %d): %w", e.Name(), t.l.Term().Value, err))
		}
	})
}

// runTerm runs the leader-only runnables with the term in their context until the term is
// lost (it returns true) or ctx is done (false). It cancels them at once and waits for
// them; if they have not returned by LeaderStopMargin before the lease may expire it calls
// OnLeaderStuck from its timer. It resigns only once they have all returned.
func (m *Manager) runTerm(ctx context.Context, rs *runState, l Leadership) (lost bool) {
	tctx, cancel := context.WithCancel(WithTerm(context.WithoutCancel(ctx), l.Term()))
	defer cancel()
	t := &termRun{m: m, rs: rs, ctx: tctx, l: l}
	// Leading reports the term before its runnables start: one that asks at once, or
	// whose first act a reader sees, finds the term held.
	m.election.leader.Store(&leaderState{l})
	m.election.electOnce.Do(func() { close(m.election.elected) })
	m.mu.Lock()
	rs.SetTerm(t)
	for _, e := range m.entries {
		if e.LeaderOnly() {
			t.Start(e)
		}
	}
	m.mu.Unlock()
	m.setElectionDoing(fmt.Sprintf("leading term %d", l.Term().Value))
	select {
	case <-l.Lost():
		lost = true
		m.log.Warn("leadership lost: stopping the leader-only runnables", "term", l.Term().String())
	case <-ctx.Done():
	}
	m.mu.Lock()
	rs.SetTerm(nil) // no runnable joins the term from now on: wait for those it has
	m.mu.Unlock()
	allDone := make(chan struct{})
	go func() { t.wg.Wait(); close(allDone) }()
	cancel()
	m.election.leader.Store(nil) // no longer leading, whether or not the runnables have returned
	m.setElectionDoing(fmt.Sprintf("stopping the leader-only runnables of term %d", l.Term().Value))
	m.awaitLeaders(l, allDone)
	m.setElectionDoing(fmt.Sprintf("resigning term %d", l.Term().Value))
	m.resign(rs, l, lost)
	return lost
}

// awaitLeaders waits until allDone is closed. Their hard deadline is LeaderStopMargin
// before the lease may expire, computed from the lease held: while it is still renewed (a
// graceful stop) the deadline moves with it, and it stops moving once renewal stops. It
// is at least LeaderStopMargin from now. Past it, OnLeaderStuck is called, and the wait
// goes on: never lead again beside them.
func (m *Manager) awaitLeaders(l Leadership, allDone <-chan struct{}) {
	floor := time.Now().Add(m.opts.LeaderStopMargin) // a late loss (a paused process): fencing protects
	deadline := func() time.Time {
		exp := l.Expires()
		if exp.IsZero() {
			return time.Time{}
		}
		return later(exp.Add(-m.opts.LeaderStopMargin), floor)
	}
	for {
		d := deadline()
		if d.IsZero() {
			<-allDone
			return
		}
		timer := time.NewTimer(time.Until(d))
		select {
		case <-allDone:
			timer.Stop()
			return
		case <-timer.C:
		}
		if deadline().After(time.Now()) {
			continue // renewed meanwhile: the term is still held
		}
		names := m.leaderRunningNames()
		m.log.Error("leader-only runnables still running at their hard deadline", "runnables", names, "term", l.Term().String())
		m.opts.OnLeaderStuck(names)
		<-allDone // OnLeaderStuck returned (it need not exit)
		return
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// resign resigns l, bounded by the shutdown deadline and 5 s, or 1 s for a lost term (its
// lease is most likely gone, or the store unreachable).
func (m *Manager) resign(rs *runState, l Leadership, lost bool) {
	bound := 5 * time.Second
	if lost {
		bound = time.Second
	}
	if by := rs.StopBy(); !by.IsZero() {
		bound = min(bound, time.Until(by))
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(bound, 100*time.Millisecond))
	defer cancel()
	if err := l.Resign(ctx); err != nil {
		m.log.Warn("resigning", "term", l.Term().String(), "err", err)
		return
	}
	if !l.Term().IsZero() {
		m.log.Info("resigned", "term", l.Term().String())
	}
}

func (m *Manager) setLeaderRunning(name string, on bool) {
	m.election.mu.Lock()
	defer m.election.mu.Unlock()
	if m.election.running == nil {
		m.election.running = map[string]int{}
	}
	if on {
		m.election.running[name]++
	} else if m.election.running[name]--; m.election.running[name] <= 0 {
		delete(m.election.running, name)
	}
}

// leaderRunningNames returns the leader-only runnables running now, sorted.
func (m *Manager) leaderRunningNames() []string {
	m.election.mu.Lock()
	defer m.election.mu.Unlock()
	names := make([]string, 0, len(m.election.running))
	for n := range m.election.running {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (m *Manager) setElectionDoing(what string) {
	m.election.mu.Lock()
	m.election.doing = what
	m.election.mu.Unlock()
}

// electionDoing says what the campaign loop is doing, for a stop that overran.
func (m *Manager) electionDoing() string {
	names := m.leaderRunningNames()
	m.election.mu.Lock()
	defer m.election.mu.Unlock()
	if len(names) > 0 {
		return fmt.Sprintf("%s; leader-only runnables running: %s", m.election.doing, quoted(names))
	}
	return m.election.doing
}

// quoted renders names as a comma-separated list of quoted strings.
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// alone is the Leadership of a manager without an Elector: it leads from Start to stop.
type alone struct{ never chan struct{} }

func (a alone) Term() Term                   { return Term{} }
func (a alone) Lost() <-chan struct{}        { return a.never }
func (a alone) Renewed() time.Time           { return time.Time{} }
func (a alone) RenewDeadline() time.Duration { return 0 }
func (a alone) Expires() time.Time           { return time.Time{} }
func (a alone) Resign(context.Context) error { return nil }
