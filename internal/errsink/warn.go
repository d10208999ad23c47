package errsink

import (
	"log/slog"
	"sync"
	"time"

	"github.com/informer-go/informer/clock"
)

// Warner logs errors at Warn, at most one line per kind per interval: what an informer or
// a server does with an error when no error handler is set, so that a failure shows at
// the default log level without flooding the log. Each line counts the errors of its
// kind left out since the previous one. Warn is safe for concurrent use; it costs a
// clock read and a map look-up under a mutex.
type Warner struct {
	logger  *slog.Logger
	clock   clock.Clock
	every   time.Duration
	message string

	mu     sync.Mutex
	warned map[string]warned // by kind
}

// warned is when a kind of error was last logged and how many were left out since.
type warned struct {
	at         time.Time
	suppressed int
}

// NewWarner returns a Warner that logs to logger, with message, at most one line per kind
// of error per interval every, as clk tells time (nil: clock.Real{}).
func NewWarner(logger *slog.Logger, clk clock.Clock, every time.Duration, message string) *Warner {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Warner{logger: logger, clock: clk, every: every, message: message, warned: map[string]warned{}}
}

// Warn logs err, of the given kind, at Warn (attributes kind, err and suppressed) unless
// an error of that kind was logged within the interval; then it only counts it, and the
// next line of that kind says how many it left out.
func (w *Warner) Warn(kind string, err error) {
	now := w.clock.Now()
	w.mu.Lock()
	last := w.warned[kind]
	if !last.at.IsZero() && now.Sub(last.at) < w.every {
		last.suppressed++
		w.warned[kind] = last
		w.mu.Unlock()
		return
	}
	w.warned[kind] = warned{at: now}
	w.mu.Unlock()
	w.logger.Warn(w.message, "kind", kind, "err", err, "suppressed", last.suppressed)
}
