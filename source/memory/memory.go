// Package memory is an in-memory, revisioned event log that implements
// informer.ListerWatcher. Every Put and Delete is a change with the next revision; lists
// are paged from point-in-time snapshots; watches stream the log from any revision still
// in the history; Compact forgets history so that old revisions expire.
//
// It is the source the examples run on, and a fixture for testing your own handlers and
// the informer's behaviour under faults: DropWatches, FailNext, SetDelay and Inject break
// things on purpose, Requests records what the informer asked for, and WaitForWatches
// lets a test wait for the informer to be watching instead of sleeping.
//
// Revisions are decimal int64 strings starting at "1" for the first change ("0" before any
// change); Source implements informer.RevisionComparer, so informer.WaitForRevision works.
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
)

// Options configures a Source. The zero value is ready to use.
type Options struct {
	// Clock measures watch timeouts, bookmark intervals and delays; default clock.Real.
	Clock clock.Clock
	// BookmarkInterval, when positive, sends an idle watch that allows bookmarks a
	// Bookmark at the current revision at this interval.
	BookmarkInterval time.Duration
	// StreamingList makes the Source offer streaming lists (informer.StreamingLister):
	// a watch with SendInitialEvents starts with the current state as Added events and a
	// Bookmark with EndOfInitialEvents. Without it such a watch fails with
	// informer.ErrNotSupported.
	StreamingList bool
	// HistoryLimit, when positive, compacts automatically so that at most this many
	// changes are kept in the history.
	HistoryLimit int
}

// Op names a kind of request, for FailNext and Requests.
type Op int

// The kinds of requests.
const (
	OpList Op = iota + 1
	OpWatch
	OpAny // FailNext only: either kind
)

func (o Op) String() string {
	switch o {
	case OpList:
		return "List"
	case OpWatch:
		return "Watch"
	case OpAny:
		return "Any"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Request is one List or Watch call, as recorded by Requests.
type Request struct {
	Op    Op
	List  informer.ListOptions  // for OpList
	Watch informer.WatchOptions // for OpWatch
}

type item[K cmp.Ordered, V any] struct {
	key K
	obj V
}

type change[V any] struct {
	rev int64
	ev  informer.Event[V]
}

// cursor is the pinned state of a paged list.
type cursor[K cmp.Ordered, V any] struct {
	rev   int64
	state *btree.BTreeG[item[K, V]]
	after K
}

type fault struct {
	n   int
	op  Op
	err error
}

// Source is an in-memory collection with a revisioned change log. It is safe for
// concurrent use. Put and Delete cost O(log n) plus one step per open watch; a watch reads
// the shared log and copies nothing.
type Source[K cmp.Ordered, V any] struct {
	key  func(V) K
	opts Options

	mu        sync.Mutex
	state     *btree.BTreeG[item[K, V]]
	rev       int64
	log       []change[V] // changes after compacted, in order
	logBase   int         // absolute index of log[0]
	compacted int64
	cursors   map[uint64]*cursor[K, V]
	cursorSeq uint64
	watches   map[*watch[K, V]]struct{}
	watchesCh chan struct{} // closed and replaced when the set of watches changes
	faults    []fault
	delay     time.Duration
	requests  []Request
}

var (
	_ informer.ListerWatcher[int] = (*Source[string, int])(nil)
	_ informer.RevisionComparer   = (*Source[string, int])(nil)
	_ informer.StreamingLister    = (*Source[string, int])(nil)
)

// New returns an empty Source whose objects are keyed by key.
func New[K cmp.Ordered, V any](key func(V) K, opts Options) *Source[K, V] {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Source[K, V]{
		key:       key,
		opts:      opts,
		state:     btree.NewG(32, func(a, b item[K, V]) bool { return a.key < b.key }),
		cursors:   make(map[uint64]*cursor[K, V]),
		watches:   make(map[*watch[K, V]]struct{}),
		watchesCh: make(chan struct{}),
	}
}

// Put stores obj: an Added change if its key is new, Modified otherwise. It returns the
// revision of the change.
func (s *Source[K, V]) Put(obj V) int64 {
	k := s.key(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, existed := s.state.ReplaceOrInsert(item[K, V]{key: k, obj: obj})
	t := informer.Added
	if existed {
		t = informer.Modified
	}
	return s.appendLocked(t, obj)
}

// Delete removes key: a Deleted change carrying the object's last state. It returns the
// revision of the change, and false (with the current revision) if key was absent.
func (s *Source[K, V]) Delete(key K) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.state.Delete(item[K, V]{key: key})
	if !ok {
		return s.rev, false
	}
	return s.appendLocked(informer.Deleted, old.obj), true
}

func (s *Source[K, V]) appendLocked(t informer.EventType, obj V) int64 {
	s.rev++
	s.log = append(s.log, change[V]{rev: s.rev, ev: informer.Event[V]{Type: t, Object: obj, Revision: strconv.FormatInt(s.rev, 10)}})
	if lim := s.opts.HistoryLimit; lim > 0 && len(s.log) > lim {
		s.compactLocked(s.log[len(s.log)-lim-1].rev)
	}
	for w := range s.watches {
		w.signal()
	}
	return s.rev
}

// Get returns the object stored under key.
func (s *Source[K, V]) Get(key K) (V, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.state.Get(item[K, V]{key: key})
	return it.obj, ok
}

// Items returns the current objects sorted by key, in a new slice.
func (s *Source[K, V]) Items() []V {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]V, 0, s.state.Len())
	s.state.Ascend(func(it item[K, V]) bool { out = append(out, it.obj); return true })
	return out
}

// Len returns the number of objects.
func (s *Source[K, V]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Len()
}

// Revision returns the current revision (0 before any change).
func (s *Source[K, V]) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Compact forgets the history at or before rev: a watch from an older revision, a watch
// that has not yet read past rev, and a list page pinned before rev all fail with an error
// matching informer.ErrExpired.
func (s *Source[K, V]) Compact(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactLocked(rev)
	for w := range s.watches {
		w.signal()
	}
}

func (s *Source[K, V]) compactLocked(rev int64) {
	if rev <= s.compacted {
		return
	}
	rev = min(rev, s.rev)
	n := 0
	for n < len(s.log) && s.log[n].rev <= rev {
		n++
	}
	clear(s.log[:n])
	s.log = s.log[n:]
	s.logBase += n
	s.compacted = rev
	for id, c := range s.cursors {
		if c.rev < rev {
			delete(s.cursors, id)
		}
	}
}

// CompareRevisions compares two revisions of this source (informer.RevisionComparer).
func (s *Source[K, V]) CompareRevisions(a, b string) (int, error) {
	x, err := parseRev(a)
	if err != nil {
		return 0, err
	}
	y, err := parseRev(b)
	if err != nil {
		return 0, err
	}
	return cmp.Compare(x, y), nil
}

// StreamingList reports whether Options.StreamingList is set (informer.StreamingLister).
func (s *Source[K, V]) StreamingList() bool { return s.opts.StreamingList }

func parseRev(r string) (int64, error) {
	v, err := strconv.ParseInt(r, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("memory: malformed revision %q", r)
	}
	return v, nil
}

// --- faults and observation ---

// FailNext makes the next n calls of kind op (OpList, OpWatch or OpAny) fail with err.
func (s *Source[K, V]) FailNext(n int, op Op, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, fault{n: n, op: op, err: err})
}

// SetDelay makes every later List and Watch call wait d (on the Options clock) before it
// answers, or until its context ends.
func (s *Source[K, V]) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// DropWatches ends every open watch: its next Next returns err (io.EOF when err is nil),
// abandoning whatever it had not yet delivered.
func (s *Source[K, V]) DropWatches(err error) {
	if err == nil {
		err = io.EOF
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watches {
		w.dropErr = err
		w.signal()
	}
}

// Inject delivers ev, as it is, to every open watch, ahead of the log; the state does not
// change. Use it to send bad input (an old revision, an unknown type).
func (s *Source[K, V]) Inject(ev informer.Event[V]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watches {
		w.injected = append(w.injected, ev)
		w.signal()
	}
}

// Bookmark sends a Bookmark at the current revision to every open watch that allows
// bookmarks, once it has delivered the changes before it.
func (s *Source[K, V]) Bookmark() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watches {
		if w.opts.AllowBookmarks {
			w.bookmarkAt = s.rev
			w.signal()
		}
	}
}

// Requests returns every List and Watch call so far, in order.
func (s *Source[K, V]) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// OpenWatches returns the number of watches open now.
func (s *Source[K, V]) OpenWatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// WaitForWatches blocks until at least n watches are open, or ctx ends.
func (s *Source[K, V]) WaitForWatches(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		if len(s.watches) >= n {
			s.mu.Unlock()
			return nil
		}
		ch := s.watchesCh
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Source[K, V]) watchesChangedLocked() {
	close(s.watchesCh)
	s.watchesCh = make(chan struct{})
}

// begin records a request, applies the delay and returns an injected failure if one is due.
func (s *Source[K, V]) begin(ctx context.Context, r Request) error {
	s.mu.Lock()
	s.requests = append(s.requests, r)
	var err error
	for i := range s.faults {
		f := &s.faults[i]
		if f.n > 0 && (f.op == r.Op || f.op == OpAny) {
			f.n--
			err = f.err
			break
		}
	}
	d := s.delay
	s.mu.Unlock()
	if d > 0 {
		t := s.opts.Clock.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// --- List ---

// List returns one page of the objects, sorted by key (informer.ListerWatcher). The first
// page pins the current state (an O(1) copy-on-write snapshot); the continue token points
// later pages at it, so all pages report the same revision. A token whose revision was
// compacted fails with informer.ErrExpired; a Revision newer than the current one fails
// with informer.ErrExpired too (a revision the source has not reached: list again
// without it).
func (s *Source[K, V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	if err := s.begin(ctx, Request{Op: OpList, List: opts}); err != nil {
		return informer.List[V]{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var c *cursor[K, V]
	var id uint64
	if opts.Continue != "" {
		rev, cid, err := parseToken(opts.Continue)
		if err != nil {
			return informer.List[V]{}, err
		}
		if c = s.cursors[cid]; c == nil || c.rev != rev {
			if rev < s.compacted {
				return informer.List[V]{}, fmt.Errorf("memory: continue token at revision %d: %w (compacted at %d)", rev, informer.ErrExpired, s.compacted)
			}
			return informer.List[V]{}, fmt.Errorf("memory: unknown or used continue token %q", opts.Continue)
		}
		id = cid
	} else {
		if opts.Revision != "" {
			want, err := parseRev(opts.Revision)
			if err != nil {
				return informer.List[V]{}, err
			}
			if want > s.rev {
				return informer.List[V]{}, fmt.Errorf("memory: revision %d is newer than the current %d: %w", want, s.rev, informer.ErrExpired)
			}
		}
		c = &cursor[K, V]{rev: s.rev, state: s.state}
		if opts.Limit > 0 {
			c.state = s.state.Clone()
		}
	}
	page := informer.List[V]{Revision: strconv.FormatInt(c.rev, 10)}
	n := s.state.Len()
	if opts.Limit > 0 {
		n = int(min(int64(n), opts.Limit))
	}
	page.Items = make([]V, 0, n)
	more := false
	visit := func(it item[K, V]) bool {
		if opts.Limit > 0 && int64(len(page.Items)) == opts.Limit {
			more = true
			return false
		}
		page.Items = append(page.Items, it.obj)
		c.after = it.key
		return true
	}
	if opts.Continue != "" {
		c.state.AscendGreaterOrEqual(item[K, V]{key: c.after}, func(it item[K, V]) bool {
			if it.key == c.after {
				return true // exclusive of the last key served
			}
			return visit(it)
		})
	} else {
		c.state.Ascend(visit)
	}
	switch {
	case more && id == 0:
		s.cursorSeq++
		id = s.cursorSeq
		s.cursors[id] = c
		page.Continue = fmt.Sprintf("%d.%d", c.rev, id)
	case more:
		// A new token per page, so that a client can tell pages apart.
		delete(s.cursors, id)
		s.cursorSeq++
		id = s.cursorSeq
		s.cursors[id] = c
		page.Continue = fmt.Sprintf("%d.%d", c.rev, id)
	case id != 0:
		delete(s.cursors, id)
	}
	return page, nil
}

func parseToken(tok string) (rev int64, id uint64, err error) {
	r, i, ok := strings.Cut(tok, ".")
	if ok {
		rev, err = strconv.ParseInt(r, 10, 64)
		if err == nil {
			id, err = strconv.ParseUint(i, 10, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("memory: malformed continue token %q", tok)
	}
	return rev, id, nil
}

// --- Watch ---

// Watch streams the changes after opts.Revision ("" means from now) (informer.ListerWatcher).
// A revision older than the compacted one fails with informer.ErrExpired. With
// opts.Timeout the stream ends with io.EOF after that long on the Options clock.
func (s *Source[K, V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	if err := s.begin(ctx, Request{Op: OpWatch, Watch: opts}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &watch[K, V]{src: s, ctx: ctx, opts: opts, wake: make(chan struct{}, 1), stopCh: make(chan struct{})}
	switch {
	case opts.SendInitialEvents:
		if !s.opts.StreamingList {
			return nil, fmt.Errorf("memory: streaming list: %w", informer.ErrNotSupported)
		}
		rev := strconv.FormatInt(s.rev, 10)
		s.state.Ascend(func(it item[K, V]) bool {
			w.injected = append(w.injected, informer.Event[V]{Type: informer.Added, Object: it.obj, Revision: rev})
			return true
		})
		w.injected = append(w.injected, informer.Event[V]{Type: informer.Bookmark, Revision: rev, EndOfInitialEvents: true})
		w.pos = s.logBase + len(s.log)
	case opts.Revision == "":
		w.pos = s.logBase + len(s.log)
	default:
		from, err := parseRev(opts.Revision)
		if err != nil {
			return nil, err
		}
		if from < s.compacted {
			return nil, fmt.Errorf("memory: watch from revision %d: %w (compacted at %d)", from, informer.ErrExpired, s.compacted)
		}
		// The first change newer than from: revisions are dense, one per change.
		w.pos = s.logBase + int(min(max(from-s.compacted, 0), int64(len(s.log))))
	}
	if opts.Timeout > 0 {
		w.timeout = s.opts.Clock.NewTimer(opts.Timeout)
	}
	s.watches[w] = struct{}{}
	s.watchesChangedLocked()
	return w, nil
}

type watch[K cmp.Ordered, V any] struct {
	src  *Source[K, V]
	ctx  context.Context
	opts informer.WatchOptions

	// guarded by src.mu
	pos        int // absolute index of the next change to deliver
	injected   []informer.Event[V]
	dropErr    error
	bookmarkAt int64
	stopped    bool

	wake    chan struct{}
	stopCh  chan struct{}
	timeout clock.Timer
	idle    clock.Timer // bookmark interval
}

func (w *watch[K, V]) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Next returns the next change (informer.Watch).
func (w *watch[K, V]) Next() (informer.Event[V], error) {
	s := w.src
	for {
		s.mu.Lock()
		if w.stopped {
			s.mu.Unlock()
			return informer.Event[V]{}, errors.New("memory: watch stopped")
		}
		if w.dropErr != nil {
			err := w.dropErr
			s.mu.Unlock()
			return informer.Event[V]{}, err
		}
		if len(w.injected) > 0 {
			ev := w.injected[0]
			w.injected = w.injected[1:]
			s.mu.Unlock()
			return ev, nil
		}
		if w.pos < s.logBase {
			s.mu.Unlock()
			return informer.Event[V]{}, fmt.Errorf("memory: watch fell behind compaction at %d: %w", s.compacted, informer.ErrExpired)
		}
		if i := w.pos - s.logBase; i < len(s.log) {
			ev := s.log[i].ev
			w.pos++
			s.mu.Unlock()
			return ev, nil
		}
		if w.bookmarkAt > 0 {
			ev := informer.Event[V]{Type: informer.Bookmark, Revision: strconv.FormatInt(w.bookmarkAt, 10)}
			w.bookmarkAt = 0
			s.mu.Unlock()
			return ev, nil
		}
		s.mu.Unlock()

		var timeoutC, idleC <-chan time.Time
		if w.timeout != nil {
			timeoutC = w.timeout.C()
		}
		if s.opts.BookmarkInterval > 0 && w.opts.AllowBookmarks {
			if w.idle == nil {
				w.idle = s.opts.Clock.NewTimer(s.opts.BookmarkInterval)
			}
			idleC = w.idle.C()
		}
		select {
		case <-w.wake:
		case <-w.stopCh:
		case <-w.ctx.Done():
			return informer.Event[V]{}, w.ctx.Err()
		case <-timeoutC:
			return informer.Event[V]{}, io.EOF
		case <-idleC:
			s.mu.Lock()
			w.bookmarkAt = s.rev
			s.mu.Unlock()
			w.idle.Reset(s.opts.BookmarkInterval)
		}
	}
}

// Stop ends the watch (informer.Watch).
func (w *watch[K, V]) Stop() {
	s := w.src
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	close(w.stopCh)
	if w.timeout != nil {
		w.timeout.Stop()
	}
	if w.idle != nil {
		w.idle.Stop()
	}
	delete(s.watches, w)
	s.watchesChangedLocked()
}
