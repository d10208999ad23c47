package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/eventlog"
	"github.com/informer-go/informer/internal/wakeup"
)

// Watch opens a watch of f's value. It behaves as the log's watches do (see
// eventlog.Log.Watch), with their blocking loop (eventlog.Loop), on the value's filtered stream: from opts.Revision (an error
// matching informer.ErrExpired if its events are compacted, or if it is newer than the
// newest), or with SendInitialEvents the value's bucket as ADDED events, then the
// EndOfInitialEvents bookmark, then the changes; bookmarks at the newest revision when
// idle (with AllowBookmarks); io.EOF at opts.Timeout; ctx.Err() when ctx is done.
func (h *filterHub[K, V]) Watch(ctx context.Context, f valueFilter, opts informer.WatchOptions) (informer.Watch[*record[K]], error) {
	i, ok := slices.BinarySearch(h.indexNames, f.Index)
	if !ok {
		return nil, fmt.Errorf("fanout: unknown filter index %q", f.Index)
	}
	from := int64(-1)
	if opts.Revision != "" {
		n, err := strconv.ParseInt(opts.Revision, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("fanout: filtered watch: revision %q is not a log revision", opts.Revision)
		}
		from = n
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case from > h.rev:
		return nil, fmt.Errorf("fanout: filtered watch of %s=%q: the revision is newer than the server's newest: %w", f.Index, f.Value, informer.ErrExpired)
	case from >= 0 && from < h.compacted && !opts.SendInitialEvents:
		return nil, fmt.Errorf("fanout: filtered watch of %s=%q: the revision has left the server's history: %w", f.Index, f.Value, informer.ErrExpired)
	}
	fv := h.value(i, f.Value)
	fv.watches++
	var bookmarks time.Duration
	if opts.AllowBookmarks {
		bookmarks = h.bookmarks
	}
	w := &filterWatch[K, V]{
		h:         h,
		loop:      eventlog.NewLoop(&h.mu, ctx, h.clock, opts.Timeout, bookmarks),
		bookmarks: bookmarks > 0,
		fv:        fv,
		filter:    f,
	}
	end := fv.dropped + int64(len(fv.history))
	switch {
	case opts.SendInitialEvents:
		if fv.bucket != nil && fv.bucket.Len() > 0 {
			w.initial = fv.bucket.Clone() // O(1); read one object per Next
		}
		w.initialRev, w.endOfInitial, w.next = h.revString(), true, end
	case from >= 0:
		w.next = fv.dropped + int64(sort.Search(len(fv.history), func(j int) bool { return fv.history[j].rev > from }))
	default:
		w.next = end
	}
	return w, nil
}

// errFilterWatchStopped ends a filtered watch that was stopped.
var errFilterWatchStopped = errors.New("fanout: filtered watch stopped")

// filterWatch is one watch of a filter value's stream, an eventlog.Stream read under the
// hub's lock. Next is called by one goroutine; Stop may be called from any.
type filterWatch[K cmp.Ordered, V any] struct {
	h         *filterHub[K, V]
	loop      eventlog.Loop // its wake-up is on fv.waiters while blocked in Next
	bookmarks bool          // the watch asked for bookmarks
	filter    valueFilter

	more        bool // events were pending after the last one Next returned (Next's goroutine only)
	initialMore bool // the event Next returned last is an initial one with more to come (Next's goroutine only)

	// Guarded by the hub's mu.
	fv           *filterValue[K, V]
	next         int64                      // the number of the next history event to deliver (counting dropped ones)
	initial      *btree.Tree[K, *record[K]] // the initial events still to send: a clone of the bucket; nil when done
	initialAfter K                          // the key of the last initial event sent
	initialSent  bool                       // initialAfter is set
	initialRev   string
	endOfInitial bool
	progress     bool // send a bookmark at the newest revision once idle (broadcastProgress)
	err          error
}

func (w *filterWatch[K, V]) caughtUp() bool { return !w.more }

// MoreAtRevision implements informer.BatchedWatch: the initial events share the state's
// revision, and each but the last is followed by more of it.
func (w *filterWatch[K, V]) MoreAtRevision() bool { return w.initialMore }

// Next implements informer.Watch.
func (w *filterWatch[K, V]) Next() (informer.Event[*record[K]], error) {
	return eventlog.Next[*record[K]](&w.loop, w)
}

// NextLocked implements eventlog.Stream: the next event or error if there is one (ok),
// without blocking.
func (w *filterWatch[K, V]) NextLocked() (ev informer.Event[*record[K]], err error, ok bool) {
	if w.err != nil {
		return ev, w.err, true
	}
	w.initialMore = false
	if w.initial != nil && w.next < w.fv.dropped {
		w.EndLocked(fmt.Errorf("fanout: filtered watch of %s=%q: the changes after its initial events have left the server's history while they were sent: %w", w.filter.Index, w.filter.Value, informer.ErrExpired))
		return ev, w.err, true
	}
	if w.initial != nil {
		if r := w.nextInitial(); r != nil {
			return informer.Event[*record[K]]{Type: informer.Added, Object: r, Revision: w.initialRev}, nil, true
		}
		w.initial = nil
	}
	if w.endOfInitial {
		w.endOfInitial, w.initial = false, nil
		return informer.Event[*record[K]]{Type: informer.Bookmark, Revision: w.initialRev, EndOfInitialEvents: true}, nil, true
	}
	fv := w.fv
	i := w.next - fv.dropped
	if i < 0 {
		w.EndLocked(fmt.Errorf("fanout: filtered watch of %s=%q: its next event has left the server's history: %w", w.filter.Index, w.filter.Value, informer.ErrExpired))
		return ev, w.err, true
	}
	if i < int64(len(fv.history)) {
		e := fv.history[i]
		w.next++
		w.more = i+1 < int64(len(fv.history))
		return informer.Event[*record[K]]{Type: e.typ, Object: e.rec, Revision: e.revStr}, nil, true
	}
	if w.progress {
		w.progress = false
		return informer.Event[*record[K]]{Type: informer.Bookmark, Revision: w.h.revString()}, nil, true
	}
	return ev, nil, false
}

// nextInitial returns the next object of the initial events, in key order, or nil after
// the last, and sets initialMore when another follows it; O(log n).
func (w *filterWatch[K, V]) nextInitial() *record[K] {
	var next *record[K]
	visit := func(_ K, r *record[K]) bool {
		if next != nil {
			w.initialMore = true
			return false
		}
		next = r
		return true
	}
	if w.initialSent {
		w.initial.AscendAfter(w.initialAfter, visit)
	} else {
		w.initial.Ascend(visit)
	}
	if next != nil {
		w.initialAfter, w.initialSent = next.Key(), true
	}
	return next
}

// WaitLocked implements eventlog.Stream: the value's changes wake the watch.
func (w *filterWatch[K, V]) WaitLocked() { w.fv.waiters.Add(w) }

// IdleLocked implements eventlog.Stream: every event up to the newest revision is
// delivered.
func (w *filterWatch[K, V]) IdleLocked() informer.Event[*record[K]] {
	w.more = false
	return informer.Event[*record[K]]{Type: informer.Bookmark, Revision: w.h.revString()}
}

// Waiter implements wakeup.Watch.
func (w *filterWatch[K, V]) Waiter() *wakeup.Waiter { return w.loop.Waiter() }

// EndLocked implements eventlog.Stream: it ends the stream with err (the first end wins)
// and releases the watch.
func (w *filterWatch[K, V]) EndLocked(err error) {
	if w.err != nil {
		return
	}
	w.err = err
	w.initial, w.endOfInitial = nil, false
	w.fv.waiters.Remove(w)
	w.fv.watches--
	w.h.gc(w.fv)
	w.loop.StopLocked()
}

// Stop implements informer.Watch; it is idempotent.
func (w *filterWatch[K, V]) Stop() { w.loop.Stop(w, errFilterWatchStopped) }
