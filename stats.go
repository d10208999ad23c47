package informer

import (
	"time"

	"github.com/informer-go/informer/internal/histogram"
)

// Stats are an informer's state and counters at one moment, as Informer.Stats returns
// them. Every counter counts from the informer's creation. It is a copy: changing it
// changes nothing in the informer.
type Stats struct {
	// Synced reports whether the initial list is in the cache (Informer.Synced is closed).
	// Handlers may still be delivering it: see each Handlers entry's HasSynced.
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
	// its own Stats and HasSynced. Reading it never waits, not even for a stalled handler.
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
