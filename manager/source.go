package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/informer-go/informer"
)

// progressAsker is a cache whose source may be asked for progress: *informer.Informer is
// one, and says ErrNotSupported for a source that cannot be asked. A nil error counts as
// progress: the source answered.
type progressAsker interface {
	RequestProgress(ctx context.Context) error
}

// sourceHealth follows a cache's source: failingSince is the first observation that saw
// new errors with no success (a list applied, a watch opened) since; progressAt the
// observation before the last one that saw progress (an event, a bookmark, a list, a new
// revision), or an answer to a progress request. Guarded by sources.mu.
type sourceHealth struct {
	errors, successes uint64
	failingSince      time.Time

	progress   uint64 // events, bookmarks and lists received
	revision   string
	progressAt time.Time // zero before the cache synced
	observedAt time.Time // the last observation of a synced cache
	askable    bool      // the source answered a progress request without ErrNotSupported
	asked      time.Time // the last progress request
	askErr     error     // its error
}

// sources follows the sources of a manager's caches, by cache.
type sources struct {
	mu     sync.Mutex
	health map[Cache]*sourceHealth // the caches running now
}

// of returns c's sourceHealth while c runs, and a fresh one, kept nowhere, before and
// after: a manager keeps no cache that stopped. The caller holds s.mu.
func (s *sources) of(c Cache) *sourceHealth {
	if h := s.health[c]; h != nil {
		return h
	}
	return &sourceHealth{}
}

// track follows c's source while c runs: until untrack.
func (s *sources) track(c Cache) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.health == nil {
		s.health = map[Cache]*sourceHealth{}
	}
	s.health[c] = &sourceHealth{}
}

// untrack forgets c, which has stopped.
func (s *sources) untrack(c Cache) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.health, c)
}

// observe takes the cache's counters at now.
func (h *sourceHealth) observe(s informer.Stats, now time.Time) {
	errs, oks := s.ListErrors+s.WatchErrors, s.Relists+s.Watches
	switch {
	case oks != h.successes:
		h.failingSince = time.Time{}
	case errs != h.errors && h.failingSince.IsZero():
		h.failingSince = now
	}
	h.errors, h.successes = errs, oks
	if !s.Synced {
		return
	}
	p := s.Added + s.Modified + s.Deleted + s.Bookmarks + s.Relists
	switch {
	case h.progressAt.IsZero():
		h.progress, h.revision, h.progressAt = p, s.ReceivedRevision, now
	case p != h.progress || s.ReceivedRevision != h.revision:
		// The progress came after the last observation, when or after it: counting from
		// then, a source that goes silent is not ready within the bound of its last
		// progress, however far apart the observations.
		h.progress, h.revision = p, s.ReceivedRevision
		if h.observedAt.After(h.progressAt) {
			h.progressAt = h.observedAt
		}
	}
	h.observedAt = now
}

// progressBound is the bound on a quiet source for h (0: none).
func (m *Manager) progressBound(h *sourceHealth) time.Duration {
	switch b := m.opts.SourceProgressBound; {
	case b < 0:
		return 0
	case b > 0:
		return b
	case h.askable:
		return DefaultSourceProgressBound
	}
	return 0
}

// runCache runs c, and while it runs asks its source for progress whenever it has been
// quiet for a quarter of the progress bound, so that a cut-off source shows in /readyz.
func (m *Manager) runCache(ctx context.Context, c Cache) error {
	m.sources.track(c)
	defer m.sources.untrack(c)
	asker, ok := c.(progressAsker)
	if !ok || m.opts.SourceProgressBound < 0 {
		return c.Run(ctx)
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { m.askProgress(pctx, c, asker) })
	err := c.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

func (m *Manager) askProgress(ctx context.Context, c Cache, asker progressAsker) {
	select {
	case <-c.Synced():
	case <-ctx.Done():
		return
	}
	bound := m.opts.SourceProgressBound
	if bound == 0 {
		bound = DefaultSourceProgressBound
	}
	every := bound / 4
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		m.sources.mu.Lock()
		h := m.sources.of(c)
		h.observe(c.Stats(), now)
		quiet := now.Sub(h.progressAt) >= every
		m.sources.mu.Unlock()
		if !quiet {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		err := asker.RequestProgress(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		m.sources.mu.Lock()
		h.asked, h.askErr = now, err
		h.askable = h.askable || !errors.Is(err, informer.ErrNotSupported)
		if err == nil { // the source answered: a quiet source, not a cut-off one
			h.progressAt = time.Now()
		}
		m.sources.mu.Unlock()
		if errors.Is(err, informer.ErrNotSupported) && m.opts.SourceProgressBound == 0 {
			return // no bound by default for such a source: nothing to ask
		}
	}
}

// cacheErr says why c is not ready, or nil.
func (m *Manager) cacheErr(c Cache, now time.Time) error {
	s := c.Stats()
	m.sources.mu.Lock()
	defer m.sources.mu.Unlock()
	h := m.sources.of(c)
	h.observe(s, now)
	if !s.Synced {
		return notSyncedErr(s, now)
	}
	if !h.failingSince.IsZero() && now.Sub(h.failingSince) >= m.opts.SourceErrorThreshold {
		return fmt.Errorf("source failing for %v, no successful list or watch since (list errors %d, watch errors %d)%s",
			now.Sub(h.failingSince).Round(time.Millisecond), s.ListErrors, s.WatchErrors, lastErr(s))
	}
	if b := m.progressBound(h); b > 0 && now.Sub(h.progressAt) >= b {
		var why strings.Builder
		fmt.Fprintf(&why, "no progress from its source for %v, since %s (no event, bookmark, list or answer to a progress request; bound %v)",
			now.Sub(h.progressAt).Round(time.Millisecond), h.progressAt.UTC().Format(timeFormat), b)
		if !h.asked.IsZero() {
			fmt.Fprintf(&why, "; asked for progress every %v, the last time at %s", b/4, h.asked.UTC().Format(timeFormat))
			if h.askErr != nil {
				fmt.Fprintf(&why, " (%v)", h.askErr)
			}
		}
		why.WriteString(lastErr(s))
		return errors.New(why.String())
	}
	return nil
}

// timeFormat is how the probes write a time.
const timeFormat = "15:04:05.000Z07:00"

// notSyncedErr says what an unsynced cache is doing: listing (for how long, how many
// objects so far), and its last error.
func notSyncedErr(s informer.Stats, now time.Time) error {
	var why strings.Builder
	why.WriteString("not synced")
	if !s.ListStarted.IsZero() {
		fmt.Fprintf(&why, ": listing for %v", now.Sub(s.ListStarted).Round(time.Millisecond))
		if n, ok := listedSoFar(s); ok {
			fmt.Fprintf(&why, ", %d objects so far", n)
		}
	} else if s.Lists == 0 && s.LastError == nil {
		why.WriteString(": no list attempted yet (is the informer running?)")
	}
	why.WriteString(lastErr(s))
	return errors.New(why.String())
}

// lastErr renders the cache's last error, if any, for a probe line.
func lastErr(s informer.Stats) string {
	if s.LastError == nil {
		return ""
	}
	return fmt.Sprintf("; last error at %s: %v", s.LastErrorAt.UTC().Format(timeFormat), s.LastError)
}

// listedSoFar returns the objects the list in flight has received so far.
func listedSoFar(s informer.Stats) (int64, bool) { return s.ListObjects, !s.ListStarted.IsZero() }

// cacheNote is what /readyz?verbose adds to a ready cache's line: a restored snapshot its
// source has not confirmed yet (informer.Options.ServeUnconfirmed).
func cacheNote(s informer.Stats) string {
	if s.Unconfirmed {
		return "restored, not yet confirmed by its source"
	}
	return ""
}
