// Package informertest helps test code that uses informers: Recorder, a handler that
// records its calls in a compact notation a test can compare with a literal; LifeCycle, a
// handler that checks every key goes through a valid life cycle and keeps the states it
// saw; and Eventually, a poller with a deadline for state that has no event to wait on.
//
// The notation, one string per call:
//
//	add k=v        OnAdd, not initial
//	add*k=v        OnAdd of the initial state (the first list, or a replay)
//	update k=a→b   OnUpdate from state a to state b
//	resync k=v     OnUpdate with the same state twice (a resync)
//	delete k=v     OnDelete of an observed delete
//	delete?k=v     OnDelete whose final state is unknown (found gone by a relist)
//
// k and v are what the describe function given to NewRecorder or NewLifeCycle returns for
// the object: its key and a short rendering of its state (a value, a revision).
package informertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
)

// DefaultTimeout is how long Recorder.WaitFor and Recorder.Expect wait before they fail
// the test.
const DefaultTimeout = 10 * time.Second

// Recorder is an informer.Handler that records each call in the package's notation. It is
// safe for concurrent use; a test reads the calls while the informer runs.
type Recorder[V any] struct {
	describe func(V) (key, state string)

	mu     sync.Mutex
	calls  []string
	signal chan struct{} // receives (without blocking) after each call
}

var _ informer.Handler[int] = (*Recorder[int])(nil)

// NewRecorder returns a Recorder that renders objects with describe.
func NewRecorder[V any](describe func(obj V) (key, state string)) *Recorder[V] {
	return &Recorder[V]{describe: describe, signal: make(chan struct{}, 1)}
}

// Record appends a line of its own (a marker a test wants to see in order with the calls).
func (r *Recorder[V]) Record(line string) {
	r.mu.Lock()
	r.calls = append(r.calls, line)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// OnAdd records "add k=v", or "add*k=v" when initial.
func (r *Recorder[V]) OnAdd(obj V, initial bool) {
	k, v := r.describe(obj)
	if initial {
		r.Record("add*" + k + "=" + v)
		return
	}
	r.Record("add " + k + "=" + v)
}

// OnUpdate records "update k=old→new", or "resync k=v" when both states are the same.
func (r *Recorder[V]) OnUpdate(old, new V) {
	k, nv := r.describe(new)
	_, ov := r.describe(old)
	if ov == nv {
		r.Record("resync " + k + "=" + nv)
		return
	}
	r.Record("update " + k + "=" + ov + "→" + nv)
}

// OnDelete records "delete k=v", or "delete?k=v" when the final state is unknown.
func (r *Recorder[V]) OnDelete(obj V, finalStateUnknown bool) {
	k, v := r.describe(obj)
	if finalStateUnknown {
		r.Record("delete?" + k + "=" + v)
		return
	}
	r.Record("delete " + k + "=" + v)
}

// Calls returns the calls recorded so far, in a new slice.
func (r *Recorder[V]) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Reset forgets the calls recorded so far.
func (r *Recorder[V]) Reset() {
	r.mu.Lock()
	r.calls = nil
	r.mu.Unlock()
}

// Wait waits until at least n calls were recorded and returns them, or returns ctx's
// error with the calls so far. It waits on the calls, never on time.
func (r *Recorder[V]) Wait(ctx context.Context, n int) ([]string, error) {
	for {
		if got := r.Calls(); len(got) >= n {
			return got, nil
		}
		select {
		case <-r.signal:
		case <-ctx.Done():
			return r.Calls(), ctx.Err()
		}
	}
}

// WaitFor is Wait for a test: it fails t if n calls are not recorded within
// DefaultTimeout.
func (r *Recorder[V]) WaitFor(t testing.TB, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	got, err := r.Wait(ctx, n)
	if err != nil {
		t.Fatalf("waited %v for %d calls, have %q", DefaultTimeout, n, got)
	}
	return got
}

// Expect waits for len(want) calls and fails t unless they are exactly want, in order.
// Calls that arrive later are not checked: follow with a barrier (a change whose call
// must come next) to check that nothing else came.
func (r *Recorder[V]) Expect(t testing.TB, want ...string) {
	t.Helper()
	if got := r.WaitFor(t, len(want)); !slices.Equal(got, want) {
		t.Fatalf("calls:\n got  %q\n want %q", got, want)
	}
}

// Deleted is the state LifeCycle records for a delete.
const Deleted = "<deleted>"

// LifeCycleOptions configures a LifeCycle.
type LifeCycleOptions struct {
	// Coalesce says the handler is registered with the Coalesce policy: a delete may then
	// carry a state newer than the last one it was told of (the updates between were
	// merged away), which is not an error.
	Coalesce bool
}

// LifeCycle is an informer.Handler that checks, on every call, that each key goes through
// a valid life cycle: an add only for a key absent or deleted, an update or a delete only
// for a key present, whose old state is the last one the handler saw. It keeps every state
// it saw per key, so that a test can compare them with the source's history.
type LifeCycle[V any] struct {
	describe func(V) (key, state string)
	opts     LifeCycleOptions

	mu     sync.Mutex
	states map[string][]string // key → states seen, in order; Deleted for a delete
	errs   []string
}

var _ informer.Handler[int] = (*LifeCycle[int])(nil)

// NewLifeCycle returns a LifeCycle that renders objects with describe.
func NewLifeCycle[V any](describe func(obj V) (key, state string), opts LifeCycleOptions) *LifeCycle[V] {
	return &LifeCycle[V]{describe: describe, opts: opts, states: map[string][]string{}}
}

func (c *LifeCycle[V]) see(key, state, old string, isAdd bool, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.states[key]
	prev, ok := "", len(seen) > 0
	if ok {
		prev = seen[len(seen)-1]
	}
	present := ok && prev != Deleted
	switch {
	case isAdd && present:
		c.errs = append(c.errs, fmt.Sprintf("add %s=%s on top of %q (no delete between)", key, state, prev))
	case !isAdd && !present:
		c.errs = append(c.errs, fmt.Sprintf("%s %s=%s without a preceding add (seen %q)", what, key, state, seen))
	case !isAdd && old != prev && !(c.opts.Coalesce && what == "delete"):
		c.errs = append(c.errs, fmt.Sprintf("%s %s: old %q but last seen %q", what, key, old, prev))
	}
	c.states[key] = append(seen, state)
}

// OnAdd checks and records an add.
func (c *LifeCycle[V]) OnAdd(obj V, _ bool) {
	k, v := c.describe(obj)
	c.see(k, v, "", true, "add")
}

// OnUpdate checks and records an update.
func (c *LifeCycle[V]) OnUpdate(old, new V) {
	k, nv := c.describe(new)
	_, ov := c.describe(old)
	c.see(k, nv, ov, false, "update")
}

// OnDelete checks and records a delete.
func (c *LifeCycle[V]) OnDelete(obj V, _ bool) {
	k, v := c.describe(obj)
	c.see(k, Deleted, v, false, "delete")
}

// Errors returns the violations seen so far; none for a valid life cycle.
func (c *LifeCycle[V]) Errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.errs)
}

// States returns the states seen for key, in order (Deleted for a delete).
func (c *LifeCycle[V]) States(key string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.states[key])
}

// Keys returns every key seen, in no particular order.
func (c *LifeCycle[V]) Keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.states))
	for k := range c.states {
		out = append(out, k)
	}
	return out
}

// Converged reports whether the last state seen of every key is final's (and Deleted for
// a key final lacks), and every key of final was seen.
func (c *LifeCycle[V]) Converged(final map[string]string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, seen := range c.states {
		last := seen[len(seen)-1]
		if fv, ok := final[key]; (ok && last != fv) || (!ok && last != Deleted) {
			return false
		}
	}
	for key := range final {
		if _, ok := c.states[key]; !ok {
			return false
		}
	}
	return true
}

// IsSubsequence reports whether seen is a subsequence of history: a handler may skip
// states, never invent or reorder them.
func IsSubsequence(seen, history []string) bool {
	i := 0
	for _, h := range history {
		if i < len(seen) && seen[i] == h {
			i++
		}
	}
	return i == len(seen)
}

// Eventually polls cond every millisecond until it is true, and fails t with the message
// if timeout passes first. Use it only for state that has no event or channel to wait on.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(time.Millisecond)
	}
}
