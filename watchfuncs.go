package informer

import (
	"context"
	"io"
	"sync"
)

// ChanWatch returns a Watch whose Next returns the events received from events, in the
// order they were sent, so that a source written as a goroutine that sends on a channel
// needs no Watch type of its own. Next returns io.EOF once events is closed (after the
// events sent before), ctx.Err() once ctx is done, and io.EOF after Stop; a nil events
// channel makes a watch that delivers nothing until it is stopped or ctx ends.
//
// stop, if not nil, is called once, by the first call to Stop: typically the
// context.CancelFunc of the context the sending goroutine watches, so that it returns
// rather than block on a send nobody receives. Without it, the sender must watch ctx.
// ChanWatch starts no goroutine; Next costs one channel receive.
func ChanWatch[V any](ctx context.Context, events <-chan Event[V], stop func()) Watch[V] {
	return &chanWatch[V]{ctx: ctx, events: events, stopFunc: stop, stopped: make(chan struct{})}
}

// FuncWatch returns a Watch whose Next calls next and whose Stop calls stop (if not nil)
// once, by the first call to Stop. After Stop, Next returns io.EOF without calling next.
// next is called as Next is: by one goroutine at a time. It must follow the contract of
// Watch.Next (io.EOF for a normal end; return promptly once stop has been called or the
// watch's context is done), which FuncWatch cannot enforce on a call already under way.
func FuncWatch[V any](next func() (Event[V], error), stop func()) Watch[V] {
	return &funcWatch[V]{next: next, stopFunc: stop, stopped: make(chan struct{})}
}

// chanWatch is the Watch of ChanWatch.
type chanWatch[V any] struct {
	ctx      context.Context
	events   <-chan Event[V]
	stopFunc func()
	once     sync.Once
	stopped  chan struct{} // closed by the first Stop
}

func (w *chanWatch[V]) Next() (Event[V], error) {
	// An ended watch delivers nothing more, even with events waiting in the channel.
	select {
	case <-w.stopped:
		return Event[V]{}, io.EOF
	case <-w.ctx.Done():
		return Event[V]{}, w.ctx.Err()
	default:
	}
	select {
	case ev, ok := <-w.events:
		if !ok {
			return Event[V]{}, io.EOF
		}
		return ev, nil
	case <-w.stopped:
		return Event[V]{}, io.EOF
	case <-w.ctx.Done():
		return Event[V]{}, w.ctx.Err()
	}
}

func (w *chanWatch[V]) Stop() { w.once.Do(func() { stopOnce(w.stopped, w.stopFunc) }) }

// funcWatch is the Watch of FuncWatch.
type funcWatch[V any] struct {
	next     func() (Event[V], error)
	stopFunc func()
	once     sync.Once
	stopped  chan struct{} // closed by the first Stop
}

func (w *funcWatch[V]) Next() (Event[V], error) {
	select {
	case <-w.stopped:
		return Event[V]{}, io.EOF
	default:
		return w.next()
	}
}

func (w *funcWatch[V]) Stop() { w.once.Do(func() { stopOnce(w.stopped, w.stopFunc) }) }

// stopOnce closes stopped, then calls stop if it is not nil.
func stopOnce(stopped chan struct{}, stop func()) {
	close(stopped)
	if stop != nil {
		stop()
	}
}
