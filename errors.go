package informer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/errsink"
)

// This file holds the package's errors and the reporter, the one way an informer's
// errors reach Options.ErrorHandler, the log and the error counters of Stats.

// Errors of the read API.
var (
	// ErrUnknownIndex is returned by index queries that name an index that does not exist.
	ErrUnknownIndex = errors.New("informer: no such index")
	// ErrIndexExists is returned by AddIndexers for a name already in use.
	ErrIndexExists = errors.New("informer: index already exists")
)

// ErrStopped is returned for operations on an informer that has stopped.
var ErrStopped = errors.New("informer: stopped")

// ErrAlreadyStarted is returned by a second Run.
var ErrAlreadyStarted = errors.New("informer: already started")

// ErrRevisionsUnordered is returned by WaitForRevision for a source that does not
// implement RevisionComparer.
var ErrRevisionsUnordered = errors.New("informer: the source's revisions are not ordered")

// ObjectError is an error about one object: its key function, an index function or the
// transform failed. The object is skipped; the informer keeps running.
type ObjectError struct {
	// Informer names the informer (Options.Name).
	Informer string
	// Op is what failed: "key", "index <name>" or "transform".
	Op string
	// Key is the object's key, when known; otherwise Object is the object itself.
	Key any
	// Object is the object, when its key is not known.
	Object any
	// Err is the function's error, or the panic it raised.
	Err error
}

// Error names the informer, the function and the object: by key when known.
func (e *ObjectError) Error() string {
	name := e.Informer
	if name == "" {
		name = "informer"
	}
	if e.Key != nil {
		return fmt.Sprintf("informer %q: %s of the object with key %v: %v (the object is skipped until it changes)", name, e.Op, e.Key, e.Err)
	}
	obj := fmt.Sprintf("%+v", e.Object)
	if len(obj) > 200 {
		obj = obj[:200] + "…"
	}
	return fmt.Sprintf("informer %q: %s of object %s: %v (the object is skipped until it changes)", name, e.Op, obj, e.Err)
}

// Unwrap returns the function's error.
func (e *ObjectError) Unwrap() error { return e.Err }

// HandlerPanicError reports a handler call that panicked. The panic was recovered and the
// notification skipped; the handler goes on with the next one.
type HandlerPanicError struct {
	// Informer and Handler name the informer and the handler (HandlerOptions.Name).
	Informer, Handler string
	// Key is the key of the object the handler was called for.
	Key any
	// Value is what was passed to panic.
	Value any
	// Stack is the handler goroutine's stack where the panic was recovered.
	Stack []byte
}

// Error says which handler panicked on which key, and with what; the stack is in Stack.
func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("informer %q: handler %q panicked on key %v (notification skipped): %v", e.Informer, e.Handler, e.Key, e.Value)
}

// opError is a failed operation of the reflector: it names the informer and the operation
// once, then the source's error.
type opError struct {
	name, op string
	err      error
	retry    time.Duration // > 0: the operation is retried after this long
}

func (e *opError) Error() string {
	if e.retry > 0 {
		return fmt.Sprintf("informer %q: %s (retrying in %v): %v", e.name, e.op, e.retry, e.err)
	}
	return fmt.Sprintf("informer %q: %s: %v", e.name, e.op, e.err)
}
func (e *opError) Unwrap() error { return e.err }

// reporter sends an informer's errors to its error handler, its log and its counters.
type reporter struct {
	name    string
	handler func(error) // Options.ErrorHandler; nil: log at Warn, rate-limited
	logger  *slog.Logger
	count   func(kind string) // the counters' CountError
	warner  *errsink.Warner   // the Warn lines with no handler
}

// newReporter returns the reporter of the informer named name; count counts an error of
// a kind in Stats.
func newReporter(name string, handler func(error), logger *slog.Logger, clk clock.Clock, count func(kind string)) *reporter {
	return &reporter{name: name, handler: handler, logger: logger, count: count,
		warner: errsink.NewWarner(logger, clk, warnEvery, "informer error (set Options.ErrorHandler to handle these)")}
}

// report sends an error to the error handler and the log.
func (r *reporter) Report(err error) {
	if oe := (*ObjectError)(nil); errors.As(err, &oe) && oe.Informer == "" {
		oe.Informer = r.name
	}
	kind := errorKind(err)
	r.count(kind)
	r.logger.Debug("informer error", "kind", kind, "err", err)
	if r.handler != nil {
		r.handler(err)
		return
	}
	// With no handler an error must still show: the reflector logs source failures at
	// Warn itself; every other kind is logged here, at most once per kind per warnEvery.
	if !errors.As(err, new(*opError)) {
		r.warner.Warn(kind, err)
	}
}

// warnEvery is the least time between two Warn lines of one kind of object error, with
// no ErrorHandler set.
const warnEvery = 10 * time.Second

// errorKind sorts a reported error into the kinds Stats counts and the metrics' error
// counter labels: "key", "index", "transform", "decode", "source", "handler_panic" or
// "other". It is the one place that classifies reported errors.
func errorKind(err error) string {
	var oe *ObjectError
	switch {
	case errors.As(err, &oe):
		switch oe.Op {
		case "key", "transform":
			return oe.Op
		}
		return "index"
	case errors.As(err, new(*HandlerPanicError)):
		return "handler_panic"
	case errors.Is(err, ErrDecode):
		return "decode"
	case errors.Is(err, ErrBadInput):
		return "source"
	}
	return "other"
}

// failureKind names a failure's operation and class, the key of the Warn rate limit.
func failureKind(err error) string {
	op := "source"
	var oe *opError
	if errors.As(err, &oe) {
		op = oe.op
	}
	var k interface{ FailureKind() string }
	switch {
	case errors.As(err, &k):
		return op + ": " + k.FailureKind()
	case errors.Is(err, ErrExpired):
		return op + ": expired"
	case errors.Is(err, ErrRetryable):
		return op + ": retryable"
	case errors.Is(err, ErrBadInput):
		return op + ": bad input"
	}
	return op + ": other"
}

// newOpError is the failure of op, an operation of the informer named name; retry > 0:
// the operation is retried after it.
func newOpError(name, op string, err error, retry time.Duration) error {
	return &opError{name: name, op: op, err: err, retry: retry}
}
