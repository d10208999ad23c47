package informer

import (
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/internal/histogram"
)

// Stats are an informer's state and counters at one moment, as Informer.Stats returns
// them. Every counter counts from the informer's creation. It is a copy: changing it
// changes nothing in the informer.
type Stats struct {
	// Started reports whether Run has been called. An informer nobody runs never syncs:
	// WaitForCacheSync and the controller package say so after a second.
	Started bool
	// Synced reports whether the initial list is in the cache (Informer.Synced is closed).
	// Handlers may still be delivering it: see each Handlers entry's Synced.
	//
	// After a warm restart (Options.Persist) the restored state counts as the initial
	// list: Synced is true as soon as it is in the cache, before the resumed watch has
	// caught up with the source. Like a list served from a source's cache, it is a whole,
	// consistent state, just older. A caller that needs the changes made while it was down
	// uses WaitForRevision with a revision it read from the source.
	Synced bool
	// Restored reports whether the cache holds a state loaded by Options.Persist that no
	// list has replaced: the watch resumed from the saved revision and is bringing it up to
	// date. It turns false once a list (after an expired revision, say) replaces the state.
	Restored bool
	// Unconfirmed reports whether the cache holds a restored state that its source has not
	// confirmed yet (Options.ServeUnconfirmed): the source did not answer at the start.
	// A program that serves the cache says so to its readers (a readiness answer, a
	// header). It turns false once the source has confirmed the state or a list has
	// replaced it.
	Unconfirmed bool
	// ReceivedRevision is the revision of the last list or watch event the informer
	// received ("" before the first). The cache may not have applied it yet: the revision
	// the cache reflects is Snapshot().Revision(); to wait for one, WaitForRevision.
	ReceivedRevision string
	// LastError is the last error of the source (a failed list or watch, bad input), nil
	// once the source has recovered (a list applied, or a watch that delivered an event).
	// WaitForCacheSync's error includes it, to say why a cache did not sync.
	LastError error
	// LastErrorAt is when LastError was reported, on the informer's clock; zero when
	// LastError is nil.
	LastErrorAt time.Time
	// Handlers are the handlers registered now, in the order they were added, each with
	// its own Stats and Synced. Reading it never waits, not even for a stalled handler.
	Handlers []*Registration

	// Lists counts list attempts, streaming lists and failed attempts included.
	Lists uint64
	// ListErrors counts list attempts that failed.
	ListErrors uint64
	// Watches counts watches opened (not those that failed to open).
	Watches uint64
	// WatchErrors counts watches that failed to open or ended with an error.
	WatchErrors uint64
	// Relists counts lists applied to the cache, the first included.
	Relists uint64
	// ConsistentLists counts consistent (quorum) lists asked of the source: a relist asks
	// for one only when the source cannot serve the last revision seen, so a rising count
	// is a storm coming.
	ConsistentLists uint64
	// Expirations counts the times the source said a revision had expired.
	Expirations uint64
	// Added, Modified and Deleted count the watch events received, by type; Bookmarks the
	// bookmarks.
	Added, Modified, Deleted, Bookmarks uint64
	// Objects is the number of objects in the cache.
	Objects int64
	// KeyErrors counts objects skipped because the key function failed.
	KeyErrors uint64
	// IndexErrors counts objects skipped because an index function failed.
	IndexErrors uint64
	// TransformErrors counts objects skipped because Options.Transform failed.
	TransformErrors uint64
	// DecodeErrors counts objects the source could not decode (ErrDecode).
	DecodeErrors uint64
	// SourceErrors counts other bad input from the source (ErrBadInput).
	SourceErrors uint64
	// HandlerPanics counts handler calls that panicked.
	HandlerPanics uint64
	// OtherErrors counts every other reported error.
	OtherErrors uint64
	// Applied counts the changes (deltas) applied to the cache, resyncs included.
	Applied uint64
	// Duplicates counts objects the source sent for a key the informer already had: a key
	// listed more than once in one list (two lists are two, even at one revision and
	// applied in one batch; each list reports its first such key once, as an
	// ErrBadInput, counted in SourceErrors too), and an Added event for a cached key. Each
	// is applied as an update: the last state wins.
	Duplicates uint64
	// ListStarted is when the list in progress (paged or streaming) started, on the
	// informer's clock; zero when no list is in progress. A list that stays in progress
	// with LastError nil is a source that has not answered yet (see ProgressTimeout).
	ListStarted time.Time
	// ListObjects is the number of objects the list in progress has received so far: the
	// items of the pages read, or a streaming list's initial events. It is 0 when no list
	// is in progress, and starts again from 0 when a list is retried.
	ListObjects int64

	// ListDuration is the distribution of list attempts' durations in seconds, failed ones
	// and streaming lists included.
	ListDuration Histogram
	// ListItems is the distribution of the objects per successful list.
	ListItems Histogram
	// WatchDuration is the distribution of how long watches stayed open in seconds, from
	// the request to the end.
	WatchDuration Histogram
}

// counters are the live counters behind Stats, updated atomically by the informer's
// goroutines.
type counters struct {
	Lists, ListErrors    atomic.Uint64
	Watches, WatchErrors atomic.Uint64
	Relists              atomic.Uint64
	ConsistentLists      atomic.Uint64
	Expirations          atomic.Uint64
	Added, Modified      atomic.Uint64
	Deleted, Bookmarks   atomic.Uint64
	Objects              atomic.Int64
	KeyErrors            atomic.Uint64
	IndexErrors          atomic.Uint64
	TransformErrors      atomic.Uint64
	DecodeErrors         atomic.Uint64
	SourceErrors         atomic.Uint64
	HandlerPanics        atomic.Uint64
	OtherErrors          atomic.Uint64
	Applied              atomic.Uint64
	Duplicates           atomic.Uint64
	ListStarted          atomic.Int64 // UnixNano on the informer's clock; 0: no list in progress
	ListObjects          atomic.Int64 // objects the list in progress has received

	ListDuration  *histogram.Histogram
	ListItems     *histogram.Histogram
	WatchDuration *histogram.Histogram
}

func (s *counters) Snapshot() Stats {
	return Stats{
		Lists: s.Lists.Load(), ListErrors: s.ListErrors.Load(),
		Watches: s.Watches.Load(), WatchErrors: s.WatchErrors.Load(),
		Relists: s.Relists.Load(), ConsistentLists: s.ConsistentLists.Load(), Expirations: s.Expirations.Load(),
		Added: s.Added.Load(), Modified: s.Modified.Load(), Deleted: s.Deleted.Load(), Bookmarks: s.Bookmarks.Load(),
		Objects:   s.Objects.Load(),
		KeyErrors: s.KeyErrors.Load(), IndexErrors: s.IndexErrors.Load(), TransformErrors: s.TransformErrors.Load(),
		DecodeErrors: s.DecodeErrors.Load(), SourceErrors: s.SourceErrors.Load(),
		HandlerPanics: s.HandlerPanics.Load(), OtherErrors: s.OtherErrors.Load(),
		Applied:       s.Applied.Load(),
		Duplicates:    s.Duplicates.Load(),
		ListStarted:   unixNano(s.ListStarted.Load()),
		ListObjects:   s.ListObjects.Load(),
		ListDuration:  Histogram(s.ListDuration.Snapshot()),
		ListItems:     Histogram(s.ListItems.Snapshot()),
		WatchDuration: Histogram(s.WatchDuration.Snapshot()),
	}
}

// unixNano is the time of ns, or the zero time for 0.
func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Event counts a watch event of type t.
func (s *counters) Event(t EventType) {
	switch t {
	case Added:
		s.Added.Add(1)
	case Modified:
		s.Modified.Add(1)
	case Deleted:
		s.Deleted.Add(1)
	}
}

// countError counts a reported error of the given kind (see errorKind).
func (s *counters) CountError(kind string) {
	switch kind {
	case "key":
		s.KeyErrors.Add(1)
	case "transform":
		s.TransformErrors.Add(1)
	case "index":
		s.IndexErrors.Add(1)
	case "handler_panic":
		s.HandlerPanics.Add(1)
	case "decode":
		s.DecodeErrors.Add(1)
	case "source":
		s.SourceErrors.Add(1)
	default:
		s.OtherErrors.Add(1)
	}
}

func newCounters() *counters {
	return &counters{
		ListDuration:  histogram.New(histogram.DurationBuckets...),
		ListItems:     histogram.New(histogram.ItemBuckets...),
		WatchDuration: histogram.New(histogram.WatchDurationBuckets...),
	}
}

// The reflector, the sink and the writer count through these methods.

// ListBegan records that a list started at t; ListEnded that it is no longer in progress.
func (s *counters) ListBegan(t time.Time) { s.ListStarted.Store(t.UnixNano()) }

// ListEnded records that no list is in progress.
func (s *counters) ListEnded() {
	s.ListStarted.Store(0)
	s.ListObjects.Store(0)
}

// ListReceived records that the list in progress has received n objects so far.
func (s *counters) ListReceived(n int) { s.ListObjects.Store(int64(n)) }

// Listed counts a list attempt.
func (s *counters) Listed() { s.Lists.Add(1) }

// ListTook records how long a list attempt took.
func (s *counters) ListTook(d time.Duration) { s.ListDuration.ObserveDuration(d) }

// ListFailed counts a failed list attempt.
func (s *counters) ListFailed() { s.ListErrors.Add(1) }

// ListHeld records the objects of a successful list.
func (s *counters) ListHeld(n int) { s.ListItems.Observe(float64(n)) }

// Expired counts a revision the source said had expired.
func (s *counters) Expired() { s.Expirations.Add(1) }

// ConsistentList counts a consistent list asked of the source.
func (s *counters) ConsistentList() { s.ConsistentLists.Add(1) }

// WatchOpened counts a watch opened.
func (s *counters) WatchOpened() { s.Watches.Add(1) }

// WatchFailed counts a watch that failed to open or ended with an error.
func (s *counters) WatchFailed() { s.WatchErrors.Add(1) }

// WatchTook records how long a watch stayed open.
func (s *counters) WatchTook(d time.Duration) { s.WatchDuration.ObserveDuration(d) }

// Bookmark counts a bookmark.
func (s *counters) Bookmark() { s.Bookmarks.Add(1) }

// Relisted counts a list handed to the queue.
func (s *counters) Relisted() { s.Relists.Add(1) }

// Wrote counts applied deltas and records the objects the cache holds.
func (s *counters) Wrote(applied, objects int) {
	s.Applied.Add(uint64(applied))
	s.Objects.Store(int64(objects))
}

// Duplicated counts n objects sent for a key the informer already had.
func (s *counters) Duplicated(n int) { s.Duplicates.Add(uint64(n)) }

// Histogram is a histogram's content at one moment: Stats and HandlerStats carry them, and
// the metrics package exports them as Prometheus histograms. It is a value the informer
// copies out when asked; changing it changes nothing in the informer.
type Histogram struct {
	// Bounds are the buckets' upper bounds, increasing; nil for a histogram not kept.
	Bounds []float64
	// Counts are the observations per bucket, not cumulative: len(Bounds)+1 of them, the
	// last one for the observations above every bound (+Inf).
	Counts []uint64
	// Count is the number of observations in all.
	Count uint64
	// Sum is the sum of all observations.
	Sum float64
}

// Cumulative returns the number of observations ≤ each bound, as Prometheus histograms
// report them (the +Inf bucket is Count). It allocates a map of len(Bounds) entries.
func (h Histogram) Cumulative() map[float64]uint64 { return histogram.Snapshot(h).Cumulative() }
