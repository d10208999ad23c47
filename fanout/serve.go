package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/errsink"
	"github.com/informer-go/informer/internal/wire"
)

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

// core serves a ListerWatcher in the protocol; Server and PassThrough are thin layers on it.
type core[V any] struct {
	lw           informer.ListerWatcher[V]
	appendObject func(dst []byte, v V) ([]byte, error)
	revs         revisionMap
	ready        func() bool // nil: always ready
	// list, when set, answers list requests instead of lw.List (a Server's snapshots).
	list func(client string, req request) (page[V], error)
	// staleState, when set, returns a check that the state a streaming list opened now
	// sends has left the history, and that state's wire revision (a Server's log), so that
	// its initial events are cut as a list is.
	staleState func() (stale func() bool, rev string)
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
	// for them, told to the client in a header; 0: not known (a PassThrough), not told.
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
	who               string          // names the server in its errors: `fanout: server for informer "items"`
	warner            *errsink.Warner // the Warn lines with no errorHandler
	stats             counters

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

// init applies o's defaults; who names the server in its errors, clk times their Warn
// lines.
func (c *core[V]) init(o ServeOptions, who string, clk clock.Clock) {
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
	c.who = who
	c.warner = errsink.NewWarner(c.logger, clk, warnEvery, "fanout error (set ServeOptions.ErrorHandler to handle these)")
	c.stopCtx, c.stop = context.WithCancel(context.Background())
}

// The kinds of failure a server reports, each limited apart in the Warn lines.
const (
	kindEncode       = "encode"         // an object failed to encode
	kindTooLarge     = "too_large"      // an object encoded larger than MaxObjectSize
	kindKey          = "key"            // the key function failed on an object the informer keyed
	kindFilterIndex  = "filter_index"   // a filter index function failed or panicked
	kindUnknownEvent = "unknown_event"  // the source sent an event of an unknown type
	kindStalled      = "stalled_client" // a client disconnected: it read nothing for WriteTimeout
	kindListCut      = "list_cut"       // a list cut: its revision left the history
	kindPanic        = "panic"          // a taken-over watch panicked (logged at Error already)
)

// warnEvery is the least time between two Warn lines of one kind of failure, with no
// ErrorHandler set.
const warnEvery = 10 * time.Second

// report hands a failure nobody else will see, of the given kind, to the error handler
// or, with none, to the log at Warn (at most once per kind per warnEvery); err says what
// failed, on what, and what to do, and report puts the server's name before it.
func (c *core[V]) report(kind string, err error) {
	err = fmt.Errorf("%s: %w", c.who, err)
	c.logger.Debug("fanout: serve error", "kind", kind, "err", err)
	if c.errorHandler != nil {
		c.errorHandler(err)
		return
	}
	if kind != kindPanic { // its Error line, with the stack, is written already
		c.warner.Warn(kind, err)
	}
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
		c.shuttingDown(w)
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
	c.logger.Debug("fanout: request refused", "remote", r.RemoteAddr, "code", code, "err", err)
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
