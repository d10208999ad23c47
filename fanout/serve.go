package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// Defaults of ServeOptions.
const (
	// DefaultMaxWatchers is the limit on concurrent watches when ServeOptions.MaxWatchers
	// is 0.
	DefaultMaxWatchers = 10000
	// DefaultMaxWatchersPerClient is the limit on one client's concurrent watches when
	// ServeOptions.MaxWatchersPerClient is 0.
	DefaultMaxWatchersPerClient = 1000
	// DefaultMaxLists is the limit on list responses in progress at once when
	// ServeOptions.MaxLists is 0.
	DefaultMaxLists = 64
	// DefaultMaxListsPerClient is the limit on one client's list responses in progress at
	// once when ServeOptions.MaxListsPerClient is 0.
	DefaultMaxListsPerClient = 8
	// DefaultMaxWatchDuration bounds how long one watch is served when
	// ServeOptions.MaxWatchDuration is 0.
	DefaultMaxWatchDuration = 30 * time.Minute
	// DefaultWriteTimeout is how long a response may go without a completed write when
	// ServeOptions.WriteTimeout is 0.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultSendBuffer caps the kernel send buffer of a connection that carries a watch or
	// a list when ServeOptions.SendBuffer is 0 (it takes effect only with ConnContext).
	DefaultSendBuffer = 256 << 10
	// DefaultRetryAfter is the Retry-After of 429 and 503 answers when
	// ServeOptions.RetryAfter is 0.
	DefaultRetryAfter = time.Second
)

// ServeOptions are the options Server and Handler share. Every zero value is a documented
// default.
type ServeOptions struct {
	// Authorize is called first on every request. A nil error lets the request through; an
	// error matching ErrUnauthorized is answered 401 (with a WWW-Authenticate header), any
	// other error 403, each with a Status body. The body says only "unauthorized" or
	// "forbidden": the error's own text goes to the debug log, never to the caller, unless
	// the error was made with ClientMessage, whose message is shown. Nil lets every request
	// through. The caller is identified by its remote IP address (an IPv6 address by its
	// /64) for the per-client limits; use AuthorizeClient to name it.
	Authorize func(*http.Request) error
	// AuthorizeClient is Authorize that also names the caller: the identity its per-client
	// limits (MaxWatchersPerClient, MaxListsPerClient, a Server's paged-list snapshots) are
	// counted under. An empty name means the remote IP address (an IPv6 address's /64).
	// When set, Authorize is not called. Set it on a server open to untrusted networks:
	// source addresses are cheap (an IPv6 host has a /64, a botnet many hosts), so
	// limits per address bound an attacker only as far as its addresses do.
	AuthorizeClient func(*http.Request) (client string, err error)
	// Challenge is the WWW-Authenticate header of a 401 answer. Empty means "Bearer".
	Challenge string
	// MaxWatchers bounds the watches open at once; a watch beyond it is answered 429 with
	// a Retry-After header, which a Client turns into a wait before it watches again
	// (without a relist). 0 means DefaultMaxWatchers; negative means no limit.
	MaxWatchers int
	// MaxWatchersPerClient bounds the watches one client (see AuthorizeClient) has open at
	// once, so that one client cannot take every slot of MaxWatchers: beyond it the client
	// is answered 429 while others are still served. 0 means DefaultMaxWatchersPerClient;
	// negative means no limit.
	MaxWatchersPerClient int
	// MaxLists bounds the list responses in progress at once (a list holds its page, or a
	// Server's snapshot, until the client has read it); a list beyond it is answered 429
	// with a Retry-After header. 0 means DefaultMaxLists; negative means no limit.
	MaxLists int
	// MaxListsPerClient bounds one client's list responses in progress at once; beyond it
	// that client is answered 429. 0 means DefaultMaxListsPerClient; negative means no limit.
	MaxListsPerClient int
	// MaxWatchDuration bounds how long a watch is served, whatever timeoutSeconds asked:
	// each watch ends cleanly (as at its timeout; the client watches again from where it
	// was, and is authorized again) after a random duration between half of it and all of
	// it, so that reconnections spread out and a revoked credential stops receiving within
	// it. 0 means DefaultMaxWatchDuration; negative means no bound.
	MaxWatchDuration time.Duration
	// WriteTimeout is how long a response (a watch, or a list being sent) may wait for its
	// client without progress. Progress is a completed write or, with ConnContext
	// installed (on Linux), any change of the connection's kernel send queue, that is any
	// data the client's TCP stack accepted: a client that reads, however slowly, keeps
	// its connection; one that reads nothing for WriteTimeout is disconnected — reset
	// (with ConnContext), so that the kernel drops its unsent data at once — counted in
	// Stats.Evicted and reported to ErrorHandler. A watcher that falls further behind
	// than the history is sent an ERROR event (410) and disconnected, however fast it
	// reads. 0 means DefaultWriteTimeout; negative means no timeout, which lets a stalled
	// client hold its goroutine until it goes away.
	WriteTimeout time.Duration
	// SendBuffer caps the kernel send buffer (SO_SNDBUF) of a connection when it serves a
	// watch or a list, so that a stalled client holds little kernel memory and a slow one
	// shows its progress often. It needs ConnContext installed on the http.Server. 0 means
	// DefaultSendBuffer; negative leaves the kernel's own sizing.
	SendBuffer int
	// RetryAfter is the delay advertised by 429 (too many watchers or lists) and 503 (not
	// synced yet, shutting down) answers, rounded up to whole seconds. 0 means
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// Logger receives debug logs of failures; nil means slog.Default().
	Logger *slog.Logger
	// ErrorHandler receives failures the server cannot send to anyone: objects that fail to
	// encode or are too large, events of an unknown type from the source, clients
	// disconnected because they stalled (WriteTimeout). It must not block. Nil means they
	// are only logged.
	ErrorHandler func(error)
}

// The errors an Authorize function returns to choose the status of a refusal. Wrap them
// to add detail: fmt.Errorf("token expired: %w", httpsource.ErrUnauthorized).
var (
	// ErrUnauthorized refuses a request that is not authenticated: 401 Unauthorized.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden refuses an authenticated request that is not allowed: 403 Forbidden. Any
	// error from Authorize that does not match ErrUnauthorized is treated the same way.
	ErrForbidden = errors.New("forbidden")
)

// ClientMessage returns an error for Authorize to return that refuses the request as err
// does (ErrUnauthorized: 401, anything else: 403) and shows the caller message in the
// answer; the text of any other error from Authorize is never shown to the caller.
func ClientMessage(err error, message string) error {
	return &clientMessage{err: err, message: message}
}

type clientMessage struct {
	err     error
	message string
}

func (e *clientMessage) Error() string { return e.message + ": " + e.err.Error() }
func (e *clientMessage) Unwrap() error { return e.err }

// Stats are the counters of a Server or Handler, updated atomically; read them at any
// time.
type Stats struct {
	Lists         atomic.Uint64 // list requests served (200)
	Watches       atomic.Uint64 // watches started (200)
	OpenWatches   atomic.Int64  // watches open now
	Rejected      atomic.Uint64 // watches refused by MaxWatchers or MaxWatchersPerClient (429)
	ListsRejected atomic.Uint64 // lists refused by MaxLists or MaxListsPerClient (429)
	Evicted       atomic.Uint64 // clients disconnected: a watcher fell behind the history (ERROR 410) or a watcher or list reader stalled (WriteTimeout)
	BadRequests   atomic.Uint64 // requests refused with 400, 405 or 406
	Denied        atomic.Uint64 // requests refused by Authorize (401, 403)
	EncodeErrors  atomic.Uint64 // objects that could not be encoded
	TooLarge      atomic.Uint64 // objects refused because their encoding is longer than MaxObjectSize (Server)
	IndexErrors   atomic.Uint64 // objects a filter index function failed or panicked on (Server: the object leaves that index's filters)
}

// watchBufferSize is the size of a watcher's write buffer: frames are assembled there and
// written when it fills or the watcher has caught up with the source. An idle watcher
// holds none: buffers are pooled.
const watchBufferSize = 32 << 10

// maxTimeoutSeconds bounds timeoutSeconds (about 68 years).
const maxTimeoutSeconds = 1<<31 - 1

// revisionMap translates revisions and continue tokens between the wire and the source
// a core serves.
type revisionMap interface {
	// watchRevision translates the resourceVersion of a watch request (never "" or "0").
	// An error matching informer.ErrExpired is answered 410; any other error 400.
	watchRevision(onWire string) (string, error)
	// listRevision translates the resourceVersion of a list request (never "" or "0");
	// "" means any state will do. Errors as for watchRevision.
	listRevision(onWire string) (string, error)
	// appendWire appends the wire form of a source revision, unquoted, and reports whether
	// it is the newest revision the source has (so that buffered frames should be sent).
	appendWire(dst []byte, rev string) ([]byte, bool)
	// continueToken translates a continue token of a request; errors as for watchRevision.
	continueToken(onWire string) (string, error)
	// appendContinue appends the wire form of a source continue token, unquoted.
	appendContinue(dst []byte, tok string) []byte
}

// core serves a ListerWatcher in the protocol; Server and Handler are thin layers on it.
type core[V any] struct {
	lw           informer.ListerWatcher[V]
	appendObject func(dst []byte, v V) ([]byte, error)
	revs         revisionMap
	ready        func() bool // nil: always ready
	// list, when set, answers list requests instead of lw.List (a Server's snapshots).
	list func(client string, req request) (page[V], error)
	// replayOnEmpty makes a watch without resourceVersion (or "0") start with the current
	// state, as Kubernetes does; it needs a source that supports SendInitialEvents.
	replayOnEmpty bool
	// batchInitial sends the initial events of a watch (a replay, or sendInitialEvents) as
	// one batch: every event but the last carries the partial mark (a Server over an
	// ordered upstream, whose initial events all carry the state's revision).
	batchInitial bool
	// plainIsBad answers a plain (unclassified) error from the source with 400 rather
	// than 500: the source is known to fail only on malformed input.
	plainIsBad bool
	// filters serves filtered lists and watches (a Server's filter indexes); nil: none.
	filters filterer[V]
	// bookmarks is the interval of the source's bookmarks to an idle watcher that asked
	// for them, told to the client in a header; 0: not known (a Handler), not told.
	bookmarks time.Duration
	// await, when set, is called with the resourceVersion of a watch or a list (not ""
	// or "0") before it is served: it waits, bounded, until the source has reached it
	// (a Server replica behind its client), or returns an error for answerRequestError.
	await func(ctx context.Context, rev string) error
	// instance, when set, is sent in wire.HeaderInstance with every response (a Server's).
	instance string

	authorize         func(*http.Request) (string, error)
	challenge         string
	maxWatchers       int
	maxClientWatchers int
	maxLists          int
	maxClientLists    int
	maxWatchDuration  time.Duration
	writeTimeout      time.Duration
	sendBuffer        int
	retryAfter        time.Duration
	logger            *slog.Logger
	errorHandler      func(error)
	stats             Stats

	mu       sync.Mutex
	closed   bool
	watchers slots
	lists    slots
	requests sync.WaitGroup
	stopCtx  context.Context
	stop     context.CancelFunc
}

// page is one list response: the wire revision and continue token, and the items.
type page[V any] struct {
	rev   string
	cont  string // "" on the last page
	items iter.Seq[V]
	// stale, when set, reports that the page's revision has left the history: the list
	// is cut, so that a slow reader does not pin an old state.
	stale func() bool
}

// slots counts requests in progress, in all and per client, under core.mu.
type slots struct {
	total     int
	perClient map[string]int
}

// take reserves a slot for client unless a limit (negative: none) is reached; it reports
// which limit refused it.
func (s *slots) take(client string, limit, clientLimit int) (ok bool, which string) {
	switch {
	case limit > 0 && s.total >= limit:
		return false, fmt.Sprintf("the server's limit is %d", limit)
	case clientLimit > 0 && s.perClient[client] >= clientLimit:
		return false, fmt.Sprintf("the limit per client is %d", clientLimit)
	}
	if s.perClient == nil {
		s.perClient = make(map[string]int)
	}
	s.total++
	s.perClient[client]++
	return true, ""
}

func (s *slots) release(client string) {
	s.total--
	if n := s.perClient[client] - 1; n > 0 {
		s.perClient[client] = n
	} else {
		delete(s.perClient, client)
	}
}

func (c *core[V]) init(o ServeOptions) {
	c.authorize = o.AuthorizeClient
	if c.authorize == nil && o.Authorize != nil {
		c.authorize = func(r *http.Request) (string, error) { return "", o.Authorize(r) }
	}
	c.challenge = cmp.Or(o.Challenge, "Bearer")
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	c.maxWatchers = def(o.MaxWatchers, DefaultMaxWatchers)
	c.maxClientWatchers = def(o.MaxWatchersPerClient, DefaultMaxWatchersPerClient)
	c.maxLists = def(o.MaxLists, DefaultMaxLists)
	c.maxClientLists = def(o.MaxListsPerClient, DefaultMaxListsPerClient)
	c.sendBuffer = def(o.SendBuffer, DefaultSendBuffer)
	c.maxWatchDuration = cmp.Or(o.MaxWatchDuration, DefaultMaxWatchDuration)
	c.writeTimeout = cmp.Or(o.WriteTimeout, DefaultWriteTimeout)
	c.retryAfter = o.RetryAfter
	if c.retryAfter <= 0 {
		c.retryAfter = DefaultRetryAfter
	}
	c.logger = o.Logger
	if c.logger == nil {
		c.logger = slog.Default()
	}
	c.errorHandler = o.ErrorHandler
	c.stopCtx, c.stop = context.WithCancel(context.Background())
}

// report hands a failure nobody else will see to the error handler and the log.
func (c *core[V]) report(err error) {
	c.logger.Debug("httpsource: serve error", "err", err)
	if c.errorHandler != nil {
		c.errorHandler(err)
	}
}

// request is a validated query.
type request struct {
	watch     bool
	rv        string // "" when absent
	limit     int64
	cont      string
	timeout   time.Duration
	bookmarks bool
	initial   bool
	sse       bool
	filter    valueFilter // index= and value=; zero for none
}

// knownParams are the query parameters the protocol defines; any other is refused.
var knownParams = map[string]bool{
	wire.ParamWatch: true, wire.ParamResourceVersion: true, wire.ParamRVMatch: true, wire.ParamLimit: true,
	wire.ParamContinue: true, wire.ParamTimeoutSeconds: true, wire.ParamAllowBookmarks: true,
	wire.ParamSendInitialEvents: true, wire.ParamIndex: true, wire.ParamValue: true,
}

// parseRequest validates every query parameter and the Accept header.
func parseRequest(r *http.Request) (request, *wire.Status) {
	var req request
	bad := func(format string, args ...any) (request, *wire.Status) {
		return request{}, &wire.Status{Code: http.StatusBadRequest, Reason: "BadRequest", Message: fmt.Sprintf(format, args...)}
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return bad("malformed query: %v", err)
	}
	for k, vs := range q {
		if !knownParams[k] {
			return bad("unknown query parameter %q (known: watch, resourceVersion, resourceVersionMatch, limit, continue, timeoutSeconds, allowWatchBookmarks, sendInitialEvents, index, value)", k)
		}
		if len(vs) != 1 {
			return bad("query parameter %q given %d times", k, len(vs))
		}
	}
	boolean := func(k string) (bool, bool) {
		v, ok := q[k]
		if !ok {
			return false, true
		}
		b, err := strconv.ParseBool(v[0])
		return b, err == nil
	}
	f, se := parseFilter(q)
	if se != nil {
		return request{}, se
	}
	req.filter = f
	var ok bool
	if req.watch, ok = boolean(wire.ParamWatch); !ok {
		return bad("%s=%q is not a boolean", wire.ParamWatch, q.Get(wire.ParamWatch))
	}
	if req.bookmarks, ok = boolean(wire.ParamAllowBookmarks); !ok {
		return bad("%s=%q is not a boolean", wire.ParamAllowBookmarks, q.Get(wire.ParamAllowBookmarks))
	}
	if req.initial, ok = boolean(wire.ParamSendInitialEvents); !ok {
		return bad("%s=%q is not a boolean", wire.ParamSendInitialEvents, q.Get(wire.ParamSendInitialEvents))
	}
	req.rv = q.Get(wire.ParamResourceVersion)
	if len(req.rv) > 256 {
		return bad("%s is longer than 256 bytes", wire.ParamResourceVersion)
	}
	switch m := q.Get(wire.ParamRVMatch); m {
	case "", wire.RVMatchNotOlderThan:
	case "Exact":
		return bad("%s=Exact is not supported: this server serves only its current state", wire.ParamRVMatch)
	default:
		return bad("%s=%q: want NotOlderThan", wire.ParamRVMatch, m)
	}
	if v, ok := q[wire.ParamLimit]; ok {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || n < 0 {
			return bad("%s=%q is not a non-negative integer", wire.ParamLimit, v[0])
		}
		req.limit = n
	}
	if v, ok := q[wire.ParamContinue]; ok {
		if v[0] == "" {
			return bad("%s is empty", wire.ParamContinue)
		}
		req.cont = v[0]
	}
	if v, ok := q[wire.ParamTimeoutSeconds]; ok {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || n < 0 || n > maxTimeoutSeconds {
			return bad("%s=%q is not an integer in [0, %d]", wire.ParamTimeoutSeconds, v[0], maxTimeoutSeconds)
		}
		req.timeout = time.Duration(n) * time.Second
	}
	switch {
	case req.watch && q.Has(wire.ParamLimit):
		return bad("%s applies to lists, not watches", wire.ParamLimit)
	case req.watch && req.cont != "":
		return bad("%s applies to lists, not watches", wire.ParamContinue)
	case !req.watch && req.initial:
		return bad("%s applies to watches only", wire.ParamSendInitialEvents)
	case req.cont != "" && req.rv != "" && req.rv != "0":
		return bad("%s cannot be combined with %s: the token pins the list's revision", wire.ParamResourceVersion, wire.ParamContinue)
	}
	sse, acceptable := negotiate(r.Header.Values("Accept"))
	if !acceptable {
		return request{}, &wire.Status{Code: http.StatusNotAcceptable, Reason: "NotAcceptable", Message: "this server sends application/json (NDJSON watch streams) or text/event-stream"}
	}
	req.sse = sse && req.watch
	return req, nil
}

// negotiate reads Accept headers: whether Server-Sent Events are asked for, and whether
// anything this server sends is acceptable.
func negotiate(accepts []string) (sse, ok bool) {
	if len(accepts) == 0 {
		return false, true
	}
	for _, h := range accepts {
		for part := range strings.SplitSeq(h, ",") {
			switch wire.MediaType(part) {
			case "text/event-stream":
				sse, ok = true, true
			case "", "*/*", "application/*", "application/json", "application/x-ndjson", "application/jsonl", "application/json-seq", "application/stream+json":
				ok = true
			}
		}
	}
	return sse, ok
}

// ServeHTTP serves one request: auth, validation, then a list or a watch.
func (c *core[V]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, client, ok := c.accept(w, r)
	if !ok {
		return
	}
	if req.watch {
		c.serveWatch(w, r, req, client) // calls c.requests.Done, maybe on another goroutine
		return
	}
	defer c.requests.Done()
	c.serveList(w, r, req, client)
}

// accept checks a request — authorization, method, body, query, the server's state — and
// answers it if it is refused; if not, it counts it in c.requests (the caller calls
// Done). It is a function of its own so that its locals leave the stack of a watch,
// which stays on it for the watch's life.
//
//go:noinline
func (c *core[V]) accept(w http.ResponseWriter, r *http.Request) (request, string, bool) {
	if c.instance != "" {
		w.Header().Set(wire.HeaderInstance, c.instance)
	}
	var client string
	if c.authorize != nil {
		var err error
		if client, err = c.authorize(r); err != nil {
			c.refuse(w, r, err)
			return request{}, "", false
		}
	}
	if client == "" {
		client = remoteHost(r.RemoteAddr)
	}
	if r.Method != http.MethodGet {
		c.stats.BadRequests.Add(1)
		w.Header().Set("Allow", http.MethodGet)
		writeStatus(w, &wire.Status{Code: http.StatusMethodNotAllowed, Reason: "MethodNotAllowed", Message: "only GET is served"}, 0)
		return request{}, "", false
	}
	if r.ContentLength != 0 {
		c.refuseBody(w, r)
		return request{}, "", false
	}
	req, se := parseRequest(r)
	if se == nil {
		se = c.checkFilter(req.filter)
	}
	if se != nil {
		c.stats.BadRequests.Add(1)
		writeStatus(w, se, 0)
		return request{}, "", false
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server is shutting down"}, c.retryAfter)
		return request{}, "", false
	}
	c.requests.Add(1)
	c.mu.Unlock()
	if c.ready != nil && !c.ready() {
		c.requests.Done()
		writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server has not synced its initial state yet"}, c.retryAfter)
		return request{}, "", false
	}
	return req, client, true
}

// refuseBody answers 400 to a GET that carries a body (any length but 0, or none
// given), before it takes a slot: net/http would otherwise read up to 256 KiB of the
// unread body, with no deadline, before the response's header, so that a body that never
// ends would hold a list or watch slot for good. The connection's read deadline is set
// to now and the connection closed after the answer, so that nothing of the body is read.
func (c *core[V]) refuseBody(w http.ResponseWriter, r *http.Request) {
	c.stats.BadRequests.Add(1)
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	writeStatus(w, &wire.Status{Code: http.StatusBadRequest, Reason: "BadRequest", Message: "a GET of this server carries no body"}, 0)
}

// refuse answers a request Authorize refused: 401 with a challenge, or 403. The error's
// text stays in the log unless it carries a ClientMessage.
func (c *core[V]) refuse(w http.ResponseWriter, r *http.Request, err error) {
	code, message := http.StatusForbidden, "forbidden"
	if errors.Is(err, ErrUnauthorized) {
		code, message = http.StatusUnauthorized, "unauthorized"
		w.Header().Set("WWW-Authenticate", c.challenge)
	}
	var cm *clientMessage
	if errors.As(err, &cm) {
		message = cm.message
	}
	c.stats.Denied.Add(1)
	c.logger.Debug("httpsource: request refused", "remote", r.RemoteAddr, "code", code, "err", err)
	writeStatus(w, &wire.Status{Code: code, Reason: wire.Reason(code), Message: message}, 0)
}

// remoteHost is the client identity of a request that Authorize did not name: the
// remote IPv4 address, or the /64 of an IPv6 address (a host is given a /64, so one host
// must not count as many clients).
func remoteHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	ip, err := netip.ParseAddr(host)
	switch {
	case err != nil:
		return host
	case ip.Is4In6():
		return ip.Unmap().String()
	case ip.Is6():
		p, _ := ip.WithZone("").Prefix(64)
		return p.String()
	}
	return host
}

// tooMany answers 429 for a request beyond a limit.
func (c *core[V]) tooMany(w http.ResponseWriter, what, which string) {
	writeStatus(w, &wire.Status{Code: http.StatusTooManyRequests, Reason: "TooManyRequests",
		Message: fmt.Sprintf("too many %s (%s)", what, which)}, c.retryAfter)
}

// requestContext is the request's context, also cancelled by shutdown and, if timeout
// is positive, after timeout.
func (c *core[V]) requestContext(r *http.Request, timeout time.Duration) (context.Context, func()) {
	var ctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(r.Context(), timeout)
	} else {
		ctx, cancel = context.WithCancel(r.Context())
	}
	stop := context.AfterFunc(c.stopCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// sourceError answers an error from the source (or from translating a request for it).
func (c *core[V]) sourceError(w http.ResponseWriter, err error) {
	se := c.statusOf(err)
	var retry time.Duration
	if se.Code == http.StatusTooManyRequests || se.Code == http.StatusServiceUnavailable {
		retry = c.retryAfter
		if d, ok := informer.RetryAfterOf(err); ok {
			retry = d
		}
	}
	writeStatus(w, se, retry)
}

// statusOf classifies an error from the source.
func (c *core[V]) statusOf(err error) *wire.Status {
	var se *wire.Status
	if errors.As(err, &se) { // a Client as the source: pass the status on
		cp := *se
		return &cp
	}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, context.DeadlineExceeded): // timeoutSeconds of a list
		code = http.StatusGatewayTimeout
	case errors.Is(err, informer.ErrExpired):
		code = http.StatusGone
	case errors.Is(err, informer.ErrTooManyRequests):
		code = http.StatusTooManyRequests
	case errors.Is(err, informer.ErrRetryable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, informer.ErrNotSupported), c.plainIsBad:
		code = http.StatusBadRequest
	}
	return &wire.Status{Code: code, Reason: wire.Reason(code), Message: err.Error()}
}

// writeStatus answers with a Status body.
func writeStatus(w http.ResponseWriter, se *wire.Status, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(wire.RetrySeconds(retryAfter)))
	}
	body := wire.AppendStatus(nil, se.Code, se.Reason, se.Message, retryAfter)
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(se.Code)
	_, _ = w.Write(body)
}

// admit takes one of set's slots for client (at most limit in all and clientLimit for one
// client), or answers 429 naming what is full and counts the refusal in refused. release
// gives the slot back.
func (c *core[V]) admit(w http.ResponseWriter, set *slots, client string, limit, clientLimit int, refused *atomic.Uint64, what string) (release func(), ok bool) {
	c.mu.Lock()
	ok, which := set.take(client, limit, clientLimit)
	c.mu.Unlock()
	if !ok {
		refused.Add(1)
		c.tooMany(w, what, which)
		return nil, false
	}
	return func() {
		c.mu.Lock()
		set.release(client)
		c.mu.Unlock()
	}, true
}

// serveList answers one page, streamed in chunks of watchBufferSize: a list holds its
// page (a Server: its snapshot) and one chunk, never the whole encoded body, however
// slowly the client reads.
func (c *core[V]) serveList(w http.ResponseWriter, r *http.Request, req request, client string) {
	release, ok := c.admit(w, &c.lists, client, c.maxLists, c.maxClientLists, &c.stats.ListsRejected, "lists in progress")
	if !ok {
		return
	}
	defer release()
	ctx, done := c.requestContext(r, req.timeout)
	defer done()
	var pg page[V]
	var err error
	if c.await != nil && req.cont == "" && req.rv != "" && req.rv != "0" {
		if err := c.await(ctx, req.rv); err != nil {
			if r.Context().Err() == nil {
				c.answerRequestError(w, err)
			}
			return
		}
	}
	if c.list != nil {
		pg, err = c.list(client, req)
	} else {
		pg, err = c.sourceList(ctx, req)
	}
	if err != nil {
		var re *requestError
		switch {
		case errors.As(err, &re):
			c.answerRequestError(w, re.err)
		case r.Context().Err() != nil:
			// the client went away
		case c.stopCtx.Err() != nil:
			writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server is shutting down"}, c.retryAfter)
		default:
			c.sourceError(w, err)
		}
		return
	}
	out := make([]byte, 0, watchBufferSize+4096)
	out = append(out, `{"metadata":{"resourceVersion":`...)
	out = wire.AppendQuoted(out, []byte(pg.rev))
	if pg.cont != "" {
		out = append(out, `,"continue":`...)
		out = wire.AppendQuoted(out, []byte(pg.cont))
	}
	out = append(out, `},"items":[`...)
	sw := streamWriter{w: w, r: r, rc: http.NewResponseController(w), timeout: c.writeTimeout}
	cut := c.watchStale(&sw, pg.stale)
	defer cut.stop()
	started := false
	start := func() {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		c.stats.Lists.Add(1)
		sw.begin(c.sendBuffer)
		w.WriteHeader(http.StatusOK)
		started = true
	}
	i := 0
	for item := range pg.items {
		if i > 0 {
			out = append(out, ',')
		}
		if out, err = c.appendObject(out, item); err != nil {
			c.stats.EncodeErrors.Add(1)
			err = fmt.Errorf("httpsource: list: encoding item %d: %w", i, err)
			c.report(err)
			if !started {
				writeStatus(w, &wire.Status{Code: http.StatusInternalServerError, Reason: "InternalError", Message: err.Error()}, 0)
				return
			}
			// Part of the body is sent: cut it short, so that the client sees a broken list.
			panic(http.ErrAbortHandler)
		}
		i++
		if len(out) >= watchBufferSize {
			if ctx.Err() != nil { // the client went away, timeoutSeconds passed, or shutdown
				if started {
					panic(http.ErrAbortHandler) // cut the body short: never end a partial list cleanly
				}
				switch {
				case r.Context().Err() != nil: // the client went away
				case c.stopCtx.Err() != nil:
					writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server is shutting down"}, c.retryAfter)
				default:
					c.sourceError(w, ctx.Err())
				}
				return
			}
			if pg.stale != nil && pg.stale() {
				c.listCut(r, pg.rev)
				if started {
					panic(http.ErrAbortHandler)
				}
				c.answerRequestError(w, fmt.Errorf("the list's revision %s left the server's history: %w", pg.rev, informer.ErrExpired))
				return
			}
			if !started {
				start()
			}
			if err := sw.write(out, false); err != nil {
				if cut.cut.Load() {
					c.listCut(r, pg.rev)
					sw.abort()
					return
				}
				c.writeFailed(r, &sw, "list reader", err)
				return
			}
			out = out[:0]
		}
	}
	out = append(out, "]}\n"...)
	if !started {
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		start()
	}
	if err := sw.write(out, false); err != nil {
		c.writeFailed(r, &sw, "list reader", err)
		return
	}
	sw.end()
}

// staleCheck is how often a list being sent checks that its revision is still in the
// history, while its writes wait for a slow reader.
const staleCheck = 500 * time.Millisecond

// staleWatch cuts a list whose revision leaves the history while a write waits for its
// reader: the write's deadline is moved to now, so that the write fails at once.
type staleWatch struct {
	mu    sync.Mutex
	timer *time.Timer
	done  bool
	cut   atomic.Bool
}

// watchStale starts checking stale (nil: nothing to check) every staleCheck while the
// list is sent.
func (c *core[V]) watchStale(sw *streamWriter, stale func() bool) *staleWatch {
	sc := &staleWatch{}
	if stale == nil {
		return sc
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.timer = time.AfterFunc(staleCheck, func() {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if sc.done {
			return
		}
		if stale() {
			sc.cut.Store(true)
			_ = sw.rc.SetWriteDeadline(time.Now())
		}
		sc.timer.Reset(staleCheck) // a write may have moved the deadline on since
	})
	return sc
}

// stop ends the checks; none runs after it returns.
func (sc *staleWatch) stop() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.done = true
	if sc.timer != nil {
		sc.timer.Stop()
	}
}

// listCut accounts for a list cut because its revision left the history.
func (c *core[V]) listCut(r *http.Request, rev string) {
	c.stats.Evicted.Add(1)
	c.report(fmt.Errorf("httpsource: list reader %s too slow: the list's revision %s left the server's history while it was sent; cut, so that it does not pin an old state (ask for pages, or raise the history)", r.RemoteAddr, rev))
}

// sourceList reads one page from the source (Handler).
func (c *core[V]) sourceList(ctx context.Context, req request) (page[V], error) {
	opts := informer.ListOptions{Limit: req.limit}
	var err error
	switch {
	case req.cont != "":
		opts.Continue, err = c.revs.continueToken(req.cont)
	case req.rv == "":
		opts.Consistent = true
	case req.rv != "0":
		opts.Revision, err = c.revs.listRevision(req.rv)
	}
	if err != nil {
		return page[V]{}, &requestError{err}
	}
	l, err := c.lw.List(ctx, opts)
	if err != nil {
		return page[V]{}, err
	}
	rev, _ := c.revs.appendWire(nil, l.Revision)
	pg := page[V]{rev: string(rev), items: slices.Values(l.Items)}
	if l.Continue != "" {
		pg.cont = string(c.revs.appendContinue(nil, l.Continue))
	}
	return pg, nil
}

// requestError is an error in a request's revision or token: answered by
// answerRequestError.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// answerRequestError answers an error from translating a revision or token: ErrExpired
// → 410, ErrUnavailable (a revision not reached yet) → 503 with a Retry-After, the server
// shutting down → 503, anything else → 400.
func (c *core[V]) answerRequestError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, informer.ErrExpired):
		writeStatus(w, &wire.Status{Code: http.StatusGone, Reason: "Expired", Message: err.Error()}, 0)
		return
	case errors.Is(err, informer.ErrUnavailable):
		writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: err.Error()}, c.retryAfter)
		return
	case errors.Is(err, context.Canceled) && c.stopCtx.Err() != nil:
		writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server is shutting down"}, c.retryAfter)
		return
	}
	c.stats.BadRequests.Add(1)
	writeStatus(w, &wire.Status{Code: http.StatusBadRequest, Reason: "BadRequest", Message: err.Error()}, 0)
}

// serveWatch streams a watch until the source ends it, the client goes away, the watcher
// falls behind, or the server shuts down; then it calls c.requests.Done. An HTTP/1.1 watch
// is taken over from net/http once its header is sent (takeover.go), and goes on in a
// goroutine of its own.
func (c *core[V]) serveWatch(w http.ResponseWriter, r *http.Request, req request, client string) {
	release, ok := c.admit(w, &c.watchers, client, c.maxWatchers, c.maxClientWatchers, &c.stats.Rejected, "watchers")
	if !ok {
		c.requests.Done()
		return
	}
	t := newTakeover(w, r)
	r = t.request(r)
	ctx, done, wat, opts, replay, ok := c.openWatch(w, r, &req)
	if !ok {
		t.finish(0)
		release()
		c.requests.Done()
		return
	}

	ww := &streamWriter{w: w, r: r, rc: http.NewResponseController(w), timeout: c.writeTimeout}
	h := w.Header()
	if req.sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Cache-Control", "no-cache, no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if req.bookmarks && c.bookmarks > 0 {
		h.Set(wire.HeaderBookmarkInterval, strconv.FormatFloat(c.bookmarks.Seconds(), 'f', -1, 64))
	}
	c.stats.Watches.Add(1)
	c.stats.OpenWatches.Add(1)
	finish := func() {
		c.stats.OpenWatches.Add(-1)
		ww.end()
		wat.Stop()
		done()
		release()
		t.finish(c.writeTimeout)
		c.requests.Done()
	}
	ww.begin(c.sendBuffer)
	w.WriteHeader(http.StatusOK)
	if err := ww.write(nil, true); err != nil {
		c.writeFailed(ww.r, ww, "watcher", err)
		finish()
		return
	}
	if t.take(ww) {
		go func() {
			defer finish()
			c.streamWatch(ctx, ww, wat, req, opts.SendInitialEvents, replay)
		}()
		return
	}
	defer finish()
	c.streamWatch(ctx, ww, wat, req, opts.SendInitialEvents, replay)
}

// streamWatch sends a watch's events through ww until the watch ends or a write fails.
func (c *core[V]) streamWatch(ctx context.Context, ww *streamWriter, wat informer.Watch[V], req request, inInitial, replay bool) {
	// The write buffer is taken from a pool when there is something to send and given
	// back once it is sent, so that an idle watcher holds none.
	var buf watchBuffer
	var out []byte
	defer func() { buf.put(out) }()
	scratch := make([]byte, 0, 64)
	// The changes the watch says share a revision (a transaction of the Handler's source;
	// the initial events of a Server's replay, which share the state's revision) are sent
	// as a batch: each but the last with the partial mark. A bookmark inside a batch would
	// end it early for a client, and is dropped. A Server over an unordered upstream has
	// its own numbering and sends no batches.
	batched, _ := wat.(informer.BatchedWatch)
	open := false // the last change sent was partial
	for {
		ev, err := wat.Next()
		if out == nil {
			out = buf.get()
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				se := c.statusOf(err)
				if se.Code == http.StatusGone {
					c.stats.Evicted.Add(1)
					se.Message = "the watcher fell behind the server's history; list again: " + se.Message
				}
				out = appendErrorFrame(out, req.sse, se)
			}
			// Send what was read before the end; a client that went away just fails it.
			if len(out) > 0 {
				_ = ww.write(out, true)
			}
			return
		}
		flush := false
		switch ev.Type {
		case informer.Added, informer.Modified, informer.Deleted:
			partial := batched != nil && (!inInitial || c.batchInitial) && batched.MoreAtRevision()
			open = partial
			var newest bool
			start := len(out)
			out, newest, err = c.appendEvent(out, scratch, req.sse, ev, partial)
			if err != nil {
				c.stats.EncodeErrors.Add(1)
				err = fmt.Errorf("httpsource: watch: encoding a %v event: %w", ev.Type, err)
				c.report(err)
				out = appendErrorFrame(out[:start], req.sse, &wire.Status{Code: http.StatusInternalServerError, Reason: "InternalError", Message: err.Error()})
				_ = ww.write(out, true)
				return
			}
			flush = (newest || caughtUp(wat)) && !inInitial && !partial
		case informer.Bookmark:
			switch {
			case ev.EndOfInitialEvents:
				inInitial, flush = false, true
				if !replay {
					out = c.appendBookmark(out, scratch, req.sse, ev.Revision, true)
				}
			case open:
			case req.bookmarks:
				out, flush = c.appendBookmark(out, scratch, req.sse, ev.Revision, false), true
			}
		default:
			err := fmt.Errorf("httpsource: watch: the source sent an event of unknown type %v", ev.Type)
			c.report(err)
			out = appendErrorFrame(out, req.sse, &wire.Status{Code: http.StatusInternalServerError, Reason: "InternalError", Message: err.Error()})
			_ = ww.write(out, true)
			return
		}
		if flush || len(out) >= watchBufferSize {
			if err := ww.write(out, flush); err != nil {
				c.writeFailed(ww.r, ww, "watcher", err)
				return
			}
			out = out[:0]
			if flush {
				buf.put(out)
				out = nil
			}
		}
	}
}

// openWatch opens the source's watch for a request, or answers the request with the
// failure. done ends ctx. It is a function of its own so that its locals leave the stack
// of the watch, which stays on it for the watch's life.
//
//go:noinline
func (c *core[V]) openWatch(w http.ResponseWriter, r *http.Request, req *request) (ctx context.Context, done func(), wat informer.Watch[V], opts informer.WatchOptions, replay bool, ok bool) {
	// The source ends the watch at opts.Timeout; the server ends it at its own bound.
	ctx, done = c.requestContext(r, c.watchLifetime())
	opts = informer.WatchOptions{Timeout: req.timeout, AllowBookmarks: req.bookmarks, SendInitialEvents: req.initial}
	// replay: initial events the client did not ask for by name (Kubernetes' watch
	// without resourceVersion)
	switch {
	case req.rv == "" || req.rv == "0":
		if c.replayOnEmpty && !req.initial {
			opts.SendInitialEvents, replay = true, true
		}
	default:
		var err error
		if c.await != nil {
			if err := c.await(ctx, req.rv); err != nil {
				if r.Context().Err() == nil {
					c.answerRequestError(w, err)
				}
				done()
				return
			}
		}
		if opts.Revision, err = c.revs.watchRevision(req.rv); err != nil {
			c.answerRequestError(w, err)
			done()
			return
		}
	}
	wat, err := c.watch(ctx, req.filter, opts)
	if err != nil {
		switch {
		case r.Context().Err() != nil:
			// the client went away
		case c.stopCtx.Err() != nil:
			writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server is shutting down"}, c.retryAfter)
		default:
			c.sourceError(w, err)
		}
		done()
		return
	}
	return ctx, done, wat, opts, replay, true
}

// watchBuffers holds the write buffers of watchers that have nothing to send.
var watchBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, watchBufferSize)
	return &b
}}

// watchBuffer is a watcher's write buffer, taken from watchBuffers while it is used.
type watchBuffer struct {
	held *[]byte
}

// get returns an empty buffer.
func (w *watchBuffer) get() []byte {
	if w.held == nil {
		w.held = watchBuffers.Get().(*[]byte)
	}
	return (*w.held)[:0]
}

// put gives the buffer back; out is what it became (it may have grown for a large
// object, and is then dropped).
func (w *watchBuffer) put(out []byte) {
	if w.held == nil {
		return
	}
	if cap(out) <= 2*watchBufferSize {
		*w.held = out[:0]
	}
	watchBuffers.Put(w.held)
	w.held = nil
}

// watchLifetime draws how long one watch is served: a random duration in
// [MaxWatchDuration/2, MaxWatchDuration], or 0 (no bound).
func (c *core[V]) watchLifetime() time.Duration {
	if c.maxWatchDuration <= 0 {
		return 0
	}
	half := c.maxWatchDuration / 2
	return half + rand.N(c.maxWatchDuration-half+1)
}

// writeFailed accounts for a response whose connection failed: a client that stalled
// past the write timeout is counted, reported and reset; a client that went away is not
// news.
func (c *core[V]) writeFailed(r *http.Request, sw *streamWriter, who string, err error) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	c.stats.Evicted.Add(1)
	c.report(fmt.Errorf("httpsource: %s %s stalled: disconnected after %v without a completed write: %w", who, r.RemoteAddr, c.writeTimeout, err))
	sw.abort()
}

// connKey is the context key under which ConnContext stores a request's connection.
type connKey struct{}

// ConnContext is an http.Server ConnContext function for a server that mounts a Server or
// Handler: it records each connection in its context, so that a watch or a list can cap
// the connection's kernel send buffer (ServeOptions.SendBuffer) and a stalled client's
// connection is reset (SO_LINGER 0) rather than closed, which frees its unsent data at
// once. Without it a stalled client's connection is closed gracefully, its unsent data
// held by the kernel until the client reads it or the kernel gives up, and send buffers
// keep the kernel's sizing, which can grow to megabytes per connection and makes a slow
// reader's progress visible only every third of that. If the server has its own
// ConnContext, call this one from it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// tcpConn returns the TCP connection under c (unwrapping TLS), or nil.
func tcpConn(c net.Conn) *net.TCPConn {
	for c != nil {
		switch t := c.(type) {
		case *net.TCPConn:
			return t
		case interface{ NetConn() net.Conn }:
			c = t.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// streamWriter writes a streamed response (a watch, a list). A write may wait up to the
// write timeout without progress: with the connection known (ConnContext, on Linux) a
// write that is still blocked has its deadline moved on whenever the kernel's send queue
// of the connection changes, that is whenever the client's TCP stack accepts data, so a
// client that reads, however slowly, is never cut off for the size of its buffers.
type streamWriter struct {
	w       http.ResponseWriter
	r       *http.Request
	rc      *http.ResponseController
	timeout time.Duration
	conn    net.Conn     // from ConnContext; nil without it
	tcp     *net.TCPConn // under conn; nil if none
	armed   bool         // a write deadline was set

	mu      sync.Mutex  // guards the progress watch against end
	timer   *time.Timer // checks the send queue while a write waits
	writing bool
	queued  int // the send queue at the last check
}

// begin caps the connection's send buffer and arms its reset, when the connection is
// known: until end, any close of it (net/http closes a connection whose write failed) is
// abortive.
func (sw *streamWriter) begin(sendBuffer int) {
	if sw.r.ProtoMajor != 1 {
		return // HTTP/2: the connection carries other streams; a stalled stream is reset alone
	}
	sw.conn, _ = sw.r.Context().Value(connKey{}).(net.Conn)
	if sw.tcp = tcpConn(sw.conn); sw.tcp != nil {
		if sendBuffer > 0 {
			_ = sw.tcp.SetWriteBuffer(sendBuffer)
		}
		_ = sw.tcp.SetLinger(0)
	}
}

func (sw *streamWriter) write(b []byte, flush bool) error {
	if sw.timeout > 0 {
		_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
		sw.armed = true
		sw.watchProgress(true)
		defer sw.watchProgress(false)
	}
	if len(b) > 0 {
		if _, err := sw.w.Write(b); err != nil {
			return err
		}
	}
	if flush {
		return sw.rc.Flush()
	}
	return nil
}

// watchProgress starts or stops the checks of the send queue around one write.
func (sw *streamWriter) watchProgress(on bool) {
	if sw.tcp == nil {
		return
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.writing = on
	if !on {
		sw.timer.Stop()
		return
	}
	sw.queued = -1 // read at the first check, not here: most writes complete at once
	if sw.timer == nil {
		sw.timer = time.AfterFunc(sw.timeout/4, sw.checkProgress)
	} else {
		sw.timer.Reset(sw.timeout / 4)
	}
}

// checkProgress moves the deadline of a waiting write on if the send queue changed.
func (sw *streamWriter) checkProgress() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if !sw.writing {
		return
	}
	q, ok := sendQueue(sw.tcp)
	if !ok {
		return // no way to see progress: the write deadline decides
	}
	if sw.queued >= 0 && q != sw.queued {
		_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	}
	sw.queued = q
	sw.timer.Reset(sw.timeout / 4)
}

// end clears the write deadline and disarms the reset: the response is complete, and
// the connection may serve other requests or close gracefully.
func (sw *streamWriter) end() {
	if sw.armed {
		_ = sw.rc.SetWriteDeadline(time.Time{})
	}
	if sw.tcp != nil {
		_ = sw.tcp.SetLinger(-1)
	}
}

// abort closes the connection of a stalled client. net/http has already closed it when a
// write failed; with ConnContext, begin made that close a reset (SO_LINGER 0), which
// discards what the kernel still held for the client and sends RST.
func (sw *streamWriter) abort() {
	if sw.conn != nil {
		_ = sw.conn.Close()
	}
}

// appendEvent appends the frame of an Added, Modified or Deleted event and reports
// whether its revision is the source's newest; partial puts the partial mark after its
// revision (an event of a batch that is not its last).
// scratch is a buffer of the watch for the revision, so that nothing is allocated per event.
func (c *core[V]) appendEvent(dst, scratch []byte, sse bool, ev informer.Event[V], partial bool) ([]byte, bool, error) {
	if sse {
		dst = append(dst, "data: "...)
	}
	switch ev.Type {
	case informer.Added:
		dst = append(dst, `{"type":"ADDED","resourceVersion":`...)
	case informer.Modified:
		dst = append(dst, `{"type":"MODIFIED","resourceVersion":`...)
	default:
		dst = append(dst, `{"type":"DELETED","resourceVersion":`...)
	}
	rev, newest := c.revs.appendWire(scratch[:0], ev.Revision)
	if partial && (len(rev) == 0 || rev[len(rev)-1] != wire.PartialMark) {
		rev = append(rev, wire.PartialMark)
	}
	dst = wire.AppendQuoted(dst, rev)
	dst = append(dst, `,"object":`...)
	dst, err := c.appendObject(dst, ev.Object)
	if err != nil {
		return dst, false, err
	}
	dst = append(dst, '}')
	return appendFrameEnd(dst, sse), newest, nil
}

// appendBookmark appends a BOOKMARK frame in the Kubernetes shape: the object carries only
// metadata.resourceVersion (and the end-of-initial-events annotation).
func (c *core[V]) appendBookmark(dst, scratch []byte, sse bool, rev string, endOfInitial bool) []byte {
	if sse {
		dst = append(dst, "data: "...)
	}
	onWire, _ := c.revs.appendWire(scratch[:0], rev)
	dst = append(dst, `{"type":"BOOKMARK","resourceVersion":`...)
	dst = wire.AppendQuoted(dst, onWire)
	dst = append(dst, `,"object":{"metadata":{"resourceVersion":`...)
	dst = wire.AppendQuoted(dst, onWire)
	if endOfInitial {
		dst = append(dst, `,"annotations":{"`+wire.InitialEventsEnd+`":"true"}`...)
	}
	dst = append(dst, "}}}"...)
	return appendFrameEnd(dst, sse)
}

// appendErrorFrame appends an ERROR frame carrying a Status.
func appendErrorFrame(dst []byte, sse bool, se *wire.Status) []byte {
	if sse {
		dst = append(dst, "data: "...)
	}
	dst = append(dst, `{"type":"ERROR","object":`...)
	dst = wire.AppendStatus(dst, se.Code, se.Reason, se.Message, 0)
	dst = append(dst, '}')
	return appendFrameEnd(dst, sse)
}

func appendFrameEnd(dst []byte, sse bool) []byte {
	if sse {
		return append(dst, "\n\n"...)
	}
	return append(dst, '\n')
}

// shutdown refuses new requests, ends every open list and watch (a watch ends cleanly, as
// when its timeout passes) and waits for their handlers to return, or for ctx.
func (c *core[V]) shutdown(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	done := make(chan struct{})
	go func() {
		c.requests.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
