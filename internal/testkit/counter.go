package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

// CallCounter is an event handler (OnAdd, OnUpdate, OnDelete of any object type) that counts
// its calls and lets a benchmark wait for a total without a waiter spinning. Its zero value
// counts; arm it with Expect before waiting.
type CallCounter[V any] struct {
	n, target atomic.Int64
	reached   atomic.Pointer[chan struct{}]
}

func (c *CallCounter[V]) inc() {
	if c.n.Add(1) == c.target.Load() {
		close(*c.reached.Load())
	}
}

// OnAdd counts a call.
func (c *CallCounter[V]) OnAdd(V, bool) { c.inc() }

// OnUpdate counts a call.
func (c *CallCounter[V]) OnUpdate(_, _ V) { c.inc() }

// OnDelete counts a call.
func (c *CallCounter[V]) OnDelete(V, bool) { c.inc() }

// Calls returns the number of calls so far.
func (c *CallCounter[V]) Calls() int64 { return c.n.Load() }

// Expect arms the counter for a total of n calls (counted from its start): Wait returns once
// they were made. Call it while no call can reach n, or after.
func (c *CallCounter[V]) Expect(n int64) {
	ch := make(chan struct{})
	c.reached.Store(&ch)
	c.target.Store(n)
	if c.n.Load() >= n {
		close(ch)
	}
}

// Wait reports whether the calls Expect armed for were made within timeout.
func (c *CallCounter[V]) Wait(timeout time.Duration) bool {
	select {
	case <-*c.reached.Load():
		return true
	case <-time.After(timeout):
		return false
	}
}

// WaitFor is Wait that fails tb ("handler saw n of m notifications") on timeout.
func (c *CallCounter[V]) WaitFor(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	if !c.Wait(timeout) {
		tb.Fatalf("handler saw %d of %d notifications", c.n.Load(), c.target.Load())
	}
}
