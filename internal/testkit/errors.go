package testkit

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// Errors collects the errors an informer (or anything with an error handler) reports, in
// order. Its zero value is ready to use; it is safe for concurrent use. Give Report as the
// error handler.
type Errors struct {
	mu   sync.Mutex
	list []error
}

// Report records err.
func (e *Errors) Report(err error) {
	e.mu.Lock()
	e.list = append(e.list, err)
	e.mu.Unlock()
}

// All returns a copy of the errors reported so far, in order.
func (e *Errors) All() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// Matching returns the errors reported so far that are, or wrap, target, in order.
func (e *Errors) Matching(target error) []error {
	var out []error
	for _, err := range e.All() {
		if errors.Is(err, target) {
			out = append(out, err)
		}
	}
	return out
}

// WaitFor waits until an error that is, or wraps, target has been reported, failing t after
// WaitLimit.
func (e *Errors) WaitFor(t testing.TB, target error) {
	t.Helper()
	Until(t, "an error matching "+target.Error(), time.Millisecond, func() bool { return len(e.Matching(target)) > 0 })
}
