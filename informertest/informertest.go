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
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
)

// DefaultTimeout is how long Recorder's waits (WaitFor, Expect, ExpectNext, Step) wait
// before they fail the test, unless WithTimeout changed it.
const DefaultTimeout = testkit.WaitLimit

// Recorder is an informer.Handler that records each call in the package's notation. It is
// safe for concurrent use; a test reads the calls while the informer runs. The tests of
// every package of the repository record with it (the root package's internal tests with
// the implementation it wraps).
type Recorder[V any] struct{ r *testkit.Recorder[V] }

var _ informer.Handler[int] = (*Recorder[int])(nil)

// NewRecorder returns a Recorder that renders objects with describe.
func NewRecorder[V any](describe func(obj V) (key, state string)) *Recorder[V] {
	return &Recorder[V]{testkit.NewRecorder(describe)}
}

// WithTimeout makes the recorder's waits fail after d instead of DefaultTimeout (for tests
// against slow real servers), and returns r. Call it before the recorder is in use.
func (r *Recorder[V]) WithTimeout(d time.Duration) *Recorder[V] { r.r.WithTimeout(d); return r }

// Hold makes every later call wait, before it is recorded, until Step lets it through: a
// test holds a handler inside a call to let a queue fill up behind it. Call it before the
// recorder gets its first call; it returns r.
func (r *Recorder[V]) Hold() *Recorder[V] { r.r.Hold(); return r }

// Step lets one call held by Hold through and returns its line once it is recorded; it
// fails t if no call comes in time.
func (r *Recorder[V]) Step(t testing.TB) string { t.Helper(); return r.r.Step(t) }

// Release lets every call held by Hold through, now and later; calling it again does
// nothing.
func (r *Recorder[V]) Release() { r.r.Release() }

// Record appends a line of its own (a marker a test wants to see in order with the calls).
func (r *Recorder[V]) Record(line string) { r.r.Record(line) }

// OnAdd records "add k=v", or "add*k=v" when initial.
func (r *Recorder[V]) OnAdd(obj V, initial bool) { r.r.OnAdd(obj, initial) }

// OnUpdate records "update k=old→new", or "resync k=v" when both states are the same.
func (r *Recorder[V]) OnUpdate(old, new V) { r.r.OnUpdate(old, new) }

// OnDelete records "delete k=v", or "delete?k=v" when the final state is unknown.
func (r *Recorder[V]) OnDelete(obj V, finalStateUnknown bool) { r.r.OnDelete(obj, finalStateUnknown) }

// Calls returns the calls recorded so far, in a new slice.
func (r *Recorder[V]) Calls() []string { return r.r.Calls() }

// Reset forgets the calls recorded so far, and what Expect and ExpectNext checked.
func (r *Recorder[V]) Reset() { r.r.Reset() }

// Wait waits until at least n calls were recorded and returns them, or returns ctx's
// error with the calls so far. It waits on the calls, never on time.
func (r *Recorder[V]) Wait(ctx context.Context, n int) ([]string, error) { return r.r.Wait(ctx, n) }

// WaitFor is Wait for a test: it fails t if n calls are not recorded within
// DefaultTimeout.
func (r *Recorder[V]) WaitFor(t testing.TB, n int) []string { t.Helper(); return r.r.WaitFor(t, n) }

// WaitForLine waits until line is recorded and returns the calls up to it, failing t if it
// is not within DefaultTimeout: for a test that knows the last call of a run but not how
// many come before it (updates a Coalesce handler may merge).
func (r *Recorder[V]) WaitForLine(t testing.TB, line string) []string {
	t.Helper()
	return r.r.WaitForLine(t, line)
}

// Expect waits for len(want) calls and fails t unless the first ones are exactly want, in
// order. Calls that arrive later are not checked: follow with a barrier (a change whose
// call must come next), or ExpectNoMore once none can come; ExpectNext checks the calls
// after these.
func (r *Recorder[V]) Expect(t testing.TB, want ...string) { t.Helper(); r.r.Expect(t, want...) }

// ExpectNext waits for the len(want) calls after those Expect and ExpectNext checked so
// far, and fails t unless they are exactly want, in order: a test checks a run of changes
// one step at a time with it.
func (r *Recorder[V]) ExpectNext(t testing.TB, want ...string) {
	t.Helper()
	r.r.ExpectNext(t, want...)
}

// ExpectNextUnordered is ExpectNext for calls whose order is not defined (those of
// different keys in one list): the next len(want) calls are want in any order.
func (r *Recorder[V]) ExpectNextUnordered(t testing.TB, want ...string) {
	t.Helper()
	r.r.ExpectNextUnordered(t, want...)
}

// Checked returns how many calls Expect, ExpectNext and ExpectNextUnordered have checked.
func (r *Recorder[V]) Checked() int { return r.r.Checked() }

// ExpectNoMore fails t if a call came after those Expect and ExpectNext checked. It looks
// once: a call still on its way is not seen, so a test makes sure first that none can be
// (a barrier, or a stopped informer).
func (r *Recorder[V]) ExpectNoMore(t testing.TB) { t.Helper(); r.r.ExpectNoMore(t) }

// ByKey groups lines of the notation by their key, keeping their order: the calls of
// different keys have no order to check, each key's do.
func ByKey(lines []string) map[string][]string { return testkit.ByKey(lines) }

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

// Check compares what the handler saw with the source's history (key → every state the
// key took, in order, Deleted for a delete) and, unless final is nil, with the final state
// (key → state; a key final lacks ends deleted). It returns one line per problem, in key
// order, none for a handler that behaved: each life-cycle violation (Errors), a key whose
// states are not a subsequence of its history (a handler may skip states, never invent or
// reorder them), a key whose last state is not its final one, a key of final never seen.
// Check a handler once it has converged (Converged), or the last states are not final yet.
func (c *LifeCycle[V]) Check(history map[string][]string, final map[string]string) []string {
	problems := c.Errors()
	for _, key := range slices.Sorted(slices.Values(c.Keys())) {
		seen, h := c.States(key), history[key]
		if !IsSubsequence(seen, h) {
			problems = append(problems, fmt.Sprintf("key %s: saw %q, not a subsequence of %q", key, seen, h))
		}
		if final == nil {
			continue
		}
		last := seen[len(seen)-1]
		if fv, ok := final[key]; ok && last != fv {
			problems = append(problems, fmt.Sprintf("key %s: last saw %q, final state %q (saw %q, history %q)", key, last, fv, seen, h))
		} else if !ok && last != Deleted {
			problems = append(problems, fmt.Sprintf("key %s: last saw %q, but the key is gone (history %q)", key, last, h))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(final)) {
		if len(c.States(key)) == 0 {
			problems = append(problems, "never heard of "+key)
		}
	}
	return problems
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
