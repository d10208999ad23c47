package manager

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// lead campaigns, runs the leader-only runnables for each term won, and campaigns again
// when a term is lost, until ctx is done.
func (m *Manager) lead(ctx context.Context, leaders []entry, fail func(error)) error {
	for {
		var l Leadership
		if m.opts.Elector == nil {
			l = alone{never: make(chan struct{})}
		} else {
			var err error
			l, err = m.opts.Elector.Campaign(ctx)
			if ctx.Err() != nil {
				if err == nil && l != nil {
					m.resign(l, false)
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
		m.leader.Store(&leaderState{l})
		lost := m.runTerm(ctx, l, leaders, fail)
		if !lost || ctx.Err() != nil {
			return nil
		}
		m.log.Warn("leadership lost; campaigning again", "term", l.Term().String())
	}
}

// runTerm runs the leader-only runnables with the term in their context until the term is
// lost (it returns true) or ctx is done (false). It cancels them at once, and if they have
// not returned by LeaderStopMargin before the lease may expire it calls OnLeaderStuck from
// its timer. It resigns only once they have all returned.
func (m *Manager) runTerm(ctx context.Context, l Leadership, leaders []entry, fail func(error)) (lost bool) {
	tctx, cancel := context.WithCancel(WithTerm(context.WithoutCancel(ctx), l.Term()))
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range leaders {
		m.setLeaderRunning(e.name, true)
		wg.Go(func() {
			defer m.setLeaderRunning(e.name, false)
			if err := e.r.Start(tctx); err != nil && tctx.Err() == nil {
				fail(fmt.Errorf("manager: leader-only runnable %q (term %d): %w", e.name, l.Term().Value, err))
			}
		})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()

	select {
	case <-l.Lost():
		lost = true
		m.log.Warn("leadership lost: stopping the leader-only runnables", "term", l.Term().String())
	case <-ctx.Done():
	}
	cancel()
	m.leader.Store(nil) // no longer leading, whether or not the runnables have returned

	var hard <-chan time.Time
	if exp := l.Expires(); !exp.IsZero() {
		deadline := exp.Add(-m.opts.LeaderStopMargin)
		if floor := time.Now().Add(m.opts.LeaderStopMargin); deadline.Before(floor) {
			deadline = floor // expired already (a paused process): fencing protects; stop now
		}
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		hard = t.C
	}
	select {
	case <-allDone:
	case <-hard:
		names := m.leaderRunningNames()
		m.log.Error("leader-only runnables still running at their hard deadline", "runnables", names, "term", l.Term().String())
		m.opts.OnLeaderStuck(names)
		select { // OnLeaderStuck returned (it need not exit): never lead again beside them
		case <-allDone:
		case <-ctx.Done():
			return lost
		}
	case <-ctx.Done():
		if !lost { // shutting down: wait within the shutdown budget, which stopAll enforces
			select {
			case <-allDone:
			case <-hard:
				names := m.leaderRunningNames()
				m.opts.OnLeaderStuck(names)
				return false
			}
		}
	}
	m.resign(l, lost)
	return lost
}

// resign resigns l, bounded by the shutdown deadline and 5 s, or 1 s for a lost term (its
// lease is most likely gone, or the store unreachable).
func (m *Manager) resign(l Leadership, lost bool) {
	bound := 5 * time.Second
	if lost {
		bound = time.Second
	}
	if by := m.stopBy.Load(); by != 0 {
		bound = min(bound, time.Until(time.Unix(0, by)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(bound, 100*time.Millisecond))
	defer cancel()
	if err := l.Resign(ctx); err != nil {
		m.log.Warn("resigning", "term", l.Term().String(), "err", err)
	}
}

func (m *Manager) setLeaderRunning(name string, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaderRunning == nil {
		m.leaderRunning = map[string]int{}
	}
	if on {
		m.leaderRunning[name]++
	} else if m.leaderRunning[name]--; m.leaderRunning[name] <= 0 {
		delete(m.leaderRunning, name)
	}
}

// leaderRunningNames returns the leader-only runnables running now, sorted.
func (m *Manager) leaderRunningNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.leaderRunning))
	for n := range m.leaderRunning {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
