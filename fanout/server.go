package fanout

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/eventlog"
	"github.com/informer-go/informer/internal/wire"
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
	// Clock times bookmarks, watch timeouts and the interval of the Warn lines of failures
	// with no ErrorHandler; nil means clock.Real{}.
	Clock clock.Clock
	// Filters names the informer's indexes (informer.Options.Indexers, or AddIndexers
	// before NewServer) a client may filter by (Filter: index=<name>&value=<v>); see
	// httpsource.Filter and the package documentation. The server indexes each change
	// with the informer's own index function (informer.Index.Values), so its filters and
	// the informer's ByIndex agree while the functions are pure. A name the informer has
	// no index of fails NewServer. Nil means none: a filtered request is answered 400.
	Filters []string
	// CatchUpWait is how long a request for a revision the server has not reached yet
	// waits for it (a client that comes from a replica further ahead; see Server) before
	// it is answered 410, so that the client lists again rather than retry for good a
	// revision that may never come here. It applies when the informer's source has
	// ordered revisions. 0 means DefaultCatchUpWait; negative means no wait.
	CatchUpWait time.Duration
}

// Server serves an informer's collection over HTTP in the protocol httpsource.Client
// speaks (the Kubernetes JSON list+watch shapes; see package httpsource), so that many
// processes can mirror one source through one upstream watch: the fan-out tier.
//
// It registers a handler on the informer that copies every change, encoded once, into an
// in-memory revisioned log (the one source/memory is built on) with a bounded history,
// and serves from that log: lists are consistent, paginated snapshots with continue tokens; watches resume from
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
// page's continue token is answered 410, a streaming list is sent an ERROR event (410),
// or has its connection closed if a write waits for its reader — and counted in
// Stats.Evicted, however fast its reader reads, within half a second of a stalled one. So all lists in progress
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
// 5 s), which a replica that keeps up with its upstream never uses up; then it answers
// 410 and the client lists again, for the revision may never come here (a revision of
// another upstream, or of before a restore from a backup). To a client that asks
// (httpsource.HistoryHeader) every revision goes with the tag of its history, a
// fingerprint of the state it names, which a watch resumed from a state the server held
// must match: see the package documentation.
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
	h          *handler[*record[K]]
	gate       *gate
	src        *eventlog.Log[K, *record[K]]
	mirror     *mirror[K, V]
	inf        *informer.Informer[K, V]
	reg        *informer.Registration
	up         *upstreamRevisions // the upstream's revisions: the informer's source is ordered
	b          *logBackend[K, V]
	synced     chan struct{} // closed by waitSynced, started by the first Synced
	syncedOnce sync.Once
}

// NewServer returns a server of inf's collection, keyed as inf keys it (inf.Key). The
// server's handler is added to inf at once; the informer may already be running. Call
// Shutdown to remove it.
func NewServer[K cmp.Ordered, V any](inf *informer.Informer[K, V], opts ServerOptions[V]) (*Server[K, V], error) {
	if inf == nil {
		return nil, errors.New("fanout: NewServer: nil informer")
	}
	lim, err := opts.limits()
	if err != nil {
		return nil, err
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	g := newGate(opts.ServeOptions)
	rep := newReporter(opts.ServeOptions, fmt.Sprintf("fanout: server for informer %q", inf.Name()), opts.Clock)
	log := eventlog.New[K, *record[K]](eventlog.Options{
		Name:             "fanout: server log",
		Clock:            opts.Clock,
		BookmarkInterval: lim.bookmarks,
		StreamingList:    true,
		HistoryLimit:     lim.history,
	})
	// The revisions served: the upstream's when the informer's source orders them, else
	// the server's own, <tag>.<n>.
	var head atomic.Int64
	var revs revisionMap
	var up *upstreamRevisions
	if order := inf.RevisionComparer(); order != nil {
		up = newUpstreamRevisions(order, tag, &head, cmp.Or(opts.CatchUpWait, DefaultCatchUpWait))
		revs = up
	} else {
		revs = newOffsetRevisions(tag, &head)
	}
	filters, err := newFilterHub(inf, opts.Filters, opts.Clock, lim.bookmarks, g.Stats(), rep)
	if err != nil {
		return nil, err
	}
	m := newMirror(log, inf.Key, lim.encode, lim.maxObject, lim.historyBytes, &head, up, filters, g.Stats(), rep)
	var s *Server[K, V]
	b := newLogBackend(log, m, filters, revs, up, opts,
		policy{replayOnEmpty: true, batchInitial: up != nil, plainIsBad: true, bookmarks: lim.bookmarks, instance: tag},
		func() bool { return s.HasSynced() })
	reg, err := inf.AddHandler(m, informer.HandlerOptions{
		Name:         "fanout.Server",
		ResyncPeriod: -1, // resyncs carry nothing new
		QueueLength:  opts.QueueLength,
	})
	if err != nil {
		return nil, fmt.Errorf("fanout: NewServer: %w", err)
	}
	s = &Server[K, V]{
		h: newHandler(b, g, rep, opts.ServeOptions), gate: g,
		src: log, mirror: m, inf: inf, reg: reg, up: up,
		b:      b,
		synced: make(chan struct{}),
	}
	return s, nil
}

// serverLimits are ServerOptions with their defaults applied.
type serverLimits[V any] struct {
	history      int
	bookmarks    time.Duration // 0: none
	maxObject    int
	historyBytes int64
	encode       func(V) ([]byte, error)
}

// limits applies the defaults of the options that size the server's log.
func (o ServerOptions[V]) limits() (serverLimits[V], error) {
	l := serverLimits[V]{history: o.HistoryLimit, bookmarks: o.BookmarkInterval, maxObject: o.MaxObjectSize, historyBytes: o.HistoryBytes, encode: o.Encode}
	switch {
	case l.history == 0:
		l.history = DefaultHistoryLimit
	case l.history < 0:
		return l, fmt.Errorf("fanout: NewServer: negative HistoryLimit %d", l.history)
	}
	switch {
	case l.bookmarks == 0:
		l.bookmarks = DefaultBookmarkInterval
	case l.bookmarks < 0:
		l.bookmarks = 0
	}
	if l.maxObject <= 0 {
		l.maxObject = DefaultMaxObjectSize
	}
	if l.historyBytes == 0 {
		l.historyBytes = DefaultHistoryBytes
	}
	if l.encode == nil {
		l.encode = func(v V) ([]byte, error) { return json.Marshal(v) }
	}
	return l, nil
}

// waitSynced closes s.synced once the server serves: its handler has the informer's
// initial state and, for an ordered upstream, the revision of a state it holds.
func (s *Server[K, V]) waitSynced() {
	select {
	case <-s.reg.Synced():
	case <-s.gate.Stopped():
		return
	}
	if s.up != nil {
		select {
		case <-s.up.Ready():
		case <-s.gate.Stopped():
			return
		}
	}
	close(s.synced)
}

// ServeHTTP implements http.Handler. Mount it at the collection's URL; it answers GET
// only. See package httpsource for the requests and answers.
func (s *Server[K, V]) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

// Shutdown stops serving: new requests are answered 503; every open watch ends cleanly,
// as when its timeout passes, after the events already read are sent (clients reconnect
// and get 503 or, once the http.Server is closed, a refused connection, and retry); the
// server's handler is removed from the informer. It waits until every request handler
// has returned, or ctx is done (then it returns ctx.Err(); a watcher stuck writing to a
// client that does not read returns within WriteTimeout). Call it before
// http.Server.Shutdown, which does not end streaming responses. Calling it again only
// waits again.
func (s *Server[K, V]) Shutdown(ctx context.Context) error {
	err := s.h.Shutdown(ctx)
	s.inf.RemoveHandler(s.reg)
	return err
}

// Stats returns the server's counters, read now.
func (s *Server[K, V]) Stats() ServeStats { return s.gate.Stats().Read() }

// Revision returns the revision of the state the server serves: the upstream's revision
// its informer's cache has reached, for an ordered upstream ("" before the first);
// otherwise the server's own revision of its newest change, <tag>.<n>.
func (s *Server[K, V]) Revision() string {
	return s.b.Revision()
}

// HasSynced reports whether the server holds the informer's initial state and serves:
// its handler has that state and, for an ordered upstream, the revision of a state it
// holds.
func (s *Server[K, V]) HasSynced() bool {
	select {
	case <-s.reg.Synced():
	default:
		return false
	}
	return s.up == nil || s.up.IsReady()
}

// Synced returns a channel closed once HasSynced is true. The first call starts a
// goroutine that waits for it, until then or Shutdown.
func (s *Server[K, V]) Synced() <-chan struct{} {
	s.syncedOnce.Do(func() { go s.waitSynced() })
	return s.synced
}
