package httpsource

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/source/memory"
)

// Defaults of ServerOptions.
const (
	// DefaultHistoryLimit is the number of changes a Server keeps for watchers to resume
	// from when ServerOptions.HistoryLimit is 0.
	DefaultHistoryLimit = 10000
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
	// HistoryLimit is how many changes the server keeps. A watcher may resume from any
	// revision within them; an older revision is answered 410 and the client lists again.
	// A watcher whose next change has dropped out of the history while it was behind is
	// sent an ERROR event (410) and disconnected. 0 means DefaultHistoryLimit; it must not
	// be negative.
	HistoryLimit int
	// BookmarkInterval is how often an idle watcher that asked for bookmarks
	// (allowWatchBookmarks=true) is sent one at the newest revision, so that it can
	// resume from there. 0 means DefaultBookmarkInterval; negative means no bookmarks.
	BookmarkInterval time.Duration
	// QueueLength is the length of the queue of the handler the server registers on the
	// informer (informer.HandlerOptions.QueueLength); the handler coalesces per key when it
	// is full, so the server never slows the informer. 0 means the informer's default.
	QueueLength int
	// Clock times bookmarks and watch timeouts; nil means clock.Real{}.
	Clock clock.Clock
}

// Server serves an informer's collection over HTTP in the protocol Client speaks (the
// Kubernetes JSON list+watch shapes; see the package documentation), so that many
// processes can mirror one source through one upstream watch: the fan-out tier.
//
// It registers a handler on the informer that copies every change, encoded once, into an
// in-memory revisioned log (source/memory) with a bounded history, and serves from that
// log: lists are consistent, paginated snapshots with continue tokens; watches resume from
// any revision within the history. Every watcher reads the one shared log, so a watcher
// costs a goroutine, a connection and a 32 KiB write buffer, whatever the rate of changes;
// the memory of the server is the state plus HistoryLimit encoded changes. Encoding is done
// once per change, not once per watcher.
//
// Revisions are the server's own: decimal integers starting at the Unix time in
// nanoseconds when the server was created and growing by one per change, so that they are
// ordered (use Client.Ordered) and a revision from an earlier instance of the server is
// older than every revision of a later one, and answered 410. Two servers running at once
// have unrelated revisions: a client must keep talking to one of them.
//
// A Server answers 503 until its handler has received the informer's initial state. It
// keeps serving its last state if the informer stops. A Delete event carries the last
// state the server served for the object.
type Server[K cmp.Ordered, V any] struct {
	core   core[*record[K]]
	src    *memory.Source[K, *record[K]]
	inf    *informer.Informer[K, V]
	reg    *informer.Registration
	revs   *offsetRevisions
	mirror *mirror[K, V]
}

// record is what the server's log holds for an object: its key and its encoded form.
type record[K any] struct {
	key  K
	json []byte
}

// NewServer returns a server of inf's collection. key must return the key the informer
// uses (informer.Options.Key). The server's handler is added to inf at once; the informer
// may already be running. Call Shutdown to remove it.
func NewServer[K cmp.Ordered, V any](inf *informer.Informer[K, V], key informer.KeyFunc[K, V], opts ServerOptions[V]) (*Server[K, V], error) {
	if inf == nil {
		return nil, errors.New("httpsource: NewServer: nil informer")
	}
	if key == nil {
		return nil, errors.New("httpsource: NewServer: nil key function")
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
	encode := opts.Encode
	if encode == nil {
		encode = func(v V) ([]byte, error) { return json.Marshal(v) }
	}
	base := time.Now().UnixNano()
	s := &Server[K, V]{
		inf: inf,
		src: memory.New(func(r *record[K]) K { return r.key }, memory.Options{
			Clock:            opts.Clock,
			BookmarkInterval: bookmarks,
			StreamingList:    true,
			HistoryLimit:     history,
		}),
		revs: &offsetRevisions{base: base, tag: strconv.FormatInt(base, 36)},
	}
	s.mirror = &mirror[K, V]{src: s.src, key: key, encode: encode, head: &s.revs.head, report: func(err error) {
		s.core.stats.EncodeErrors.Add(1)
		s.core.report(err)
	}}
	s.core.lw = s.src
	s.core.appendObject = func(dst []byte, r *record[K]) ([]byte, error) { return append(dst, r.json...), nil }
	s.core.revs = s.revs
	s.core.replayOnEmpty = true
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
	s.core.ready = reg.HasSynced
	return s, nil
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

// Revision returns the revision of the newest change the server holds (its value before
// any change is the server's base revision).
func (s *Server[K, V]) Revision() string {
	return strconv.FormatInt(s.revs.base+s.revs.head.Load(), 10)
}

// HasSynced reports whether the server holds the informer's initial state and serves.
func (s *Server[K, V]) HasSynced() bool { return s.reg.HasSynced() }

// Synced returns a channel closed once HasSynced is true.
func (s *Server[K, V]) Synced() <-chan struct{} { return s.reg.Synced() }

// mirror is the informer handler that copies changes into the server's log.
type mirror[K cmp.Ordered, V any] struct {
	src    *memory.Source[K, *record[K]]
	key    informer.KeyFunc[K, V]
	encode func(V) ([]byte, error)
	head   *atomic.Int64 // the log revision of the newest change
	report func(error)
}

func (m *mirror[K, V]) OnAdd(obj V, _ bool)    { m.put(obj) }
func (m *mirror[K, V]) OnUpdate(_, obj V)      { m.put(obj) }
func (m *mirror[K, V]) OnDelete(obj V, _ bool) { m.delete(obj) }

// put logs obj unless its encoding is the one already served (a relist of the informer
// re-delivers unchanged objects as updates; they are not passed on).
func (m *mirror[K, V]) put(obj V) {
	k, err := m.key(obj)
	if err != nil {
		m.report(fmt.Errorf("httpsource: server: key of an object: %w", err))
		return
	}
	b, err := m.encode(obj)
	if err == nil {
		b, err = compactJSON(b)
	}
	if err != nil {
		m.report(fmt.Errorf("httpsource: server: encoding object %v (not served; clients keep its previous state): %w", k, err))
		return
	}
	if old, ok := m.src.Get(k); ok && bytes.Equal(old.json, b) {
		return
	}
	m.head.Store(m.src.Put(&record[K]{key: k, json: b}))
}

func (m *mirror[K, V]) delete(obj V) {
	k, err := m.key(obj)
	if err != nil {
		m.report(fmt.Errorf("httpsource: server: key of a deleted object: %w", err))
		return
	}
	if rev, ok := m.src.Delete(k); ok {
		m.head.Store(rev)
	}
}

// offsetRevisions maps the log's revisions (0, 1, 2, …) to the wire (base, base+1, …).
type offsetRevisions struct {
	base int64
	tag  string       // base in base 36: the prefix of continue tokens
	head atomic.Int64 // the log revision of the newest change
}

func (o *offsetRevisions) parse(wire string) (int64, error) {
	n, err := strconv.ParseInt(wire, 10, 64)
	if err != nil || !isCanonicalInteger(wire) {
		return 0, fmt.Errorf("resourceVersion %q is not a revision of this server (a decimal integer)", wire)
	}
	return n, nil
}

func (o *offsetRevisions) watchRevision(wire string) (string, error) {
	n, err := o.parse(wire)
	if err != nil {
		return "", err
	}
	if n < o.base {
		return "", fmt.Errorf("resourceVersion %s is older than this server instance (its first revision is %d): %w", wire, o.base, informer.ErrExpired)
	}
	return strconv.FormatInt(n-o.base, 10), nil
}

func (o *offsetRevisions) listRevision(wire string) (string, error) {
	n, err := o.parse(wire)
	if err != nil {
		return "", err
	}
	if n < o.base {
		return "", nil // any state of this instance is newer
	}
	return strconv.FormatInt(n-o.base, 10), nil
}

func (o *offsetRevisions) appendWire(dst []byte, rev string) ([]byte, bool) {
	var n int64
	for i := 0; i < len(rev); i++ {
		c := rev[i]
		if !isDigit(c) || i > 18 {
			return append(dst, rev...), true // not a log revision; cannot happen
		}
		n = n*10 + int64(c-'0')
	}
	return strconv.AppendInt(dst, o.base+n, 10), n >= o.head.Load()
}

func (o *offsetRevisions) continueToken(wire string) (string, error) {
	tag, tok, ok := strings.Cut(wire, ".")
	if !ok || tok == "" {
		return "", fmt.Errorf("malformed continue token %q", wire)
	}
	if tag != o.tag {
		return "", fmt.Errorf("continue token %q is from another instance of this server: %w", wire, informer.ErrExpired)
	}
	return tok, nil
}

func (o *offsetRevisions) appendContinue(dst []byte, tok string) []byte {
	dst = append(dst, o.tag...)
	dst = append(dst, '.')
	return append(dst, tok...)
}
