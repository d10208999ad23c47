package fanout

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/wire"
	"github.com/informer-go/informer/source/memory"
)

// Defaults of ServerOptions.
const (
	// DefaultHistoryLimit is the number of changes a Server keeps for watchers to resume
	// from when ServerOptions.HistoryLimit is 0.
	DefaultHistoryLimit = 10000
	// DefaultHistoryBytes bounds the encoded size of the changes a Server keeps when
	// ServerOptions.HistoryBytes is 0.
	DefaultHistoryBytes = 64 << 20
	// DefaultMaxObjectSize is the largest encoded object a Server serves when
	// ServerOptions.MaxObjectSize is 0: the largest that fits, with its event's envelope,
	// in a frame of DefaultMaxFrameSize, the limit of a Client, so that a Client with
	// default options can always sync from a Server with default options.
	DefaultMaxObjectSize = wire.DefaultMaxFrameSize - wire.MaxEnvelope
	// DefaultPagedLists bounds the snapshots a Server keeps for paged lists in progress
	// when ServerOptions.PagedLists is 0.
	DefaultPagedLists = 1024
	// DefaultPagedListsPerClient bounds the snapshots one client's paged lists keep when
	// ServerOptions.PagedListsPerClient is 0.
	DefaultPagedListsPerClient = 16
	// DefaultBookmarkInterval is the bookmark period of a Server when
	// ServerOptions.BookmarkInterval is 0.
	DefaultBookmarkInterval = time.Minute
)

// ServerOptions configures a Server. Every zero value is a documented default.
type ServerOptions[V any] struct {
	ServeOptions
	// Encode returns an object's JSON. Nil means encoding/json.Marshal. Its output is
	// checked once per change and compacted onto one line if needed; an object that fails
	// to encode is reported (ErrorHandler, Stats.EncodeErrors) and not served, so clients
	// keep its previous state.
	Encode func(V) ([]byte, error)
	// MaxObjectSize is the largest encoded object the server serves. A larger one is
	// refused like an object that fails to encode (reported, counted in Stats.TooLarge, not
	// served: clients keep its previous state), so that every frame fits a client's frame
	// limit. 0 means DefaultMaxObjectSize; a Client's MaxFrameSize must be at least this
	// plus 1 KiB.
	MaxObjectSize int
	// HistoryLimit is how many changes the server keeps. A watcher may resume from any
	// revision within them; an older revision is answered 410 and the client lists again.
	// A watcher whose next change has dropped out of the history while it was behind is
	// sent an ERROR event (410) and disconnected. 0 means DefaultHistoryLimit; it must not
	// be negative.
	HistoryLimit int
	// HistoryBytes bounds the encoded size of the changes kept, as HistoryLimit bounds their
	// number: the oldest go first when either is exceeded (the newest change is always
	// kept). 0 means DefaultHistoryBytes; negative means no bound in bytes.
	HistoryBytes int64
	// PagedLists bounds the snapshots kept for paged lists in progress (a list with limit
	// whose later pages are still to come): a snapshot costs little until the state
	// changes, then up to one old version per object changed since. Beyond it the
	// snapshot of the client that holds the most goes (its oldest), so that a client
	// keeping within PagedListsPerClient never loses one to another client. A snapshot also
	// goes when its last page is served or when its revision leaves the history; its
	// continue token is then answered 410. 0 means DefaultPagedLists.
	PagedLists int
	// PagedListsPerClient bounds the snapshots of one client's paged lists; a client that
	// starts one more loses its own oldest. 0 means DefaultPagedListsPerClient.
	PagedListsPerClient int
	// BookmarkInterval is how often an idle watcher that asked for bookmarks
	// (allowWatchBookmarks=true) is sent one at the newest revision, so that it can
	// resume from there. The watch's response tells the interval (header
	// Informer-Bookmark-Interval, in seconds), and a Client ends a watch that goes two
	// intervals without a frame: a server gone silent is noticed within two intervals.
	// 0 means DefaultBookmarkInterval; negative means no bookmarks.
	BookmarkInterval time.Duration
	// QueueLength is the length of the queue of the handler the server registers on the
	// informer (informer.HandlerOptions.QueueLength); the handler coalesces per key when it
	// is full, so the server never slows the informer. 0 means the informer's default.
	QueueLength int
	// Clock times bookmarks and watch timeouts; nil means clock.Real{}.
	Clock clock.Clock
	// Filters are the indexes a client may filter by (Filter: index=<name>&value=<v>),
	// computed by the server once per change; see httpsource.Filter and the package documentation.
	// They must be pure functions of what Encode serves. One that fails or panics is
	// reported, counted (Stats.IndexErrors), and the object leaves that index's filters
	// until a change indexes it. Nil means none: a filtered request is answered 400.
	Filters map[string]informer.IndexFunc[V]
	// CatchUpWait is how long a request for a revision the server has not reached yet
	// waits for it (a client that comes from a replica further ahead; see Server) before
	// it is answered 503 with a Retry-After, which a Client takes as a cue to retry, here
	// or at its next URL, without a relist. It applies when the informer's source has
	// ordered revisions. 0 means DefaultCatchUpWait; negative means no wait.
	CatchUpWait time.Duration
}

// Server serves an informer's collection over HTTP in the protocol Client speaks (the
// Kubernetes JSON list+watch shapes; see the package documentation), so that many
// processes can mirror one source through one upstream watch: the fan-out tier.
//
// It registers a handler on the informer that copies every change, encoded once, into an
// in-memory revisioned log (source/memory) with a bounded history, and serves from that
// log: lists are consistent, paginated snapshots with continue tokens; watches resume from
// any revision within the history. Every watcher reads the one shared log. An HTTP/1.1
// watch is taken over from net/http once its header is sent (its connection hijacked,
// net/http's goroutines and buffers gone): an idle watcher costs one goroutine and a
// connection, 7.5 KB of heap and stacks in use (BenchmarkWatcherCost), plus a pooled
// 32 KiB write buffer while it has something to send, whatever the rate of changes. An HTTP/2
// watch, or one served through a ResponseWriter that does not implement http.Hijacker,
// stays on net/http's path: the handler's goroutine and net/http's buffers of the
// stream. A taken-over watch ends when the Server's Shutdown, the watch's timeout or its
// request context's deadline ends it, or its client goes away; http.Server.Close and
// Shutdown do not know it. The memory of the server is the state, the history (bounded by
// HistoryLimit and HistoryBytes) and the snapshots of lists in progress. Encoding is done
// once per change, not once per watcher.
//
// Lists in progress. A list (paged or not, or the initial events of a streaming list)
// reads a copy-on-write snapshot of the state, which costs nothing until the state
// changes, then keeps the earlier version of each object changed since. A list is cut when
// its revision leaves the history — a page being sent has its connection closed, a later
// page's continue token is answered 410, a streaming list is sent an ERROR event (410) —
// and counted in Stats.Evicted, however fast its reader reads. So all lists in progress
// together, whatever their number, pin at most the earlier versions of the objects changed
// within the history: at most HistoryLimit objects, about HistoryBytes when objects keep
// their size. A reader slower than the history's span (HistoryLimit changes at the rate
// of changes) should ask for pages.
//
// Revisions. When the informer's source has ordered revisions (it implements
// informer.RevisionComparer, as source/memory and source/etcd do), the Server serves the
// upstream's own revisions, end to end: a list is the informer's cache at the revision it
// has reached; a watch resumes from any upstream revision within the server's history (a
// revision older than the history is answered 410); bookmarks carry the upstream
// revision the cache has reached, and move when the upstream's does without a change
// here. So a client informer's WaitForRevision(rev) for the revision of a write to the
// upstream means what it says, and replicas — Servers over informers of the same upstream
// — are interchangeable: a client that loses its server resumes its watch at another
// (ClientOptions.FailoverURLs, or a load balancer in front of them) with no relist. A
// replica that has not yet reached the revision a request asks for (a client that comes
// from a replica further ahead) waits for it up to CatchUpWait (DefaultCatchUpWait,
// 5 s), then answers 503 with a Retry-After: a retry, here or at another replica, never a
// 410 that would force a relist.
//
// The informer tells its handlers which revision their notifications add up to only
// when its cache is exactly the upstream's state at a revision (informer.RevisionHandler):
// the Server holds changes back until then and logs them as one batch at that revision,
// at most one change per key. Every event of a batch carries the batch's revision; all
// but the last carry it with a '~' after it, and a Client applies a batch only once it
// has its last event, so that a client never holds half a batch under the batch's
// revision. The initial events of a watch — the replay of the state for a watch from
// resourceVersion 0 or none, or a streaming list — are one batch at the state's revision,
// filtered or not. A client resuming from a revision that falls inside a batch of this replica
// (a batch of another replica ended there) is sent that whole batch: each of its keys is
// brought to a state at least as new as the client's. While the informer's queue never
// drains (a backlog of more than informer.Options.MaxBatch keys) or the server's handler
// queue overflows, changes wait for the next exact revision.
//
// When the source's revisions are not ordered, the Server numbers its changes itself,
// one revision per change: <tag>.<n>, tag its start time in base 36. A client's
// OrderedClient compares two revisions of one tag, and refuses with an error a revision of
// another numbering (the upstream's, another instance's): WaitForRevision with the
// upstream's revision fails rather than return at once. A revision of another numbering
// is answered 410 for a watch (the client lists again); two such Servers are not
// interchangeable.
//
// A Server answers 503 until its handler has received the informer's initial state. It
// keeps serving its last state if the informer stops. A Delete event carries the last
// state the server served for the object.
type Server[K cmp.Ordered, V any] struct {
	core       core[*record[K]]
	src        *memory.Source[K, *record[K]]
	inf        *informer.Informer[K, V]
	reg        *informer.Registration
	revs       *offsetRevisions   // own numbering: the informer's source is not ordered
	up         *upstreamRevisions // the upstream's revisions: the informer's source is ordered
	mirror     *mirror[K, V]
	pins       pinTable[K]
	synced     chan struct{} // closed by waitSynced, started by the first Synced
	syncedOnce sync.Once
}

// record is what the server's log holds for an object: its key and its encoded form.
type record[K any] struct {
	key  K
	json []byte
}

// newRecords returns an empty tree of records by key, of the given degree.
func newRecords[K cmp.Ordered](degree int) *btree.Tree[K, *record[K]] {
	return btree.New[K, *record[K]](degree, btree.Natural[K](), nil)
}

// NewServer returns a server of inf's collection. key must return the key the informer
// uses; nil means the informer's own (inf.Key), so that the key function is written once.
// The server's handler is added to inf at once; the informer may already be running. Call
// Shutdown to remove it.
func NewServer[K cmp.Ordered, V any](inf *informer.Informer[K, V], key informer.KeyFunc[K, V], opts ServerOptions[V]) (*Server[K, V], error) {
	if inf == nil {
		return nil, errors.New("httpsource: NewServer: nil informer")
	}
	if key == nil {
		key = inf.Key
	}
	history := opts.HistoryLimit
	switch {
	case history == 0:
		history = DefaultHistoryLimit
	case history < 0:
		return nil, fmt.Errorf("httpsource: NewServer: negative HistoryLimit %d", history)
	}
	bookmarks := opts.BookmarkInterval
	switch {
	case bookmarks == 0:
		bookmarks = DefaultBookmarkInterval
	case bookmarks < 0:
		bookmarks = 0
	}
	maxObject := opts.MaxObjectSize
	if maxObject <= 0 {
		maxObject = DefaultMaxObjectSize
	}
	historyBytes := opts.HistoryBytes
	if historyBytes == 0 {
		historyBytes = DefaultHistoryBytes
	}
	encode := opts.Encode
	if encode == nil {
		encode = func(v V) ([]byte, error) { return json.Marshal(v) }
	}
	base := time.Now().UnixNano()
	tag := strconv.FormatInt(base, 36)
	s := &Server[K, V]{
		inf: inf,
		src: memory.New(func(r *record[K]) K { return r.key }, memory.Options{
			Clock:            opts.Clock,
			BookmarkInterval: bookmarks,
			StreamingList:    true,
			HistoryLimit:     history,
			KeepRequests:     -1, // the log serves for good: no record of its calls
		}),
		synced: make(chan struct{}),
	}
	s.core.instance = tag
	var head atomic.Int64
	if order := inf.RevisionComparer(); order != nil {
		s.up = newUpstreamRevisions(order, tag, &head)
		s.core.revs = s.up
		catchUp := cmp.Or(opts.CatchUpWait, DefaultCatchUpWait)
		s.core.await = func(ctx context.Context, rev string) error { return s.up.await(ctx, rev, catchUp) }
	} else {
		s.revs = &offsetRevisions{tag: tag, head: &head}
		s.core.revs = s.revs
	}
	s.mirror = &mirror[K, V]{
		src: s.src, key: key, encode: encode, head: &head, up: s.up,
		tree:      newRecords[K](32),
		maxObject: maxObject, historyBytes: historyBytes,
		report: func(err error) { s.core.report(err) },
		stats:  &s.core.stats,
	}
	s.pins = pinTable[K]{
		limit:     cmp.Or(max(opts.PagedLists, 0), DefaultPagedLists),
		perClient: cmp.Or(max(opts.PagedListsPerClient, 0), DefaultPagedListsPerClient),
		byID:      make(map[uint64]*pin[K]),
		byClient:  make(map[string][]*pin[K]),
	}
	if err := s.serveFilters(opts, bookmarks); err != nil {
		return nil, err
	}
	s.core.list = s.list
	s.core.lw = s.src
	if s.up != nil {
		s.core.lw = boundedWatches[K]{Source: s.src, mu: &s.mirror.mu}
	}
	s.core.appendObject = func(dst []byte, r *record[K]) ([]byte, error) { return append(dst, r.json...), nil }
	s.core.bookmarks = bookmarks
	s.core.replayOnEmpty = true
	s.core.batchInitial = s.up != nil
	s.core.plainIsBad = true
	s.core.init(opts.ServeOptions)
	reg, err := inf.AddHandler(s.mirror, informer.HandlerOptions{
		Name:         "httpsource.Server",
		ResyncPeriod: -1, // resyncs carry nothing new
		QueueLength:  opts.QueueLength,
	})
	if err != nil {
		return nil, fmt.Errorf("httpsource: NewServer: %w", err)
	}
	s.reg = reg
	s.core.ready = s.HasSynced
	return s, nil
}

// waitSynced closes s.synced once the server serves: its handler has the informer's
// initial state and, for an ordered upstream, the revision of a state it holds.
func (s *Server[K, V]) waitSynced() {
	select {
	case <-s.reg.Synced():
	case <-s.core.stopCtx.Done():
		return
	}
	if s.up != nil {
		select {
		case <-s.up.ready:
		case <-s.core.stopCtx.Done():
			return
		}
	}
	close(s.synced)
}

// ServeHTTP implements http.Handler. Mount it at the collection's URL; it answers GET
// only. See the package documentation for the requests and answers.
func (s *Server[K, V]) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.core.ServeHTTP(w, r) }

// Shutdown stops serving: new requests are answered 503; every open watch ends cleanly,
// as when its timeout passes, after the events already read are sent (clients reconnect
// and get 503 or, once the http.Server is closed, a refused connection, and retry); the
// server's handler is removed from the informer. It waits until every request handler
// has returned, or ctx is done (then it returns ctx.Err(); a watcher stuck writing to a
// client that does not read returns within WriteTimeout). Call it before
// http.Server.Shutdown, which does not end streaming responses. Calling it again only
// waits again.
func (s *Server[K, V]) Shutdown(ctx context.Context) error {
	err := s.core.shutdown(ctx)
	s.inf.RemoveHandler(s.reg)
	return err
}

// Stats returns the server's counters.
func (s *Server[K, V]) Stats() *Stats { return &s.core.stats }

// Revision returns the revision of the state the server serves: the upstream's revision
// its informer's cache has reached, for an ordered upstream ("" before the first);
// otherwise the server's own revision of its newest change, <tag>.<n>.
func (s *Server[K, V]) Revision() string {
	if s.up != nil {
		return s.up.newest()
	}
	return s.onWire(s.mirror.head.Load())
}

// HasSynced reports whether the server holds the informer's initial state and serves:
// its handler has that state and, for an ordered upstream, the revision of a state it
// holds.
func (s *Server[K, V]) HasSynced() bool {
	if !s.reg.HasSynced() {
		return false
	}
	if s.up == nil {
		return true
	}
	select {
	case <-s.up.ready:
		return true
	default:
		return false
	}
}

// Synced returns a channel closed once HasSynced is true. The first call starts a
// goroutine that waits for it, until then or Shutdown.
func (s *Server[K, V]) Synced() <-chan struct{} {
	s.syncedOnce.Do(func() { go s.waitSynced() })
	return s.synced
}

// mirror is the informer handler that copies changes into the server's log and its
// state tree (which lists read from). With an ordered upstream (up set) it holds the
// changes back until the informer says which revision they add up to (OnRevision), and
// then logs them as one batch: the tree and the log are always exactly the upstream's
// state at a revision.
type mirror[K cmp.Ordered, V any] struct {
	src          *memory.Source[K, *record[K]]
	key          informer.KeyFunc[K, V]
	encode       func(V) ([]byte, error)
	head         *atomic.Int64 // the log revision of the newest change
	up           *upstreamRevisions
	maxObject    int
	historyBytes int64
	report       func(error)
	stats        *Stats
	filters      *filterHub[K, V] // nil without ServerOptions.Filters

	mu        sync.Mutex                 // the tree and head change together; lists clone both
	tree      *btree.Tree[K, *record[K]] // the served state, by key
	log       []logged                   // size of each change in the history, oldest first from first
	first     int                        // log[:first] is dropped
	held      int64                      // sum of the sizes kept
	pending   []pendingChange[K]         // changes held back until the next revision (up set), one per key
	ops       []logOp[K]                 // OnRevision's buffer
	pendingAt map[K]int                  // the index of a key's change in pending
}

// logOp is one change OnRevision logs.
type logOp[K any] struct {
	r      *record[K]
	vals   [][]string // r's values in the filter indexes, when not a delete
	delete bool
}

// pendingChange is a change held back until the informer reaches a revision.
type pendingChange[K any] struct {
	key     K
	json    []byte     // the new state; for a delete, the state put earlier in the batch, if any
	vals    [][]string // json's values in the filter indexes
	deleted bool
}

// logged is the size of one change kept in the history.
type logged struct {
	rev  int64
	size int64
}

// recordOverhead is what a change costs in the history besides its encoding.
const recordOverhead = 128

func (m *mirror[K, V]) OnAdd(obj V, _ bool)    { m.put(obj) }
func (m *mirror[K, V]) OnUpdate(_, obj V)      { m.put(obj) }
func (m *mirror[K, V]) OnDelete(obj V, _ bool) { m.delete(obj) }

// OnRevision implements informer.RevisionHandler: the changes held back make the
// upstream's state at rev; they are logged as one batch whose bound is rev.
func (m *mirror[K, V]) OnRevision(rev string) {
	if m.up == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ops := m.ops[:0]
	for _, c := range m.pending {
		old, present := m.tree.Get(c.key)
		switch {
		case !c.deleted && present && bytes.Equal(old.json, c.json):
		case !c.deleted:
			ops = append(ops, logOp[K]{r: &record[K]{key: c.key, json: c.json}, vals: c.vals})
		case present:
			ops = append(ops, logOp[K]{r: old, delete: true})
		case c.json != nil:
			// Created and deleted within the batch: a client at a revision inside it
			// may hold the object, so the batch says it went away.
			ops = append(ops, logOp[K]{r: &record[K]{key: c.key, json: c.json}, vals: c.vals}, logOp[K]{r: &record[K]{key: c.key, json: c.json}, delete: true})
		}
	}
	clear(m.pending)
	m.pending = m.pending[:0]
	clear(m.pendingAt)
	defer func() { clear(ops); m.ops = ops[:0] }()
	// The bound goes first, so that a watcher that reads the batch's changes finds it.
	seq := m.src.Revision() + int64(len(ops))
	moved := m.up.reached(seq, rev)
	// The filter indexes take the batch as one too: each value's last event of it is
	// labelled with the batch's end, before the log's head reaches it.
	if len(ops) > 0 {
		m.filters.beginBatch()
	}
	for i, o := range ops {
		r, ok := m.apply(o)
		if i == len(ops)-1 {
			m.filters.endBatch(seq)
		}
		if ok {
			m.logged(r, int64(len(o.r.json)))
		}
	}
	m.up.trim(m.src.CompactedRevision())
	m.up.settled()
	if moved && len(ops) == 0 {
		m.src.Bookmark() // the upstream moved on with no change here: tell the watchers
	}
}

// apply writes one change of a batch to the tree, the log and the filter indexes, and
// returns its log revision; false if it changed nothing (a delete of a key not served).
func (m *mirror[K, V]) apply(o logOp[K]) (int64, bool) {
	if o.delete {
		m.tree.Delete(o.r.key)
		r, ok := m.src.Delete(o.r.key)
		if ok {
			m.filters.delete(r, o.r.key, m.src.CompactedRevision())
		}
		return r, ok
	}
	m.tree.Set(o.r.key, o.r)
	r := m.src.Put(o.r)
	m.filters.put(r, o.r, o.vals, m.src.CompactedRevision())
	return r, true
}

// hold records a change until the next revision (ordered upstream), under mu.
func (m *mirror[K, V]) hold(k K, b []byte, vals [][]string, deleted bool) {
	if m.pendingAt == nil {
		m.pendingAt = make(map[K]int)
	}
	i, ok := m.pendingAt[k]
	if !ok {
		m.pendingAt[k] = len(m.pending)
		m.pending = append(m.pending, pendingChange[K]{key: k, json: b, vals: vals, deleted: deleted})
		return
	}
	c := &m.pending[i]
	if deleted {
		c.deleted = true // json keeps the state put earlier in the batch
		return
	}
	c.json, c.vals, c.deleted = b, vals, false
}

// put logs obj unless its encoding is the one already served (a relist of the informer
// re-delivers unchanged objects as updates; they are not passed on).
func (m *mirror[K, V]) put(obj V) {
	k, err := m.key(obj)
	if err != nil {
		m.stats.EncodeErrors.Add(1)
		m.report(fmt.Errorf("httpsource: server: key of an object: %w", err))
		return
	}
	b, err := m.encode(obj)
	if err == nil {
		b, err = wire.CompactJSON(b)
	}
	if err != nil {
		m.stats.EncodeErrors.Add(1)
		m.report(fmt.Errorf("httpsource: server: encoding object %v (not served; clients keep its previous state): %w", k, err))
		return
	}
	if len(b) > m.maxObject {
		m.stats.TooLarge.Add(1)
		m.report(fmt.Errorf("httpsource: server: object %v is %d bytes encoded, more than MaxObjectSize (%d): not served; clients keep its previous state", k, len(b), m.maxObject))
		return
	}
	vals := m.filters.values(k, obj)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.up != nil {
		m.hold(k, b, vals, false)
		return
	}
	if old, ok := m.tree.Get(k); ok && bytes.Equal(old.json, b) {
		return
	}
	r := &record[K]{key: k, json: b}
	rev := m.src.Put(r)
	m.tree.Set(k, r)
	m.logged(rev, int64(len(b)))
	m.filters.put(rev, r, vals, m.src.CompactedRevision())
}

func (m *mirror[K, V]) delete(obj V) {
	k, err := m.key(obj)
	if err != nil {
		m.stats.EncodeErrors.Add(1)
		m.report(fmt.Errorf("httpsource: server: key of a deleted object: %w", err))
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.up != nil {
		m.hold(k, nil, nil, true)
		return
	}
	old, ok := m.tree.Delete(k)
	if !ok {
		return
	}
	if rev, ok := m.src.Delete(k); ok {
		m.logged(rev, int64(len(old.json)))
		m.filters.delete(rev, k, m.src.CompactedRevision())
	}
}

// logged accounts for the change at rev and compacts the history down to historyBytes.
func (m *mirror[K, V]) logged(rev, size int64) {
	m.head.Store(rev)
	if m.historyBytes < 0 {
		return
	}
	compacted := m.src.CompactedRevision() // HistoryLimit's compaction
	for m.first < len(m.log) && m.log[m.first].rev <= compacted {
		m.held -= m.log[m.first].size
		m.first++
	}
	m.log = append(m.log, logged{rev: rev, size: size + recordOverhead})
	m.held += size + recordOverhead
	last := int64(-1)
	for m.held > m.historyBytes && len(m.log)-m.first > 1 {
		m.held -= m.log[m.first].size
		last = m.log[m.first].rev
		m.first++
	}
	if last > compacted {
		m.src.Compact(last)
	}
	if m.first > 1024 && m.first > len(m.log)/2 {
		m.log = m.log[:copy(m.log, m.log[m.first:])]
		m.first = 0
	}
}

// snapshot returns the current state and its log revision; the tree is a copy-on-write
// clone, O(1).
func (m *mirror[K, V]) snapshot() (*btree.Tree[K, *record[K]], int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tree.Clone(), m.head.Load()
}

// boundedWatches starts a watch with initial events (a streaming list) under the
// mirror's lock, so that its initial state is one the log has a revision for, never one
// in the middle of a batch being logged.
type boundedWatches[K cmp.Ordered] struct {
	*memory.Source[K, *record[K]]
	mu *sync.Mutex
}

func (b boundedWatches[K]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*record[K]], error) {
	if opts.SendInitialEvents {
		b.mu.Lock()
		defer b.mu.Unlock()
	}
	return b.Source.Watch(ctx, opts)
}

// offsetRevisions is a Server's own numbering, for an upstream whose revisions are not
// ordered: the log's revisions (0, 1, 2, …) are sent as <tag>.<n>, tag the server's start
// time in base 36, so that a revision of another numbering — another instance's, or an
// upstream's — is never taken for one of this server's.
type offsetRevisions struct {
	tag  string        // the server's start time in base 36
	head *atomic.Int64 // the log revision of the newest change
}

// parse returns the log revision of a wire revision; foreign reports a revision of
// another numbering.
func (o *offsetRevisions) parse(onWire string) (n int64, foreign bool, err error) {
	tag, num, ok := strings.Cut(onWire, ".")
	switch {
	case ok && tag == o.tag && wire.IsCanonicalInteger(num):
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("resourceVersion %q is not a revision of this server (%s.<n>)", onWire, o.tag)
		}
		return n, false, nil
	case wire.IsOwnRevision(onWire) || wire.IsCanonicalInteger(onWire):
		return 0, true, nil
	}
	return 0, false, fmt.Errorf("resourceVersion %q is not a revision of this server (%s.<n>)", onWire, o.tag)
}

func (o *offsetRevisions) watchRevision(onWire string) (string, error) {
	n, foreign, err := o.parse(onWire)
	if err != nil {
		return "", err
	}
	if foreign {
		return "", fmt.Errorf("resourceVersion %s is of another numbering than this server's (another instance, or the upstream's; this server's revisions are %s.<n>): %w", onWire, o.tag, informer.ErrExpired)
	}
	return strconv.FormatInt(n, 10), nil
}

func (o *offsetRevisions) listRevision(onWire string) (string, error) {
	n, foreign, err := o.parse(onWire)
	if err != nil || foreign {
		return "", err // another numbering: any state of this instance will do
	}
	return strconv.FormatInt(n, 10), nil
}

func (o *offsetRevisions) appendWire(dst []byte, rev string) ([]byte, bool) {
	var n int64
	for i := 0; i < len(rev); i++ {
		c := rev[i]
		if c < '0' || c > '9' || i > 18 {
			return append(dst, rev...), true // not a log revision; cannot happen
		}
		n = n*10 + int64(c-'0')
	}
	dst = append(dst, o.tag...)
	dst = append(dst, '.')
	return strconv.AppendInt(dst, n, 10), n >= o.head.Load()
}

func (o *offsetRevisions) continueToken(onWire string) (string, error) {
	return continueToken(o.tag, onWire)
}

func (o *offsetRevisions) appendContinue(dst []byte, tok string) []byte {
	return appendContinue(dst, o.tag, tok)
}

// list answers a list request from a snapshot of the state: a first page clones the
// state tree (O(1)); a paged list keeps its clone, under the client's name, for its later
// pages.
func (s *Server[K, V]) list(client string, req request) (page[*record[K]], error) {
	if req.cont != "" {
		return s.nextPage(client, req)
	}
	tree, rev := s.snapshot(req.filter)
	if req.rv != "" && req.rv != "0" {
		at, err := s.core.revs.listRevision(req.rv)
		if err != nil {
			return page[*record[K]]{}, &requestError{err}
		}
		if n, _ := strconv.ParseInt(at, 10, 64); at != "" && n > rev {
			return page[*record[K]]{}, &requestError{fmt.Errorf("resourceVersion %s is newer than the server's newest revision %s: %w", req.rv, s.onWire(rev), informer.ErrExpired)}
		}
	}
	pg := page[*record[K]]{rev: s.onWire(rev), stale: s.staleAt(rev)}
	if req.limit <= 0 || int64(tree.Len()) <= req.limit {
		pg.items = func(yield func(*record[K]) bool) { tree.Ascend(func(_ K, r *record[K]) bool { return yield(r) }) }
		return pg, nil
	}
	p := &pin[K]{tree: tree, rev: rev, client: client}
	items := p.take(req.limit)
	s.pins.add(p)
	pg.cont = s.token(p)
	pg.items = slices.Values(items)
	return pg, nil
}

// nextPage serves a later page of a paged list from its snapshot; a token of another
// replica, or of a snapshot this one dropped, is served from the state if it is at the
// token's upstream revision (portablePage).
func (s *Server[K, V]) nextPage(client string, req request) (page[*record[K]], error) {
	tok, err := s.core.revs.continueToken(req.cont)
	if err != nil {
		if pg, ok := s.portablePage(client, req); ok {
			return pg, nil
		}
		return page[*record[K]]{}, &requestError{err}
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 2 && len(parts) != 4 {
		return page[*record[K]]{}, &requestError{fmt.Errorf("malformed continue token %q", req.cont)}
	}
	id, err1 := strconv.ParseUint(parts[0], 36, 64)
	seq, err2 := strconv.ParseInt(parts[1], 36, 64)
	if err1 != nil || err2 != nil || seq < 1 {
		return page[*record[K]]{}, &requestError{fmt.Errorf("malformed continue token %q", req.cont)}
	}
	p, err := s.pins.get(id, s.src.CompactedRevision())
	if err != nil {
		if pg, ok := s.portablePage(client, req); ok {
			return pg, nil
		}
		return page[*record[K]]{}, &requestError{fmt.Errorf("continue token %q: %w", req.cont, err)}
	}
	limit := req.limit
	if limit <= 0 {
		limit = math.MaxInt64
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch seq {
	case p.seq: // the next page
	case p.seq - 1: // the last page again (the client retries it)
		p.after, p.started, p.seq = p.prevAfter, p.prevStarted, p.seq-1
	default:
		return page[*record[K]]{}, &requestError{fmt.Errorf("continue token %q is not the next page of its list: %w", req.cont, informer.ErrExpired)}
	}
	items := p.take(limit)
	pg := page[*record[K]]{rev: s.onWire(p.rev), items: slices.Values(items), stale: s.staleAt(p.rev)}
	if p.more {
		pg.cont = s.token(p)
	} else {
		s.pins.remove(p)
	}
	return pg, nil
}

// staleAt returns a check that the log revision rev has left the history.
func (s *Server[K, V]) staleAt(rev int64) func() bool {
	return func() bool { return rev < s.src.CompactedRevision() }
}

func (s *Server[K, V]) onWire(rev int64) string {
	b, _ := s.core.revs.appendWire(nil, strconv.FormatInt(rev, 10))
	return string(b)
}

// token is the continue token of p's next page: the server's tag, the list's id and the
// page's number; over an ordered upstream also the list's upstream revision and the last
// key served, so that a replica at that revision can serve the next page
// (portablePage).
func (s *Server[K, V]) token(p *pin[K]) string {
	b := strconv.AppendUint(nil, p.id, 36)
	b = append(b, '.')
	b = strconv.AppendInt(b, p.seq, 36)
	if key, err := json.Marshal(p.after); s.up != nil && p.started && err == nil {
		b = append(b, '.')
		b = base64.RawURLEncoding.AppendEncode(b, []byte(s.onWire(p.rev)))
		b = append(b, '.')
		b = base64.RawURLEncoding.AppendEncode(b, key)
	}
	return string(s.core.revs.appendContinue(nil, string(b)))
}

// portablePage serves the next page of a list another replica began (behind a
// round-robin balancer), or whose snapshot this one dropped: when the server's state is at
// the token's upstream revision, the page continues after the token's last key.
func (s *Server[K, V]) portablePage(client string, req request) (page[*record[K]], bool) {
	parts := strings.Split(req.cont, ".")
	if s.up == nil || len(parts) != 5 {
		return page[*record[K]]{}, false
	}
	onWire, err1 := base64.RawURLEncoding.DecodeString(parts[3])
	rawKey, err2 := base64.RawURLEncoding.DecodeString(parts[4])
	var after K
	if err1 != nil || err2 != nil || json.Unmarshal(rawKey, &after) != nil {
		return page[*record[K]]{}, false
	}
	tree, rev := s.snapshot(req.filter)
	if s.onWire(rev) != string(onWire) {
		return page[*record[K]]{}, false
	}
	p := &pin[K]{tree: tree, rev: rev, client: client, after: after, started: true, seq: 1}
	limit := req.limit
	if limit <= 0 {
		limit = math.MaxInt64
	}
	items := p.take(limit)
	pg := page[*record[K]]{rev: string(onWire), items: slices.Values(items), stale: s.staleAt(rev)}
	if p.more {
		s.pins.add(p)
		pg.cont = s.token(p)
	}
	return pg, true
}

// pin is the snapshot a paged list reads its later pages from.
type pin[K cmp.Ordered] struct {
	id     uint64
	client string
	tree   *btree.Tree[K, *record[K]]
	rev    int64

	mu          sync.Mutex
	seq         int64 // the number of the next page
	after       K     // the last key served
	started     bool  // a page was served (after is set)
	prevAfter   K     // after and started before the last page, to serve it again
	prevStarted bool
	more        bool // keys remain after after
}

// take returns the next limit records of the list and advances it.
func (p *pin[K]) take(limit int64) []*record[K] {
	items := make([]*record[K], 0, min(limit, int64(p.tree.Len()), 4096))
	p.more = false
	visit := func(_ K, r *record[K]) bool {
		if int64(len(items)) == limit {
			p.more = true
			return false
		}
		items = append(items, r)
		return true
	}
	if p.started {
		p.tree.AscendAfter(p.after, visit)
	} else {
		p.tree.Ascend(visit)
	}
	p.prevAfter, p.prevStarted = p.after, p.started
	if len(items) > 0 {
		p.after, p.started = items[len(items)-1].key, true
	}
	p.seq++
	return items
}

// pinTable holds the snapshots of paged lists, per client.
type pinTable[K cmp.Ordered] struct {
	limit, perClient int

	mu       sync.Mutex
	lastID   uint64
	byID     map[uint64]*pin[K]
	byClient map[string][]*pin[K] // oldest first
}

// add keeps p; the client's own oldest goes if it holds perClient, else the oldest of the
// client holding the most if the table holds limit.
func (t *pinTable[K]) add(p *pin[K]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastID++
	p.id = t.lastID
	if own := t.byClient[p.client]; len(own) >= t.perClient {
		t.removeLocked(own[0])
	}
	if len(t.byID) >= t.limit {
		var most []*pin[K]
		for _, ps := range t.byClient {
			if len(ps) > len(most) || (len(ps) == len(most) && ps[0].id < most[0].id) {
				most = ps
			}
		}
		t.removeLocked(most[0])
	}
	t.byID[p.id] = p
	t.byClient[p.client] = append(t.byClient[p.client], p)
}

// get returns the snapshot of list id, unless it is gone or its revision has left the
// history (then the error matches informer.ErrExpired).
func (t *pinTable[K]) get(id uint64, compacted int64) (*pin[K], error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.byID[id]
	switch {
	case p == nil:
		return nil, fmt.Errorf("the list is finished, or its snapshot was dropped (too many paged lists in progress): %w", informer.ErrExpired)
	case p.rev < compacted:
		t.removeLocked(p)
		return nil, fmt.Errorf("the list's revision has left the server's history: %w", informer.ErrExpired)
	}
	return p, nil
}

func (t *pinTable[K]) remove(p *pin[K]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(p)
}

func (t *pinTable[K]) removeLocked(p *pin[K]) {
	if t.byID[p.id] != p {
		return
	}
	delete(t.byID, p.id)
	own := slices.DeleteFunc(t.byClient[p.client], func(q *pin[K]) bool { return q == p })
	if len(own) == 0 {
		delete(t.byClient, p.client)
	} else {
		t.byClient[p.client] = own
	}
}
