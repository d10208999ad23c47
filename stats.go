package informer

import (
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/internal/histogram"
)

// Stats are an informer's counters at one moment, as Informer.Stats returns them. Every
// counter counts from the informer's creation.
type Stats struct {
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
	// listed more than once in one list (each list reports its first such key once, as an
	// ErrBadInput, counted in SourceErrors too), and an Added event for a cached key. Each
	// is applied as an update: the last state wins.
	Duplicates uint64
	// ListStarted is when the list in progress (paged or streaming) started, on the
	// informer's clock; zero when no list is in progress. A list that stays in progress
	// with LastError nil is a source that has not answered yet (see ProgressTimeout).
	ListStarted time.Time

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
func (s *counters) ListEnded() { s.ListStarted.Store(0) }

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
