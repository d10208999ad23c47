package fanout

import (
	"cmp"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/eventlog"
	"github.com/informer-go/informer/internal/wakeup"
)

// filterValue is one value of a filter index: the objects under it, the events of its
// filtered stream, and the watches that read them. Its methods are called under the
// hub's lock.
type filterValue[K cmp.Ordered, V any] struct {
	index   int
	value   string
	bucket  *btree.Tree[K, *record[K]]      // the objects indexed under value, by key
	history []filterEvent[K]                // its events after the compacted revision
	dropped int64                           // events dropped from the front of history, ever
	waiters wakeup.List[*filterWatch[K, V]] // watches blocked in Next
	watches map[*filterWatch[K, V]]struct{} // watches open

	endedBatch uint64 // the last batch whose end was labelled here (filterHub.batches)
}

// filterEvent is an event of one value's filtered stream.
type filterEvent[K cmp.Ordered] struct {
	rev    int64
	revStr string
	typ    informer.EventType
	rec    *record[K]
}

// newFilterValue returns the value v of index i, empty.
func newFilterValue[K cmp.Ordered, V any](i int, v string) *filterValue[K, V] {
	return &filterValue[K, V]{index: i, value: v}
}

// Name returns the index and the value fv is.
func (fv *filterValue[K, V]) Name() (index int, value string) { return fv.index, fv.value }

// Set puts the object r under the value.
func (fv *filterValue[K, V]) Set(k K, r *record[K]) {
	if fv.bucket == nil {
		fv.bucket = newRecords[K](16)
	}
	fv.bucket.Set(k, r)
}

// Remove takes the object with key k out of the value, and returns the record it had.
func (fv *filterValue[K, V]) Remove(k K) (*record[K], bool) {
	if fv.bucket == nil {
		return nil, false
	}
	return fv.bucket.Delete(k)
}

// Snapshot returns a copy-on-write clone of the objects under the value, O(1); nil if
// it has none yet.
func (fv *filterValue[K, V]) Snapshot() *btree.Tree[K, *record[K]] {
	if fv.bucket == nil {
		return nil
	}
	return fv.bucket.Clone()
}

// Append adds an event at rev (revStr in decimal) to the value's stream.
func (fv *filterValue[K, V]) Append(rev int64, revStr string, typ informer.EventType, r *record[K]) {
	fv.history = append(fv.history, filterEvent[K]{rev: rev, revStr: revStr, typ: typ, rec: r})
}

// EndBatch labels the value's last event seq, the end of the batch numbered batch,
// unless a later event of the batch did (then it reports false).
func (fv *filterValue[K, V]) EndBatch(batch uint64, seq int64) bool {
	if fv.endedBatch == batch {
		return false
	}
	fv.endedBatch = batch
	if n := len(fv.history); n > 0 {
		fv.history[n-1].rev, fv.history[n-1].revStr = seq, strconv.FormatInt(seq, 10)
	}
	return true
}

// DropOldest drops the oldest event of the stream (compacted).
func (fv *filterValue[K, V]) DropOldest() {
	fv.history[0] = filterEvent[K]{}
	fv.history = fv.history[1:]
	fv.dropped++
	if len(fv.history) == 0 {
		fv.history = nil
	}
}

// EndWatches ends every open watch of the value with err.
func (fv *filterValue[K, V]) EndWatches(err error) {
	for w := range fv.watches {
		w.EndLocked(err)
	}
}

// DropHistory drops the whole stream, the server's history being another one now.
func (fv *filterValue[K, V]) DropHistory() {
	fv.dropped += int64(len(fv.history))
	clear(fv.history)
	fv.history = nil
}

// Empty reports whether the value holds no object, event or watch: it can be forgotten.
func (fv *filterValue[K, V]) Empty() bool {
	return len(fv.watches) == 0 && len(fv.history) == 0 && (fv.bucket == nil || fv.bucket.Len() == 0)
}

// Wake wakes the watches blocked on the value.
func (fv *filterValue[K, V]) Wake() { fv.waiters.WakeAll() }

// Progress wakes the idle watches that asked for bookmarks, each to send one at the
// newest revision.
func (fv *filterValue[K, V]) Progress() {
	fv.waiters.WakeIf(func(w *filterWatch[K, V]) bool {
		if !w.bookmarks {
			return false
		}
		w.progress = true
		return true
	})
}

// Watch opens a watch of the value's stream for filterHub.Watch, which checked from and
// made loop on h's lock: with initial events (the value's objects, then the changes
// after them), from the events after the log revision from, or (from < 0) from the
// newest.
func (fv *filterValue[K, V]) Watch(h *filterHub[K, V], loop eventlog.Loop, f valueFilter, bookmarks, initial bool, from int64) *filterWatch[K, V] {
	w := &filterWatch[K, V]{h: h, loop: loop, bookmarks: bookmarks, fv: fv, filter: f}
	if fv.watches == nil {
		fv.watches = make(map[*filterWatch[K, V]]struct{})
	}
	fv.watches[w] = struct{}{}
	end := fv.dropped + int64(len(fv.history))
	switch {
	case initial:
		if fv.bucket != nil && fv.bucket.Len() > 0 {
			w.initial = fv.bucket.Clone() // O(1); read one object per Next
		}
		w.initialRev, w.endOfInitial, w.next = h.RevString(), true, end
	case from >= 0:
		w.next = fv.dropped + int64(sort.Search(len(fv.history), func(j int) bool { return fv.history[j].rev > from }))
	default:
		w.next = end
	}
	return w
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
		w.EndLocked(fmt.Errorf("fanout: filtered watch of %s: the changes after its initial events have left the server's history while they were sent: %w", w.filter, informer.ErrExpired))
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
		w.EndLocked(fmt.Errorf("fanout: filtered watch of %s: its next event has left the server's history: %w", w.filter, informer.ErrExpired))
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
		return informer.Event[*record[K]]{Type: informer.Bookmark, Revision: w.h.RevString()}, nil, true
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
	return informer.Event[*record[K]]{Type: informer.Bookmark, Revision: w.h.RevString()}
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
	delete(w.fv.watches, w)
	w.h.Forget(w.fv)
	w.loop.StopLocked()
}

// Stop implements informer.Watch; it is idempotent.
func (w *filterWatch[K, V]) Stop() { w.loop.Stop(w, errFilterWatchStopped) }
