// Package wakeup parks the watches that a source serves without a goroutine each
// (source/memory's, a fan-out Server's filtered ones): a watch whose Next finds nothing to
// deliver joins its source's List and blocks on its Waiter's channel; a change wakes the
// List, and each woken Next looks again.
package wakeup

// Waiter is the part of a watch that blocks in Next: a wake-up channel of capacity one
// and whether the watch is on a List. Make one with NewWaiter; the List's owner guards
// it with the lock that guards the List.
type Waiter struct {
	c       chan struct{}
	waiting bool
}

// NewWaiter returns a Waiter that is on no List.
func NewWaiter() Waiter { return Waiter{c: make(chan struct{}, 1)} }

// C is the channel Next blocks on: a value on it means "something changed, look again".
func (w *Waiter) C() <-chan struct{} { return w.c }

// Signal wakes the Next blocked on w, or the next one to block; it never blocks. Safe for
// concurrent use.
func (w *Waiter) Signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Watch is what a List holds: a pointer to a watch, which gives its Waiter.
type Watch interface {
	comparable
	// Waiter returns the watch's Waiter: the same one on every call, never nil.
	Waiter() *Waiter
}

// List is the set of watches blocked in Next, in no particular order. The zero value is
// empty. It is not safe for concurrent use: its owner's lock guards it and its watches'
// Waiters. Add and Remove cost O(1) and O(n); waking costs O(n) and keeps the capacity.
type List[W Watch] struct {
	ws []W
}

// Len returns the number of watches on the list.
func (l *List[W]) Len() int { return len(l.ws) }

// Add puts w on the list unless it is on it already.
func (l *List[W]) Add(w W) {
	if wt := w.Waiter(); !wt.waiting {
		wt.waiting = true
		l.ws = append(l.ws, w)
	}
}

// Remove takes w off the list if it is on it.
func (l *List[W]) Remove(w W) {
	wt := w.Waiter()
	if !wt.waiting {
		return
	}
	wt.waiting = false
	for i, x := range l.ws {
		if x == w {
			last := len(l.ws) - 1
			l.ws[i] = l.ws[last]
			var zero W
			l.ws[last] = zero
			l.ws = l.ws[:last]
			return
		}
	}
}

// WakeAll signals every watch on the list and empties it.
func (l *List[W]) WakeAll() {
	for _, w := range l.ws {
		wt := w.Waiter()
		wt.waiting = false
		wt.Signal()
	}
	clear(l.ws)
	l.ws = l.ws[:0]
}

// WakeIf signals the watches on the list for which wake returns true and takes them off
// it; the others stay.
func (l *List[W]) WakeIf(wake func(W) bool) {
	keep := l.ws[:0]
	for _, w := range l.ws {
		if !wake(w) {
			keep = append(keep, w)
			continue
		}
		wt := w.Waiter()
		wt.waiting = false
		wt.Signal()
	}
	clear(l.ws[len(keep):])
	l.ws = keep
}
