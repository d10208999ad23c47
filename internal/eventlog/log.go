// Package eventlog is the revisioned event log behind source/memory and fanout.Server: a
// collection keyed by K, the log of its changes with a revision each, compaction, and
// watches of the log that block without a goroutine of their own.
//
// The state is a copy-on-write B-tree, whose O(1) Clone pins a snapshot. The log holds
// ready-made events in fixed-size segments (no copying as it grows; compaction frees
// whole segments), and revision strings are cut from one shared string per 256
// revisions, so a Put costs one O(log n) B-tree insert and about 48 bytes of log, and a
// watch's Next costs one mutex acquisition and no allocation. A watch's blocking — its
// wake-up, its context, its timeout and bookmark timers — is a Loop, which any other
// stream of events read under a lock (a fan-out Server's filtered watches) uses too.
package eventlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/wakeup"
)

// Options configures a Log. The zero value is valid: the wall clock, no periodic
// bookmarks, no streaming lists, unlimited history.
type Options struct {
	// Name starts the log's error messages ("memory").
	Name string
	// Clock measures watch timeouts and bookmark intervals; nil means clock.Real{}.
	Clock clock.Clock
	// BookmarkInterval, when positive, gives every watch that allows bookmarks a timer
	// that fires at this interval; when it fires while the watch is idle, Next returns a
	// Bookmark at the current revision.
	BookmarkInterval time.Duration
	// StreamingList lets Watch honour WatchOptions.SendInitialEvents; without it such a
	// Watch fails with an error that matches informer.ErrNotSupported.
	StreamingList bool
	// HistoryLimit, when positive, compacts the log after every change so that it holds
	// at most this many events.
	HistoryLimit int
}

// Log is a revisioned collection and its change log. Revision 0 is the empty collection;
// each Put or Delete adds one. It is safe for concurrent use; make one with New.
type Log[K cmp.Ordered, V any] struct {
	clock clock.Clock
	opts  Options

	mu        sync.Mutex
	tree      *btree.Tree[K, V]
	rev       int64
	revStr    string
	revs      revStrings
	compacted int64       // every event at or before this revision is gone
	log       segments[V] // the events of revisions compacted+1 … rev

	watches    map[*watch[K, V]]struct{} // open watches
	waiters    wakeup.List[*watch[K, V]] // watches blocked in Next
	watchAdded chan struct{}             // closed and replaced when a watch opens
}

// New returns an empty Log.
func New[K cmp.Ordered, V any](opts Options) *Log[K, V] {
	c := opts.Clock
	if c == nil {
		c = clock.Real{}
	}
	return &Log[K, V]{
		clock:      c,
		opts:       opts,
		tree:       btree.New[K, V](32, btree.Natural[K](), nil),
		revStr:     "0",
		watches:    make(map[*watch[K, V]]struct{}),
		watchAdded: make(chan struct{}),
	}
}

// Put adds obj under k (an Added event) or replaces the object there (a Modified event)
// and returns the new revision; open watches are woken, none is waited for.
func (l *Log[K, V]) Put(k K, obj V) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	typ := informer.Added
	if _, replaced := l.tree.Set(k, obj); replaced {
		typ = informer.Modified
	}
	return l.appendLocked(typ, obj)
}

// Delete removes the object under k and logs a Deleted event that carries its last state.
// It returns the new revision and true, or the current revision and false if there was
// no such object (nothing is logged then).
func (l *Log[K, V]) Delete(k K) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.tree.Delete(k)
	if !ok {
		return l.rev, false
	}
	return l.appendLocked(informer.Deleted, old), true
}

// appendLocked logs one change at the next revision and wakes the blocked watches.
func (l *Log[K, V]) appendLocked(typ informer.EventType, obj V) int64 {
	l.rev++
	l.revStr = l.revs.get(l.rev)
	l.log.add(l.rev, informer.Event[V]{Type: typ, Object: obj, Revision: l.revStr})
	if limit := int64(l.opts.HistoryLimit); limit > 0 && l.rev-l.compacted > limit {
		l.compactLocked(l.rev - limit)
	}
	l.waiters.WakeAll()
	return l.rev
}

// Get returns the object under k and whether there is one.
func (l *Log[K, V]) Get(k K) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tree.Get(k)
}

// Items returns the current objects sorted by key, in a new slice.
func (l *Log[K, V]) Items() []V {
	l.mu.Lock()
	defer l.mu.Unlock()
	items := make([]V, 0, l.tree.Len())
	l.tree.Ascend(func(_ K, obj V) bool {
		items = append(items, obj)
		return true
	})
	return items
}

// Len returns the number of objects.
func (l *Log[K, V]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tree.Len()
}

// Revision returns the current revision: 0 before the first change.
func (l *Log[K, V]) Revision() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// Compact forgets the history at or before rev (at most the current revision); a rev at
// or before an earlier compaction does nothing.
func (l *Log[K, V]) Compact(rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.compactLocked(min(rev, l.rev))
}

func (l *Log[K, V]) compactLocked(rev int64) {
	if rev <= l.compacted {
		return
	}
	l.log.drop(l.compacted, rev)
	l.compacted = rev
}

// CompactedRevision returns the revision of the last compaction (0: none).
func (l *Log[K, V]) CompactedRevision() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.compacted
}

// State is the log's state as View shows it: valid only during the call.
type State[K cmp.Ordered, V any] struct {
	// Tree holds the objects by key; Clone it to keep it past the call.
	Tree *btree.Tree[K, V]
	// Rev is the current revision.
	Rev int64
	// RevStr is Rev in decimal, shared with the log's events.
	RevStr string
	// Compacted is the revision of the last compaction.
	Compacted int64
}

// View calls fn with the current state, under the log's lock: no change happens meanwhile.
func (l *Log[K, V]) View(fn func(State[K, V])) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn(State[K, V]{Tree: l.tree, Rev: l.rev, RevStr: l.revStr, Compacted: l.compacted})
}

// DropWatches ends every open watch: its next Next returns err (io.EOF if nil).
func (l *Log[K, V]) DropWatches(err error) {
	if err == nil {
		err = io.EOF
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.watches {
		w.EndLocked(err)
	}
}

// Inject sends ev, as given, to every open watch, after the log events it had not yet
// delivered, without changing the state or the revision.
func (l *Log[K, V]) Inject(ev informer.Event[V]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.injectLocked(ev, false)
}

// Bookmark sends a Bookmark at the current revision to every open watch that allows
// bookmarks, after the log events it had not yet delivered.
func (l *Log[K, V]) Bookmark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.injectLocked(informer.Event[V]{Type: informer.Bookmark, Revision: l.revStr}, true)
}

func (l *Log[K, V]) injectLocked(ev informer.Event[V], bookmark bool) {
	for w := range l.watches {
		if !bookmark || w.allowBookmarks {
			w.extra = append(w.extra, extra[V]{after: l.rev, ev: ev})
		}
	}
	l.waiters.WakeAll()
}

// OpenWatches returns the number of open watches.
func (l *Log[K, V]) OpenWatches() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.watches)
}

// WaitForWatches blocks until at least n watches are open, or returns ctx.Err().
func (l *Log[K, V]) WaitForWatches(ctx context.Context, n int) error {
	for {
		l.mu.Lock()
		if len(l.watches) >= n {
			l.mu.Unlock()
			return nil
		}
		added := l.watchAdded
		l.mu.Unlock()
		select {
		case <-added:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ErrMalformedRevision is wrapped by every error about a revision string that is not one.
var ErrMalformedRevision = errors.New("not a revision of this log (want a decimal number >= 0)")

// ParseRevision parses a canonical, non-negative decimal revision.
func (l *Log[K, V]) ParseRevision(r string) (int64, error) { return ParseRevision(l.opts.Name, r) }

// ParseRevision parses a canonical, non-negative decimal revision; name starts its error.
func ParseRevision(name, r string) (int64, error) {
	if r == "" || r[0] == '+' || r[0] == '-' || (len(r) > 1 && r[0] == '0') {
		return 0, fmt.Errorf("%s: revision %q: %w", name, r, ErrMalformedRevision)
	}
	n, err := strconv.ParseInt(r, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: revision %q: %w", name, r, ErrMalformedRevision)
	}
	return n, nil
}

// TooLarge is the error for a revision newer than the current one.
func (l *Log[K, V]) TooLarge(rev, current int64) error {
	return fmt.Errorf("%s: too large revision %d: the current revision is %d: %w", l.opts.Name, rev, current, informer.ErrExpired)
}

// CompactedError is the error for a revision whose history is gone.
func (l *Log[K, V]) CompactedError(rev, compacted int64) error {
	return fmt.Errorf("%s: revision %d has been compacted (compacted up to %d): %w", l.opts.Name, rev, compacted, informer.ErrExpired)
}
