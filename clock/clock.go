// Package clock abstracts time so that the informer's timers (resync, backoff, watch
// timeouts) and the workqueue's delays can be driven deterministically in tests.
//
// Real is the wall clock. Fake is a manual clock for tests: time moves only when Step or
// SetTime is called, and timers whose deadline has passed fire at that moment. A Fake also
// reports how many timers are waiting, so a test can wait for the code under test to arm its
// timer before it steps, instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock is the source of time used by the library.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time elapsed since t.
	Since(t time.Time) time.Duration
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer, as time.Timer.
type Timer interface {
	// C returns the channel on which the time is delivered when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped the timer before it fired.
	Stop() bool
	// Reset changes the timer to fire after d. It reports whether the timer had been active.
	Reset(d time.Duration) bool
}

// Real is the wall clock. The zero value is ready to use.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t).
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// NewTimer returns a time.Timer wrapped as a Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Fake is a manual clock for tests. Time advances only through Step and SetTime.
// It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever the set of waiting timers changes
}

// NewFake returns a Fake clock set to t.
func NewFake(t time.Time) *Fake {
	return &Fake{now: t, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns the fake time elapsed since t.
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTimer returns a timer that fires when the fake time reaches Now()+d.
// A timer with d <= 0 fires at once.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clock: f, c: make(chan time.Time, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(t, d)
	return t
}

// Step advances the fake time by d and fires every timer that is due.
func (f *Fake) Step(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// SetTime sets the fake time to t and fires every timer that is due.
func (f *Fake) SetTime(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(t)
}

// Waiters returns the number of timers that are armed and have not fired.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitForWaiters blocks until at least n timers are armed, or until done is closed.
// It reports whether n timers were reached.
func (f *Fake) WaitForWaiters(n int, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return true
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

func (f *Fake) setLocked(t time.Time) {
	f.now = t
	kept := f.timers[:0]
	for _, w := range f.timers {
		if !w.deadline.After(t) {
			w.armed = false
			select {
			case w.c <- t:
			default:
			}
			continue
		}
		kept = append(kept, w)
	}
	clear(f.timers[len(kept):])
	f.timers = kept
	f.notifyLocked()
}

func (f *Fake) armLocked(t *fakeTimer, d time.Duration) {
	t.deadline = f.now.Add(d)
	if d <= 0 {
		select {
		case t.c <- f.now:
		default:
		}
		return
	}
	t.armed = true
	f.timers = append(f.timers, t)
	f.notifyLocked()
}

func (f *Fake) disarmLocked(t *fakeTimer) bool {
	if !t.armed {
		return false
	}
	t.armed = false
	for i, w := range f.timers {
		if w == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			break
		}
	}
	f.notifyLocked()
	return true
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	clock    *Fake
	c        chan time.Time
	deadline time.Time
	armed    bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.clock.disarmLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := t.clock.disarmLocked(t)
	// Drain a stale tick, as time.Timer does since Go 1.23.
	select {
	case <-t.c:
	default:
	}
	t.clock.armLocked(t, d)
	return was
}
