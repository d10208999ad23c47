package eventlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/wakeup"
)

// ErrWatchStopped is returned by Next once Stop has been called on the watch.
var ErrWatchStopped = errors.New("watch stopped")

// Stream is a stream of events read under a lock, which a Loop makes a blocking watch of.
// Its methods are called with the lock held.
type Stream[V any] interface {
	// NextLocked returns the next event, or the error that ended the stream, if there is
	// one (ok), without blocking. A stream whose context is done or whose timeout passed
	// is ended (EndLocked) before it is called.
	NextLocked() (ev informer.Event[V], err error, ok bool)
	// WaitLocked has the stream woken (its Loop's Wake signalled) once NextLocked may
	// have something; it is not called for a stream that ended.
	WaitLocked()
	// IdleLocked returns the bookmark of an idle stream, at the newest revision.
	IdleLocked() informer.Event[V]
	// EndLocked ends the stream with err; the first end wins.
	EndLocked(err error)
}

// Loop is the blocking part of a watch that needs no goroutine: Next waits on the
// watch's wake-up, its context, its timeout and its bookmark timer. The zero Loop is not
// usable; make one with NewLoop.
type Loop struct {
	mu        sync.Locker // the lock the stream is read under
	ctx       context.Context
	done      <-chan struct{}
	wake      wakeup.Waiter
	timeout   clock.Timer      // nil without a timeout
	timeoutC  <-chan time.Time // nil without a timeout
	bookmark  clock.Timer      // nil without periodic bookmarks
	bookmarkC <-chan time.Time // nil without periodic bookmarks
	every     time.Duration
	ended     bool // under mu: Stop was called
}

// NewLoop returns the loop of a watch read under mu, ended by ctx and, if positive, after
// timeout (io.EOF), with a bookmark timer of the given period if positive.
func NewLoop(mu sync.Locker, ctx context.Context, clk clock.Clock, timeout, bookmarks time.Duration) Loop {
	l := Loop{mu: mu, ctx: ctx, done: ctx.Done(), wake: wakeup.NewWaiter(), every: bookmarks}
	if timeout > 0 {
		l.timeout = clk.NewTimer(timeout)
		l.timeoutC = l.timeout.C()
	}
	if bookmarks > 0 {
		l.bookmark = clk.NewTimer(bookmarks)
		l.bookmarkC = l.bookmark.C()
	}
	return l
}

// Waiter returns the loop's wake-up, for a wakeup.List.
func (l *Loop) Waiter() *wakeup.Waiter { return &l.wake }

// nextLocked ends s if its context is done (ctx.Err()) or its timeout passed (io.EOF),
// then returns s.NextLocked().
func nextLocked[V any](l *Loop, s Stream[V]) (informer.Event[V], error, bool) {
	if !l.ended {
		if err := l.endedNow(); err != nil {
			s.EndLocked(err)
		}
	}
	return s.NextLocked()
}

// endedNow returns the error that ends a stream now, without blocking: ctx.Err() once
// ctx is done, io.EOF once the timeout passed, else nil.
func (l *Loop) endedNow() error {
	select {
	case <-l.done:
		return l.ctx.Err()
	default:
	}
	select {
	case <-l.timeoutC:
		return io.EOF
	default:
	}
	return nil
}

// StopLocked releases the loop's timers and wakes a Next blocked on it; a stream's
// EndLocked calls it.
func (l *Loop) StopLocked() {
	l.ended = true
	if l.timeout != nil {
		l.timeout.Stop()
	}
	if l.bookmark != nil {
		l.bookmark.Stop()
	}
	l.wake.Signal()
}

// Stop ends s with err under the loop's lock (s's EndLocked): a Watch's Stop.
func (l *Loop) Stop(s interface{ EndLocked(error) }, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.EndLocked(err)
}

// Next returns the next event of s, blocking until there is one or the stream ends. It
// is called by one goroutine at a time.
func Next[V any](l *Loop, s Stream[V]) (informer.Event[V], error) {
	for {
		l.mu.Lock()
		ev, err, ok := nextLocked(l, s)
		if !ok {
			s.WaitLocked()
		}
		l.mu.Unlock()
		if ok {
			return ev, err
		}
		select {
		case <-l.wake.C():
		case <-l.done:
		case <-l.timeoutC:
			l.mu.Lock()
			s.EndLocked(io.EOF)
			l.mu.Unlock()
		case <-l.bookmarkC:
			l.mu.Lock()
			ev, err, ok := nextLocked(l, s)
			if !ok { // idle: every event up to the newest revision is delivered
				ev, err = s.IdleLocked(), nil
			}
			if !l.ended {
				l.bookmark.Reset(l.every)
			}
			l.mu.Unlock()
			return ev, err
		}
	}
}

// Watch streams the changes with a revision after opts.Revision, in revision order, read
// from the shared log. opts.Revision "" means the current revision. With
// opts.SendInitialEvents (and Options.StreamingList) the stream starts with the current
// state as Added events at the current revision, sorted by key, then a Bookmark at that
// revision with EndOfInitialEvents set, then the changes after it; the state is copied
// into the watch, O(n). It fails with an error matching informer.ErrExpired for a
// Revision older than the compacted revision or newer than the current one, with
// informer.ErrNotSupported for SendInitialEvents without Options.StreamingList, and with
// a plain error for a malformed Revision.
//
// The stream ends, and Next returns the same error from then on, when Stop is called
// (ErrWatchStopped), ctx is done (ctx.Err()), opts.Timeout passed (io.EOF), DropWatches
// is called (its error), or its next event was compacted away or the first change after
// its initial events left the history while some were still to deliver (an error
// matching informer.ErrExpired).
func (l *Log[K, V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	if opts.SendInitialEvents && !l.opts.StreamingList {
		return nil, fmt.Errorf("%s: SendInitialEvents needs Options.StreamingList: %w", l.opts.Name, informer.ErrNotSupported)
	}
	from := int64(-1)
	if opts.Revision != "" {
		var err error
		if from, err = l.ParseRevision(opts.Revision); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case from > l.rev:
		return nil, l.TooLarge(from, l.rev)
	case from >= 0 && from < l.compacted && !opts.SendInitialEvents:
		return nil, l.CompactedError(from, l.compacted)
	}
	var bookmarks time.Duration
	if opts.AllowBookmarks {
		bookmarks = l.opts.BookmarkInterval
	}
	w := &watch[K, V]{
		l:              l,
		loop:           NewLoop(&l.mu, ctx, l.clock, opts.Timeout, bookmarks),
		pos:            l.rev,
		allowBookmarks: opts.AllowBookmarks,
	}
	if opts.SendInitialEvents {
		w.initial = make([]V, 0, l.tree.Len())
		l.tree.Ascend(func(_ K, obj V) bool {
			w.initial = append(w.initial, obj)
			return true
		})
		w.initialRev = l.revStr
		w.endOfInitial = true
	} else if from >= 0 {
		w.pos = from
	}
	l.watches[w] = struct{}{}
	close(l.watchAdded)
	l.watchAdded = make(chan struct{})
	return w, nil
}

// watch is one open stream of the log. Next is called by one goroutine at a time; Stop
// and the log's injectors may run concurrently with it.
type watch[K cmp.Ordered, V any] struct {
	l    *Log[K, V]
	loop Loop

	allowBookmarks bool
	initialMore    bool // the event Next returned last is an initial one with more to come (Next's goroutine only)

	// Guarded by l.mu.
	pos          int64      // the revision of the last log event delivered (or skipped)
	initial      []V        // initial events of a streaming list, not yet delivered
	initialRev   string     // their revision
	endOfInitial bool       // the EndOfInitialEvents bookmark is still to be sent
	extra        []extra[V] // injected events and bookmarks, in the order they were made
	extraHead    int
	err          error // non-nil once the stream has ended: what Next returns from then on
}

// extra is an event that is not in the log, to be delivered once the watch has delivered
// every log event up to after.
type extra[V any] struct {
	after int64
	ev    informer.Event[V]
}

// Next implements informer.Watch; its contract is on Log.Watch.
func (w *watch[K, V]) Next() (informer.Event[V], error) { return Next[V](&w.loop, w) }

// NextLocked implements Stream.
func (w *watch[K, V]) NextLocked() (ev informer.Event[V], err error, ok bool) {
	l := w.l
	if w.err != nil {
		return ev, w.err, true
	}
	w.initialMore = false
	if len(w.initial) > 0 && w.pos < l.compacted {
		// The changes after the initial state have left the history: the watch could not
		// resume after them, and would pin the state it started from meanwhile.
		w.EndLocked(fmt.Errorf("%s: watch's initial events outlived the history: %w", l.opts.Name, l.CompactedError(w.pos+1, l.compacted)))
		return ev, w.err, true
	}
	if len(w.initial) > 0 {
		ev = informer.Event[V]{Type: informer.Added, Object: w.initial[0], Revision: w.initialRev}
		var zero V
		w.initial[0] = zero
		w.initial = w.initial[1:]
		w.initialMore = len(w.initial) > 0
		return ev, nil, true
	}
	if w.endOfInitial {
		w.endOfInitial, w.initial = false, nil
		return informer.Event[V]{Type: informer.Bookmark, Revision: w.initialRev, EndOfInitialEvents: true}, nil, true
	}
	if w.extraHead < len(w.extra) && w.extra[w.extraHead].after <= w.pos {
		ev = w.extra[w.extraHead].ev
		w.extra[w.extraHead] = extra[V]{}
		w.extraHead++
		if w.extraHead == len(w.extra) {
			w.extra, w.extraHead = w.extra[:0], 0
		}
		return ev, nil, true
	}
	if w.pos < l.rev {
		if w.pos < l.compacted {
			w.EndLocked(fmt.Errorf("%s: watch fell behind: %w", l.opts.Name, l.CompactedError(w.pos+1, l.compacted)))
			return ev, w.err, true
		}
		w.pos++
		return l.log.at(w.pos), nil, true
	}
	return ev, nil, false
}

// WaitLocked implements Stream.
func (w *watch[K, V]) WaitLocked() { w.l.waiters.Add(w) }

// IdleLocked implements Stream: nothing is pending, so every change up to the current
// revision has been sent.
func (w *watch[K, V]) IdleLocked() informer.Event[V] {
	return informer.Event[V]{Type: informer.Bookmark, Revision: w.l.revStr}
}

// MoreAtRevision implements informer.BatchedWatch: the initial events of a streaming list
// share the state's revision, and each but the last is followed by more of it.
func (w *watch[K, V]) MoreAtRevision() bool { return w.initialMore }

// EndLocked implements Stream: it ends the stream with err (the first end wins), releases
// its timers and pending events, and removes it from the open watches.
func (w *watch[K, V]) EndLocked(err error) {
	if w.err != nil {
		return
	}
	w.err = err
	w.initial, w.endOfInitial, w.extra, w.extraHead = nil, false, nil, 0
	delete(w.l.watches, w)
	w.l.waiters.Remove(w)
	w.loop.StopLocked()
}

// Waiter implements wakeup.Watch.
func (w *watch[K, V]) Waiter() *wakeup.Waiter { return w.loop.Waiter() }

// Stop implements informer.Watch: it ends the stream with ErrWatchStopped (unless it had
// already ended). Safe to call more than once, from any goroutine.
func (w *watch[K, V]) Stop() { w.loop.Stop(w, ErrWatchStopped) }
