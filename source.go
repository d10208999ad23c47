package informer

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/clock"
)

// sourceState is what the reflector knows of its source across passes: the last revision
// received, the last failure and when, when each kind of failure was last logged, and
// whether the next pass resumes a restored state.
type sourceState struct {
	clock  clock.Clock
	logger *slog.Logger
	report func(error)
	step   func() time.Duration // the backoff's current step: the Warn rate limit
	warned map[string]time.Time // when each kind of failure was last logged at Warn; reflector goroutine only

	mu       sync.Mutex
	lastSync string // the revision of the last list or event applied
	resume   bool   // warm restart: the next pass watches from lastSync without a list

	lastErr atomic.Pointer[sourceError]
}

func newSourceState(clk clock.Clock, logger *slog.Logger, report func(error), step func() time.Duration) *sourceState {
	return &sourceState{clock: clk, logger: logger, report: report, step: step, warned: map[string]time.Time{}}
}

// LastSyncRevision returns the revision of the last list or watch event received.
func (s *sourceState) LastSyncRevision() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSync
}

// Received records rev, when not empty, as the last revision received (LastSyncRevision),
// before the list or event that carries it is handed to the queue: whoever sees its
// effect (the cache synced, a handler called) sees the revision too.
func (s *sourceState) Received(rev string) {
	if rev == "" {
		return
	}
	s.mu.Lock()
	s.lastSync = rev
	s.mu.Unlock()
}

// ResumeFrom makes the next pass watch from rev, a restored state's revision, instead of
// listing.
func (s *sourceState) ResumeFrom(rev string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastSync = rev
	s.resume = true
}

// TakeResume reports whether this pass resumes a restored state, once.
func (s *sourceState) TakeResume() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	resume := s.resume
	s.resume = false
	return resume
}

// LastError returns when the last source error was reported and the error, or the zero
// time and nil. It is cleared when the source recovers: a list is applied, or a watch
// delivers an event.
func (s *sourceState) LastError() (at time.Time, err error) {
	if e := s.lastErr.Load(); e != nil {
		return e.at, e.err
	}
	return time.Time{}, nil
}

// Recovered clears the last source error.
func (s *sourceState) Recovered() {
	if s.lastErr.Load() != nil {
		s.lastErr.Store(nil)
	}
}

// Fail reports a source failure: to the error handler and Stats, as the last error, and
// to the log at Warn at most once per kind of failure per backoff step.
func (s *sourceState) Fail(err error) {
	now := s.clock.Now()
	s.lastErr.Store(&sourceError{err: err, at: now})
	s.report(err)
	kind := failureKind(err)
	if last, ok := s.warned[kind]; ok && now.Sub(last) < s.step() {
		return
	}
	s.warned[kind] = now
	s.logger.Warn("source failure", "kind", kind, "err", err)
}

// sourceError is the last source error and when it was reported.
type sourceError struct {
	err error
	at  time.Time
}
