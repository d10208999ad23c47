package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/wakeup"
)

// ErrWatchStopped is returned by Next once Stop has been called on the watch.
var ErrWatchStopped = errors.New("memory: watch stopped")

// Watch implements informer.ListerWatcher: it streams the changes with a revision after
// opts.Revision, in revision order, read from the shared log (nothing is copied per
// watch). opts.Revision "" means the current revision, so only later changes are sent.
//
// With opts.SendInitialEvents (and Options.StreamingList set) the stream starts with the
// current state as Added events at the current revision, sorted by key, then a Bookmark at
// that revision with EndOfInitialEvents set (whether or not opts.AllowBookmarks is), then
// the changes after it; opts.Revision then only means "at least this fresh". The state is
// copied into the watch when it opens, O(n).
//
// Watch itself fails with ctx.Err() if ctx is done (before or during the delay set with
// SetDelay); with an error injected by FailNext; with an error matching
// informer.ErrNotSupported for SendInitialEvents without Options.StreamingList; with an
// error matching informer.ErrExpired for a Revision older than the compacted revision or
// newer than the current one ("too large"); with a plain error for a malformed Revision.
//
// The returned watch needs no goroutine of its own: Next waits on the watch's channels,
// costs one lock and no allocation when an event is ready, and delivers, in order, the
// initial events, then the log, with events sent by Inject and Bookmark placed where they
// were made, and (with opts.AllowBookmarks and Options.BookmarkInterval > 0) a Bookmark at
// the current revision whenever the bookmark timer fires while the watch is idle; that
// timer restarts each time it fires. The stream ends, and Next returns the same error
// from then on, abandoning any undelivered events, when:
//   - Stop is called (also from another goroutine, unblocking Next): ErrWatchStopped;
//   - ctx is done: ctx.Err();
//   - opts.Timeout (if > 0) has passed on the Options clock: io.EOF;
//   - DropWatches is called: its error, io.EOF for nil;
//   - the next event to deliver was compacted away, or the first change after the
//     initial events was while some of them were still to deliver (a slow reader would
//     otherwise pin the old state): an error matching informer.ErrExpired.
//
// The consumer then watches again from the last revision it received. Stop is idempotent
// and releases the watch's timers; a stream that ended keeps its first error.
func (s *Source[K, V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	if err := s.enter(ctx, Request{Op: OpWatch, Watch: opts}); err != nil {
		return nil, err
	}
	if opts.SendInitialEvents && !s.opts.StreamingList {
		return nil, fmt.Errorf("memory: SendInitialEvents needs Options.StreamingList: %w", informer.ErrNotSupported)
	}
	from := int64(-1)
	if opts.Revision != "" {
		var err error
		if from, err = parseRevision(opts.Revision); err != nil {
			return nil, err
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case from > s.rev:
		return nil, tooLarge(from, s.rev)
	case from >= 0 && from < s.compacted && !opts.SendInitialEvents:
		return nil, compactedError(from, s.compacted)
	}
	w := &watch[K, V]{
		s:              s,
		ctx:            ctx,
		done:           ctx.Done(),
		wake:           wakeup.NewWaiter(),
		pos:            s.rev,
		allowBookmarks: opts.AllowBookmarks,
	}
	if opts.SendInitialEvents {
		w.initial = make([]V, 0, s.tree.Len())
		s.tree.Ascend(func(_ K, obj V) bool {
			w.initial = append(w.initial, obj)
			return true
		})
		w.initialRev = s.revStr
		w.endOfInitial = true
	} else if from >= 0 {
		w.pos = from
	}
	if opts.Timeout > 0 {
		w.timeout = s.clock.NewTimer(opts.Timeout)
		w.timeoutC = w.timeout.C()
	}
	if s.opts.BookmarkInterval > 0 && opts.AllowBookmarks {
		w.bookmark = s.clock.NewTimer(s.opts.BookmarkInterval)
		w.bookmarkC = w.bookmark.C()
	}
	s.watches[w] = struct{}{}
	close(s.watchAdded)
	s.watchAdded = make(chan struct{})
	return w, nil
}

// watch is one open stream. Next is called by one goroutine at a time; Stop and the
// Source's fault injectors may run concurrently with it.
type watch[K cmp.Ordered, V any] struct {
	s         *Source[K, V]
	ctx       context.Context
	done      <-chan struct{}  // ctx.Done()
	wake      wakeup.Waiter    // on s.waiters while blocked in Next
	timeout   clock.Timer      // nil without a timeout
	timeoutC  <-chan time.Time // nil without a timeout
	bookmark  clock.Timer      // nil without periodic bookmarks
	bookmarkC <-chan time.Time // nil without periodic bookmarks

	allowBookmarks bool
	initialMore    bool // the event Next returned last is an initial one with more to come (Next's goroutine only)

	// Guarded by s.mu.
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

// Next implements informer.Watch; its contract is on Source.Watch. The ended conditions
// are checked before each event, so an ended stream delivers nothing more.
func (w *watch[K, V]) Next() (informer.Event[V], error) {
	s := w.s
	for {
		s.mu.Lock()
		ev, err, ok := w.nextLocked()
		if !ok {
			s.waiters.Add(w)
		}
		s.mu.Unlock()
		if ok {
			return ev, err
		}
		select {
		case <-w.wake.C():
		case <-w.done:
		case <-w.timeoutC:
			s.mu.Lock()
			w.endLocked(io.EOF)
			s.mu.Unlock()
		case <-w.bookmarkC:
			s.mu.Lock()
			ev, err, ok := w.nextLocked()
			if !ok {
				// Idle: nothing pending, so every change up to s.rev has been sent.
				ev, err = informer.Event[V]{Type: informer.Bookmark, Revision: s.revStr}, nil
			}
			if w.err == nil {
				w.bookmark.Reset(s.opts.BookmarkInterval)
			}
			s.mu.Unlock()
			return ev, err
		}
	}
}

// nextLocked returns the next event or error if there is one (ok), without blocking.
func (w *watch[K, V]) nextLocked() (ev informer.Event[V], err error, ok bool) {
	s := w.s
	if w.err != nil {
		return ev, w.err, true
	}
	select {
	case <-w.done:
		w.endLocked(w.ctx.Err())
		return ev, w.err, true
	default:
	}
	select {
	case <-w.timeoutC:
		w.endLocked(io.EOF)
		return ev, w.err, true
	default:
	}
	w.initialMore = false
	if len(w.initial) > 0 && w.pos < s.compacted {
		// The changes after the initial state have left the history: the watch could not
		// resume after them, and would pin the state it started from meanwhile.
		w.endLocked(fmt.Errorf("memory: watch's initial events outlived the history: %w", compactedError(w.pos+1, s.compacted)))
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
	if w.pos < s.rev {
		if w.pos < s.compacted {
			w.endLocked(fmt.Errorf("memory: watch fell behind: %w", compactedError(w.pos+1, s.compacted)))
			return ev, w.err, true
		}
		w.pos++
		ev = s.log.at(w.pos)
		return ev, nil, true
	}
	return ev, nil, false
}

// MoreAtRevision implements informer.BatchedWatch: the initial events of a streaming list
// share the state's revision, and each but the last is followed by more of it.
func (w *watch[K, V]) MoreAtRevision() bool { return w.initialMore }

// endLocked ends the stream with err (the first end wins), releases its timers and pending
// events, removes it from the open watches and wakes a Next blocked on it.
func (w *watch[K, V]) endLocked(err error) {
	if w.err != nil {
		return
	}
	s := w.s
	w.err = err
	w.initial, w.endOfInitial, w.extra, w.extraHead = nil, false, nil, 0
	if w.timeout != nil {
		w.timeout.Stop()
	}
	if w.bookmark != nil {
		w.bookmark.Stop()
	}
	delete(s.watches, w)
	s.waiters.Remove(w)
	w.wake.Signal()
}

// Waiter implements wakeup.Watch.
func (w *watch[K, V]) Waiter() *wakeup.Waiter { return &w.wake }

// Stop implements informer.Watch: it ends the stream with ErrWatchStopped (unless it had
// already ended) and releases its timers. Safe to call more than once, from any goroutine.
func (w *watch[K, V]) Stop() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.endLocked(ErrWatchStopped)
}

// wakeLocked wakes every watch blocked in Next.
func (s *Source[K, V]) wakeLocked() { s.waiters.WakeAll() }
