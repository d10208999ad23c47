// Package memory is an in-memory, revisioned event log that implements
// informer.ListerWatcher: a source for tests, examples and benchmarks that behaves like a
// real one (etcd, a Kubernetes API server) without a network.
//
// A Source holds a collection of objects keyed by K. Every change (Put, Delete) gets the
// next revision, 1, 2, 3, …, and is appended to a log that watches read from. List serves
// the current state sorted by key, in pages pinned to one revision; Watch streams the log
// after a revision. History can be compacted away, by hand (Compact) or automatically
// (Options.HistoryLimit), after which old revisions answer informer.ErrExpired, as etcd's
// do.
//
// The state is a copy-on-write B-tree, whose O(1) Clone pins a paged list's snapshot. The
// log holds ready-made events in fixed-size segments (no copying as it grows; compaction
// frees whole segments), and revision strings are cut from one shared string per 256
// revisions, so a Put costs one O(log n) B-tree insert and about 48 bytes of log, and a
// watch's Next costs one mutex acquisition and no allocation. Watches
// need no goroutine: Next waits on the watch's own wake-up channel, its context and its
// timers. Memory grows with the history kept: compact it, or set Options.HistoryLimit, in
// long-running uses. The log is an internal package the fan-out Server's log shares;
// this package adds fault injection and the request log on top.
//
// Fault injectors (FailNext, DropWatches, SetDelay, Inject, Bookmark) and a request log
// (Requests, OpenWatches, WaitForWatches) let tests drive and check the reconnect logic of
// a consumer deterministically.
package memory

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/eventlog"
)

// Options configures a Source. The zero value is a valid configuration: the wall clock, no
// periodic bookmarks, no streaming lists and unlimited history.
type Options struct {
	// Clock measures watch timeouts, bookmark intervals and the delay set with SetDelay.
	// Nil means clock.Real{}; tests pass a *clock.Fake.
	Clock clock.Clock
	// BookmarkInterval, when positive, gives every watch that allows bookmarks
	// (WatchOptions.AllowBookmarks) a timer that fires at this interval from the start of
	// the watch; when it fires while the watch is idle (everything up to the current
	// revision delivered), Next returns a Bookmark at the current revision. Zero or
	// negative means no periodic bookmarks and no timer.
	BookmarkInterval time.Duration
	// StreamingList makes the Source a streaming lister: StreamingList reports true and
	// Watch honours WatchOptions.SendInitialEvents. When false, such a Watch fails with an
	// error that matches informer.ErrNotSupported.
	StreamingList bool
	// HistoryLimit, when positive, compacts the log after every change so that it holds at
	// most this many events. Zero or negative keeps every event until Compact.
	HistoryLimit int
	// KeepRequests bounds the log of List and Watch calls that Requests returns: when
	// positive, only the newest KeepRequests calls are kept; negative keeps none, for a
	// Source that serves for good, whose log would otherwise grow by one entry per call.
	// Zero keeps every call.
	KeepRequests int
}

// Source is an in-memory, revisioned collection and its change log. It implements
// informer.ListerWatcher[V], informer.RevisionComparer, informer.StreamingLister and
// informer.SourceIdentifier (an identity of its own per Source).
//
// Revisions are decimal int64 strings. Revision 0 is the empty collection before the first
// change; each Put or Delete adds one. A Source is safe for concurrent use. Create one with
// New; the zero value is not usable.
type Source[K cmp.Ordered, V any] struct {
	key   func(V) K
	clock clock.Clock
	opts  Options
	id    string // SourceID
	log   *eventlog.Log[K, V]

	mu       sync.Mutex            // guards what follows; taken inside the log's lock (List)
	pins     map[uint64]*pin[K, V] // snapshots of paged lists, by list id
	lastPin  uint64
	requests []Request
	fails    []failRule
	delay    time.Duration
}

var (
	_ informer.ListerWatcher[int] = (*Source[string, int])(nil)
	_ informer.RevisionComparer   = (*Source[string, int])(nil)
	_ informer.StreamingLister    = (*Source[string, int])(nil)
	_ informer.SourceIdentifier   = (*Source[string, int])(nil)
)

// New returns an empty Source whose objects are keyed by key. The key function must be
// deterministic and cheap: Put calls it once per object, outside the Source's lock.
func New[K cmp.Ordered, V any](key func(V) K, opts Options) *Source[K, V] {
	c := opts.Clock
	if c == nil {
		c = clock.Real{}
	}
	return &Source[K, V]{
		key:   key,
		clock: c,
		opts:  opts,
		id:    fmt.Sprintf("memory/%016x", rand.Uint64()),
		log: eventlog.New[K, V](eventlog.Options{
			Name: "memory", Clock: c, BookmarkInterval: opts.BookmarkInterval,
			StreamingList: opts.StreamingList, HistoryLimit: opts.HistoryLimit,
		}),
		pins: make(map[uint64]*pin[K, V]),
	}
}

// SourceID returns the Source's identity, random and its own: a cache saved from one
// Source is never restored over another (see informer.SourceIdentifier).
func (s *Source[K, V]) SourceID(context.Context) (string, error) { return s.id, nil }

// Put adds obj (an Added event) or replaces the object with the same key (a Modified
// event) and returns the new revision. It costs one B-tree insert, O(log n), and one
// append to the log; open watches are woken, none is waited for.
func (s *Source[K, V]) Put(obj V) int64 { return s.log.Put(s.key(obj), obj) }

// Delete removes the object with key k and logs a Deleted event that carries its last
// state. It returns the new revision and true, or the current revision and false if there
// was no such object (nothing is logged then).
func (s *Source[K, V]) Delete(k K) (int64, bool) { return s.log.Delete(k) }

// Get returns the object with key k and whether there is one. It costs O(log n).
func (s *Source[K, V]) Get(k K) (V, bool) { return s.log.Get(k) }

// Items returns the current objects sorted by key, in a new slice that belongs to the
// caller. The objects themselves are shared with the Source and must not be changed.
func (s *Source[K, V]) Items() []V { return s.log.Items() }

// Len returns the number of objects.
func (s *Source[K, V]) Len() int { return s.log.Len() }

// Revision returns the current revision: 0 before the first change, then the revision of
// the last change.
func (s *Source[K, V]) Revision() int64 { return s.log.Revision() }

// Compact forgets the history at or before rev, as etcd's compaction does. Afterwards a
// Watch from a revision older than rev, a watch whose next event was at or before rev, and
// the continue token of a list pinned at a revision older than rev all fail with an error
// that matches informer.ErrExpired. A rev beyond the current revision compacts up to the
// current revision; a rev at or before an earlier compaction does nothing. It costs
// O(events dropped + pinned lists).
func (s *Source[K, V]) Compact(rev int64) {
	s.log.Compact(rev)
	compacted := s.log.CompactedRevision()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropPinsLocked(compacted)
}

// CompactedRevision returns the revision of the last compaction: history at or before it
// is gone. It is 0 if nothing was compacted.
func (s *Source[K, V]) CompactedRevision() int64 { return s.log.CompactedRevision() }

// CompareRevisions implements informer.RevisionComparer: it returns -1, 0 or +1 as a is
// older than, equal to or newer than b. Revisions are canonical decimal numbers >= 0
// ("0", "1", "42"); anything else is an error.
func (s *Source[K, V]) CompareRevisions(a, b string) (int, error) {
	ra, err := s.log.ParseRevision(a)
	if err != nil {
		return 0, err
	}
	rb, err := s.log.ParseRevision(b)
	if err != nil {
		return 0, err
	}
	return cmp.Compare(ra, rb), nil
}

// StreamingList implements informer.StreamingLister: it reports Options.StreamingList.
func (s *Source[K, V]) StreamingList() bool { return s.opts.StreamingList }
