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
// long-running uses.
//
// Fault injectors (FailNext, DropWatches, SetDelay, Inject, Bookmark) and a request log
// (Requests, OpenWatches, WaitForWatches) let tests drive and check the reconnect logic of
// a consumer deterministically.
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/wakeup"
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
	// Source that serves for good (a fan-out Server's log), whose log would otherwise grow
	// by one entry per call. Zero keeps every call.
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

	mu        sync.Mutex
	tree      *btree.Tree[K, V]
	rev       int64
	revStr    string
	revs      revStrings
	compacted int64       // every event at or before this revision is gone
	log       eventLog[V] // the events of revisions compacted+1 … rev

	pins    map[uint64]*pin[K, V] // snapshots of paged lists, by list id
	lastPin uint64

	watches    map[*watch[K, V]]struct{} // open watches
	waiters    wakeup.List[*watch[K, V]] // watches blocked in Next
	watchAdded chan struct{}             // closed and replaced when a watch opens

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
		key:        key,
		clock:      c,
		opts:       opts,
		id:         fmt.Sprintf("memory/%016x", rand.Uint64()),
		tree:       btree.New[K, V](32, btree.Natural[K](), nil),
		revStr:     "0",
		pins:       make(map[uint64]*pin[K, V]),
		watches:    make(map[*watch[K, V]]struct{}),
		watchAdded: make(chan struct{}),
	}
}

// SourceID returns the Source's identity, random and its own: a cache saved from one
// Source is never restored over another (see informer.SourceIdentifier).
func (s *Source[K, V]) SourceID(context.Context) (string, error) { return s.id, nil }

// Put adds obj (an Added event) or replaces the object with the same key (a Modified
// event) and returns the new revision. It costs one B-tree insert, O(log n), and one
// append to the log; open watches are woken, none is waited for.
func (s *Source[K, V]) Put(obj V) int64 {
	k := s.key(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	typ := informer.Added
	if _, replaced := s.tree.Set(k, obj); replaced {
		typ = informer.Modified
	}
	return s.appendLocked(typ, obj)
}

// Delete removes the object with key k and logs a Deleted event that carries its last
// state. It returns the new revision and true, or the current revision and false if there
// was no such object (nothing is logged then).
func (s *Source[K, V]) Delete(k K) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.tree.Delete(k)
	if !ok {
		return s.rev, false
	}
	return s.appendLocked(informer.Deleted, old), true
}

// appendLocked logs one change at the next revision and wakes the blocked watches.
func (s *Source[K, V]) appendLocked(typ informer.EventType, obj V) int64 {
	s.rev++
	s.revStr = s.revs.get(s.rev)
	s.log.add(s.rev, informer.Event[V]{Type: typ, Object: obj, Revision: s.revStr})
	if limit := int64(s.opts.HistoryLimit); limit > 0 && s.rev-s.compacted > limit {
		s.compactLocked(s.rev - limit)
	}
	s.wakeLocked()
	return s.rev
}

// Get returns the object with key k and whether there is one. It costs O(log n).
func (s *Source[K, V]) Get(k K) (V, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tree.Get(k)
}

// Items returns the current objects sorted by key, in a new slice that belongs to the
// caller. The objects themselves are shared with the Source and must not be changed.
func (s *Source[K, V]) Items() []V {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := make([]V, 0, s.tree.Len())
	s.tree.Ascend(func(_ K, obj V) bool {
		items = append(items, obj)
		return true
	})
	return items
}

// Len returns the number of objects.
func (s *Source[K, V]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tree.Len()
}

// Revision returns the current revision: 0 before the first change, then the revision of
// the last change.
func (s *Source[K, V]) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Compact forgets the history at or before rev, as etcd's compaction does. Afterwards a
// Watch from a revision older than rev, a watch whose next event was at or before rev, and
// the continue token of a list pinned at a revision older than rev all fail with an error
// that matches informer.ErrExpired. A rev beyond the current revision compacts up to the
// current revision; a rev at or before an earlier compaction does nothing. It costs
// O(events dropped + pinned lists).
func (s *Source[K, V]) Compact(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactLocked(min(rev, s.rev))
}

func (s *Source[K, V]) compactLocked(rev int64) {
	if rev <= s.compacted {
		return
	}
	s.log.drop(s.compacted, rev)
	s.compacted = rev
	for id, p := range s.pins {
		if p.rev < rev {
			delete(s.pins, id)
		}
	}
}

// CompactedRevision returns the revision of the last compaction: history at or before it
// is gone. It is 0 if nothing was compacted.
func (s *Source[K, V]) CompactedRevision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compacted
}

// CompareRevisions implements informer.RevisionComparer: it returns -1, 0 or +1 as a is
// older than, equal to or newer than b. Revisions are canonical decimal numbers >= 0
// ("0", "1", "42"); anything else is an error.
func (s *Source[K, V]) CompareRevisions(a, b string) (int, error) {
	ra, err := parseRevision(a)
	if err != nil {
		return 0, err
	}
	rb, err := parseRevision(b)
	if err != nil {
		return 0, err
	}
	return cmp.Compare(ra, rb), nil
}

// StreamingList implements informer.StreamingLister: it reports Options.StreamingList.
func (s *Source[K, V]) StreamingList() bool { return s.opts.StreamingList }

// errMalformedRevision is wrapped by every error about a revision string that is not one.
var errMalformedRevision = errors.New("not a revision of a memory source (want a decimal number >= 0)")

// parseRevision parses a canonical, non-negative decimal revision.
func parseRevision(r string) (int64, error) {
	if r == "" || r[0] == '+' || r[0] == '-' || (len(r) > 1 && r[0] == '0') {
		return 0, fmt.Errorf("memory: revision %q: %w", r, errMalformedRevision)
	}
	n, err := strconv.ParseInt(r, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory: revision %q: %w", r, errMalformedRevision)
	}
	return n, nil
}

// tooLarge is the error for a revision newer than the current one.
func tooLarge(rev, current int64) error {
	return fmt.Errorf("memory: too large revision %d: the current revision is %d: %w", rev, current, informer.ErrExpired)
}

// compactedError is the error for a revision whose history is gone.
func compactedError(rev, compacted int64) error {
	return fmt.Errorf("memory: revision %d has been compacted (compacted up to %d): %w", rev, compacted, informer.ErrExpired)
}

// revChunk is how many revision strings share one allocation.
const revChunk = 256

// revStrings hands out the decimal strings of consecutive revisions. They are cut from one
// string per revChunk revisions, so that a Put does not allocate a string of its own; a
// chunk stays alive while any of its revisions does (a few kilobytes at most).
type revStrings struct {
	first int64            // the revision whose string starts chunk
	chunk string           // the strings of revisions first, first+1, …, concatenated
	ends  [revChunk]uint16 // ends[i] is where the string of revision first+i ends
}

func (r *revStrings) get(rev int64) string {
	i := rev - r.first
	if r.chunk == "" || i < 0 || i >= revChunk {
		r.fill(rev)
		i = 0
	}
	var start uint16
	if i > 0 {
		start = r.ends[i-1]
	}
	return r.chunk[start:r.ends[i]]
}

func (r *revStrings) fill(first int64) {
	var buf [20]byte
	digits := len(strconv.AppendInt(buf[:0], first+revChunk-1, 10))
	var b strings.Builder
	b.Grow(revChunk * digits)
	for i := range int64(revChunk) {
		b.Write(strconv.AppendInt(buf[:0], first+i, 10))
		r.ends[i] = uint16(b.Len())
	}
	r.first, r.chunk = first, b.String()
}
