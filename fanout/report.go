package fanout

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/errsink"
)

// reporter hands the failures nobody else will see to the error handler or, with none,
// to the log at Warn (at most once per kind of failure per warnEvery). Each method
// reports one kind; err says what failed, on what, and what to do, and the reporter puts
// the server's name before it.
type reporter struct {
	who          string // names the server in its errors: `fanout: server for informer "items"`
	logger       *slog.Logger
	errorHandler func(error)
	warner       *errsink.Warner // the Warn lines with no errorHandler
}

// warnEvery is the least time between two Warn lines of one kind of failure, with no
// ErrorHandler set.
const warnEvery = 10 * time.Second

// newReporter returns the reporter of o's Logger and ErrorHandler; who names the server,
// clk times the Warn lines.
func newReporter(o ServeOptions, who string, clk clock.Clock) *reporter {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &reporter{
		who: who, logger: logger, errorHandler: o.ErrorHandler,
		warner: errsink.NewWarner(logger, clk, warnEvery, "fanout error (set ServeOptions.ErrorHandler to handle these)"),
	}
}

// Encode reports an object that failed to encode.
func (r *reporter) Encode(err error) { r.report("encode", err) }

// TooLarge reports an object encoded larger than MaxObjectSize.
func (r *reporter) TooLarge(err error) { r.report("too_large", err) }

// Key reports a key function that failed on an object the informer keyed.
func (r *reporter) Key(err error) { r.report("key", err) }

// FilterIndex reports a filter index function that failed or panicked.
func (r *reporter) FilterIndex(err error) { r.report("filter_index", err) }

// UnknownEvent reports an event of an unknown type from the source.
func (r *reporter) UnknownEvent(err error) { r.report("unknown_event", err) }

// Stalled reports a client disconnected because it read nothing for WriteTimeout.
func (r *reporter) Stalled(err error) { r.report("stalled_client", err) }

// ListCut reports a list cut because its revision left the history.
func (r *reporter) ListCut(err error) { r.report("list_cut", err) }

// Panic logs a panic of a taken-over watch at Error, with its stack, and reports it.
func (r *reporter) Panic(err error, stack []byte) {
	r.logger.Error("fanout: panic serving a watch", "server", r.who, "err", err, "stack", string(stack))
	r.report("panic", err)
}

// Refused logs a request Authorize refused, at Debug.
func (r *reporter) Refused(remote string, code int, err error) {
	r.logger.Debug("fanout: request refused", "remote", remote, "code", code, "err", err)
}

func (r *reporter) report(kind string, err error) {
	err = fmt.Errorf("%s: %w", r.who, err)
	r.logger.Debug("fanout: serve error", "kind", kind, "err", err)
	if r.errorHandler != nil {
		r.errorHandler(err)
		return
	}
	if kind != "panic" { // its Error line, with the stack, is written already
		r.warner.Warn(kind, err)
	}
}
