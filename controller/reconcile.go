package controller

import (
	"context"
	"errors"
	"time"
)

// Reconciler makes the world match the desired state of the object named by a key. It is
// called by the controller's workers, never for the same key by two of them at once.
//
// Reconcile should read what it needs (from an informer's cache, typically), act, and
// report how it went: see Result and TerminalError for what the controller does with each
// outcome. It must return once ctx is done; ctx stays live while the controller drains at
// shutdown and is cancelled when the drain is cut short. A panic is recovered and treated as
// an error.
type Reconciler[K comparable] interface {
	// Reconcile brings the world in line with the desired state of key and reports how it
	// went (see the type's comment).
	Reconcile(ctx context.Context, key K) (Result, error)
}

// ReconcilerFunc adapts a function into a Reconciler.
type ReconcilerFunc[K comparable] func(ctx context.Context, key K) (Result, error)

// Reconcile calls f(ctx, key).
func (f ReconcilerFunc[K]) Reconcile(ctx context.Context, key K) (Result, error) {
	return f(ctx, key)
}

// Result tells the controller whether and when to reconcile a key again after a
// successful Reconcile. The zero Result means done: the key is reconciled again only when
// a notification for it arrives. A Result returned along with an error is ignored.
type Result struct {
	// Requeue asks for the key to be reconciled again after the rate limiter's backoff,
	// as if the reconcile had failed, but without logging or counting an error.
	Requeue bool
	// RequeueAfter, if positive, asks for the key to be reconciled again after this
	// duration, whatever notifications arrive meanwhile; the key's backoff is reset. It
	// takes precedence over Requeue. A key already waiting for an earlier time keeps it.
	RequeueAfter time.Duration
}

// IsZero reports whether r is the zero Result.
func (r Result) IsZero() bool { return r == Result{} }

// ErrTerminal matches, with errors.Is, every error made by TerminalError.
var ErrTerminal = errors.New("terminal error")

// TerminalError wraps err to tell the controller that retrying will not help: the key is
// not requeued, its backoff is reset, and the error is logged and counted as terminal. The
// result still matches err with errors.Is and errors.As, and ErrTerminal with errors.Is, also
// when wrapped further. TerminalError(nil) returns ErrTerminal.
func TerminalError(err error) error {
	if err == nil {
		return ErrTerminal
	}
	return &terminalError{err: err}
}

type terminalError struct{ err error }

func (e *terminalError) Error() string        { return "terminal error: " + e.err.Error() }
func (e *terminalError) Unwrap() error        { return e.err }
func (e *terminalError) Is(target error) bool { return target == ErrTerminal }
