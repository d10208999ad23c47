package fanout

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// policy is what a backend asks of the handler beyond the protocol.
type policy struct {
	// replayOnEmpty makes a watch without resourceVersion (or "0") start with the current
	// state, as Kubernetes does; it needs a backend whose watch supports SendInitialEvents.
	replayOnEmpty bool
	// batchInitial sends the initial events of a watch (a replay, or sendInitialEvents) as
	// one batch: every event but the last carries the partial mark (a Server over an
	// ordered upstream, whose initial events all carry the state's revision).
	batchInitial bool
	// plainIsBad answers a plain (unclassified) error from the backend with 400 rather
	// than 500: the backend fails only on malformed input.
	plainIsBad bool
	// bookmarks is the interval of the backend's bookmarks to an idle watcher that asked
	// for them, told to the client in a header; 0: not known (a PassThrough), not told.
	bookmarks time.Duration
	// instance, when set, is sent in wire.HeaderInstance with every response (a Server's).
	instance string
}

// handler serves a backend in the protocol: it accepts or refuses a request, then
// answers a list or streams a watch. Admission is its gate's; the write side is the
// listSender's, the watchStream's, the streamWriter's and the takeover's.
type handler[V any] struct {
	b         backend[V]
	policy    policy
	gate      *gate
	rep       *reporter
	authorize func(*http.Request) (string, error)
	challenge string
	writing   *writers
}

// newHandler returns the handler of b, admitting through g and reporting to rep, with
// o's options.
func newHandler[V any](b backend[V], g *gate, rep *reporter, o ServeOptions) *handler[V] {
	authorize := o.AuthorizeClient
	if authorize == nil && o.Authorize != nil {
		authorize = func(r *http.Request) (string, error) { return "", o.Authorize(r) }
	}
	return &handler[V]{
		b:         b,
		policy:    b.Policy(),
		gate:      g,
		rep:       rep,
		authorize: authorize,
		challenge: cmp.Or(o.Challenge, "Bearer"),
		writing:   newWriters(o, g.Stats(), rep),
	}
}

// ServeHTTP serves one request: auth, validation, then a list or a watch.
func (h *handler[V]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, client, ok := h.accept(w, r)
	if !ok {
		return
	}
	if req.IsWatch() {
		h.serveWatch(w, r, req, client) // calls h.gate.Leave, maybe on another goroutine
		return
	}
	defer h.gate.Leave()
	h.serveList(w, r, req, client)
}

// Shutdown refuses new requests, ends every open list and watch (a watch ends cleanly, as
// when its timeout passes) and waits for their handlers to return, or for ctx.
func (h *handler[V]) Shutdown(ctx context.Context) error { return h.gate.Shutdown(ctx) }

// accept checks a request — authorization, method, body, query, the server's state — and
// answers it if it is refused; if not, the gate counts it (the caller calls Leave). It is
// a function of its own so that its locals leave the stack of a watch, which stays on it
// for the watch's life.
//
//go:noinline
func (h *handler[V]) accept(w http.ResponseWriter, r *http.Request) (request, string, bool) {
	if h.policy.instance != "" {
		w.Header().Set(wire.HeaderInstance, h.policy.instance)
	}
	stats := h.gate.Stats()
	var client string
	if h.authorize != nil {
		var err error
		if client, err = h.authorize(r); err != nil {
			h.refuse(w, r, err)
			return request{}, "", false
		}
	}
	if client == "" {
		client = remoteHost(r.RemoteAddr)
	}
	if r.Method != http.MethodGet {
		stats.BadRequest()
		w.Header().Set("Allow", http.MethodGet)
		writeStatus(w, &wire.Status{Code: http.StatusMethodNotAllowed, Reason: "MethodNotAllowed", Message: "only GET is served"}, 0)
		return request{}, "", false
	}
	if r.ContentLength != 0 {
		h.refuseBody(w, r)
		return request{}, "", false
	}
	req, se := parseRequest(r)
	if se == nil {
		se = checkFilter(req.Filter(), h.b.Filters())
	}
	if se != nil {
		stats.BadRequest()
		writeStatus(w, se, 0)
		return request{}, "", false
	}
	if !h.gate.Enter(w) {
		return request{}, "", false
	}
	if !h.b.Ready() {
		h.gate.Leave()
		writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server has not synced its initial state yet"}, h.gate.RetryAfter())
		return request{}, "", false
	}
	return req, client, true
}

// refuseBody answers 400 to a GET that carries a body (any length but 0, or none
// given), before it takes a slot: net/http would otherwise read up to 256 KiB of the
// unread body, with no deadline, before the response's header, so that a body that never
// ends would hold a list or watch slot for good. The connection's read deadline is set
// to now and the connection closed after the answer, so that nothing of the body is read.
func (h *handler[V]) refuseBody(w http.ResponseWriter, r *http.Request) {
	h.gate.Stats().BadRequest()
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	writeStatus(w, &wire.Status{Code: http.StatusBadRequest, Reason: "BadRequest", Message: "a GET of this server carries no body"}, 0)
}

// refuse answers a request Authorize refused: 401 with a challenge, or 403. The error's
// text stays in the log unless it carries a ClientMessage.
func (h *handler[V]) refuse(w http.ResponseWriter, r *http.Request, err error) {
	code, message := http.StatusForbidden, "forbidden"
	if errors.Is(err, ErrUnauthorized) {
		code, message = http.StatusUnauthorized, "unauthorized"
		w.Header().Set("WWW-Authenticate", h.challenge)
	}
	var cm *clientMessage
	if errors.As(err, &cm) {
		message = cm.Message()
	}
	h.gate.Stats().Denied()
	h.rep.Refused(r.RemoteAddr, code, err)
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

// serveList answers one page, streamed in chunks of watchBufferSize: a list holds its
// page (a Server: its snapshot) and one chunk, never the whole encoded body, however
// slowly the client reads.
func (h *handler[V]) serveList(w http.ResponseWriter, r *http.Request, req request, client string) {
	release, ok := h.gate.AdmitList(w, client)
	if !ok {
		return
	}
	defer release()
	rev, cont, limit, timeout := req.List()
	ctx, done := h.gate.Context(r, timeout)
	defer done()
	pg, err := h.b.List(ctx, client, req.Filter(), rev, cont, limit)
	if err != nil {
		h.Fail(w, r, err)
		return
	}
	sendList(ctx, h, h.writing.Stream(w, r, true), pg, req.Tagged())
}

// serveWatch streams a watch until the backend ends it, the client goes away, the watcher
// falls behind, or the server shuts down; then it calls h.gate.Leave. An HTTP/1.1 watch
// is taken over from net/http once its header is sent (takeover.go), and goes on in a
// goroutine of its own.
func (h *handler[V]) serveWatch(w http.ResponseWriter, r *http.Request, req request, client string) {
	release, ok := h.gate.AdmitWatch(w, client)
	if !ok {
		h.gate.Leave()
		return
	}
	t := newTakeover(w, r)
	r = t.Request(r)
	ctx, done, ws, ok := h.openWatch(w, r, req)
	if !ok {
		t.Finish(0)
		release()
		h.gate.Leave()
		return
	}
	if t != nil {
		// A taken-over watch's connection is closed after it: say so, so that a client
		// neither pipelines a request behind the watch nor reuses the connection.
		w.Header().Set("Connection", "close")
	}
	sw := h.writing.Stream(w, r, false)
	stats := h.gate.Stats()
	stats.WatchOpened()
	finish := func() {
		stats.WatchClosed()
		sw.End()
		ws.Stop()
		done()
		release()
		t.Finish(h.writing.Timeout())
		h.gate.Leave()
	}
	if err := startWatch(sw, req, h.policy.bookmarks); err != nil {
		sw.Failed(err)
		finish()
		return
	}
	if t.Take(sw) {
		go func() {
			defer finish()
			defer t.Recover(h.rep)
			ws.Run(ctx, sw)
		}()
		return
	}
	defer finish()
	ws.Run(ctx, sw)
}

// openWatch opens the backend's watch for a request, or answers the request with the
// failure. done ends ctx. It is a function of its own so that its locals leave the stack
// of the watch, which stays on it for the watch's life.
//
//go:noinline
func (h *handler[V]) openWatch(w http.ResponseWriter, r *http.Request, req request) (ctx context.Context, done func(), ws *watchStream[V], ok bool) {
	// The backend ends the watch at opts.Timeout; the server ends it at its own bound.
	ctx, done = h.gate.Context(r, h.gate.WatchLifetime())
	rev, opts, replay := req.Watch(h.policy.replayOnEmpty)
	wat, err := h.b.Watch(ctx, req.Filter(), rev, opts)
	if err != nil {
		h.Fail(w, r, err)
		done()
		return nil, nil, nil, false
	}
	ws = newWatchStream(h, wat, req, replay, opts.SendInitialEvents)
	if opts.SendInitialEvents {
		// A streaming list is cut as a list is when its state leaves the history while a
		// write waits for its reader; once the initial events are sent it is a watch.
		ws.CutWhenStale(h.b.StaleState())
	}
	return ctx, done, ws, true
}

// Fail answers a request whose list or watch failed before its answer began: err is a
// *requestError (its revision or token), or the backend's.
func (h *handler[V]) Fail(w http.ResponseWriter, r *http.Request, err error) {
	var re *requestError
	switch {
	case r.Context().Err() != nil:
		// the client went away
	case errors.As(err, &re):
		h.answerRequestError(w, re.Unwrap())
	case h.gate.Stopping():
		h.gate.ShuttingDown(w)
	default:
		h.sourceError(w, err)
	}
}

// Backend returns the backend served.
func (h *handler[V]) Backend() backend[V] { return h.b }

// Stats returns the counters of ServeStats.
func (h *handler[V]) Stats() *counters { return h.gate.Stats() }

// Reporter returns where failures nobody else sees go.
func (h *handler[V]) Reporter() *reporter { return h.rep }

// BatchInitial reports whether the initial events of a watch are sent as one batch.
func (h *handler[V]) BatchInitial() bool { return h.policy.batchInitial }

// StatusOf classifies an error from the backend.
func (h *handler[V]) StatusOf(err error) *wire.Status { return statusOf(err, h.policy.plainIsBad) }

// sourceError answers an error from the backend.
func (h *handler[V]) sourceError(w http.ResponseWriter, err error) {
	se := h.StatusOf(err)
	var retry time.Duration
	if se.Code == http.StatusTooManyRequests || se.Code == http.StatusServiceUnavailable {
		retry = h.gate.RetryAfter()
		if d, ok := informer.RetryAfterOf(err); ok {
			retry = d
		}
	}
	writeStatus(w, se, retry)
}

// answerRequestError answers an error of a request's revision or token: ErrExpired
// → 410 (a revision not reached within CatchUpWait too), ErrUnavailable → 503 with a
// Retry-After, the server shutting down → 503, anything else → 400.
func (h *handler[V]) answerRequestError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, informer.ErrExpired):
		writeStatus(w, &wire.Status{Code: http.StatusGone, Reason: "Expired", Message: err.Error()}, 0)
		return
	case errors.Is(err, informer.ErrUnavailable):
		writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: err.Error()}, h.gate.RetryAfter())
		return
	case errors.Is(err, context.Canceled) && h.gate.Stopping():
		h.gate.ShuttingDown(w)
		return
	}
	h.gate.Stats().BadRequest()
	writeStatus(w, &wire.Status{Code: http.StatusBadRequest, Reason: "BadRequest", Message: err.Error()}, 0)
}

// startWatch sends the headers of a watch's answer; interval is the backend's bookmark
// interval (0: not told).
func startWatch(sw *streamWriter, req request, interval time.Duration) error {
	sse, bookmarks := req.Stream()
	hd := sw.Header()
	if sse {
		hd.Set("Content-Type", "text/event-stream")
	} else {
		hd.Set("Content-Type", "application/json")
	}
	hd.Set("Cache-Control", "no-cache, no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	if bookmarks && interval > 0 {
		hd.Set(wire.HeaderBookmarkInterval, strconv.FormatFloat(interval.Seconds(), 'f', -1, 64))
	}
	sw.Start()
	return sw.Write(nil, true)
}
