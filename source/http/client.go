package httpsource

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/errsink"
	"github.com/informer-go/informer/internal/wire"
)

// Client is an informer.ListerWatcher[V] for a collection served over HTTP as a list and
// a stream of changes: by default in the Kubernetes list+watch protocol, served by Server
// or Handler of this package, or by a Kubernetes API server's REST endpoint; with the
// hooks of ClientOptions, any list+watch API (see the package documentation). It is safe
// for concurrent use.
//
// A list is GET <base>?limit=…&continue=…&resourceVersion=…; a watch is
// GET <base>?watch=1&resourceVersion=…&timeoutSeconds=…&allowWatchBookmarks=true, whose
// body streams one event per frame. Query parameters already in the base URL (a label
// selector, say) are kept on every request.
//
// Errors are classified for the informer (see StatusError, and ClientOptions.Classify to
// change it): 410 → informer.ErrExpired; 429 → informer.ErrTooManyRequests with the
// Retry-After delay (informer.RetryAfterOf); 503 → informer.ErrUnavailable; other 5xx,
// broken connections and timeouts → informer.ErrRetryable; a refused connection →
// informer.ErrConnectionRefused; 400, 401, 403, 404 → a *StatusError of no class.
// Anything the server sends that cannot be used — a malformed list or frame, an unknown
// event type, a stream cut inside a frame, a body over a limit — matches
// informer.ErrBadInput: the call fails (a watch ends), the informer lists again, and no
// event is ever half-delivered. A list item that cannot be decoded is the exception: it is
// skipped and reported (see ClientOptions.OnDecodeError) and the rest of the page is used.
//
// A response, to a list or to a watch, is used only if its Content-Type is absent or is
// the media type the request asked for in its Accept header (for JSON, application/json or
// one of the names of newline-delimited JSON, with any parameters); anything else — an
// HTML page from a proxy, say — is an error that matches informer.ErrBadInput.
//
// The Client follows a redirect only within the origin (scheme, host and port) of the
// request: a redirect to another origin, or from https to http, fails the request, so
// that credentials are never sent anywhere else.
//
// After an answer with a Retry-After delay (429, 503, or an ERROR event with
// retryAfterSeconds) the client sends nothing to the server before the delay has passed,
// capped by ClientOptions.MaxRetryAfter: a List or Watch called meanwhile waits (or
// returns ctx.Err()). The informer waits too, but this keeps the promise even for callers
// that retry at once.
//
// A Server of this package over an ordered upstream sends the changes of one revision as
// a batch (see Server); a watch delivers a batch only once it has all of it, every event
// at the batch's revision, and drops a batch the stream ends inside.
//
// With ClientOptions.FailoverURLs the Client talks to one of several replicas at a time
// and moves to the next after a failure another replica may not have; URL reports where
// the next request goes.
//
// A Client does not compare revisions; see Ordered.
type Client[V any] struct {
	targets       []target // the base URL, then ClientOptions.FailoverURLs
	current       atomic.Int32
	hc            *http.Client
	prepare       func(*http.Request) error
	listRequest   func(*OutgoingRequest, informer.ListOptions) error
	watchRequest  func(*OutgoingRequest, informer.WatchOptions) error
	decode        func(json.RawMessage) (V, error)
	decodeList    func([]byte, informer.ListOptions) (RawList, error)
	decodeFrame   func(*Frame[V]) error
	classify      func(*StatusError) error
	onDecodeError func(error)
	revision      func(V) string
	codec         EnvelopeCodec
	framing       Framing
	stream        bool
	maxFrame      int
	maxListBytes  int64
	maxListItems  int
	maxBatch      int
	maxBatchBytes int64
	headerTimeout time.Duration
	listTimeout   time.Duration
	watchGrace    time.Duration
	endAtTimeout  bool
	watchIdle     time.Duration
	maxRetryAfter time.Duration

	decodeErrors atomic.Uint64
	sinks        errsink.List // the informers' error handlers (ReportErrorsTo)

	mu        sync.Mutex
	notBefore []time.Time // per target, no request before this time: the server asked to wait (Retry-After)
}

// target is one of a Client's URLs: the URL without its query, and the query kept on
// every request.
type target struct {
	base  url.URL
	query url.Values
}

// parseTarget checks and splits a base URL.
func parseTarget(baseURL string) (target, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return target{}, err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return target{}, fmt.Errorf("%q is not an http or https URL", baseURL)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return target{}, fmt.Errorf("query of %q: %w", baseURL, err)
	}
	u.RawQuery, u.Fragment = "", ""
	return target{base: *u, query: q}, nil
}

var (
	_ informer.ListerWatcher[int] = (*Client[int])(nil)
	_ informer.StreamingLister    = (*Client[int])(nil)
	_ informer.SourceIdentifier   = (*Client[int])(nil)
	_ informer.RevisionComparer   = OrderedClient[int]{}
)

// NewClient returns a client of the collection at baseURL (http or https).
func NewClient[V any](baseURL string, opts ClientOptions[V]) (*Client[V], error) {
	targets := make([]target, 0, 1+len(opts.FailoverURLs))
	for _, s := range append([]string{baseURL}, opts.FailoverURLs...) {
		t, err := parseTarget(s)
		if err != nil {
			return nil, fmt.Errorf("httpsource: NewClient: %w", err)
		}
		targets = append(targets, t)
	}
	for i := range targets {
		if err := filterQuery(targets[i].query, opts.Filter); err != nil {
			return nil, err
		}
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	c := &Client[V]{
		targets:       targets,
		notBefore:     make([]time.Time, len(targets)),
		hc:            sameOriginClient(hc),
		prepare:       opts.PrepareRequest,
		listRequest:   opts.ListRequest,
		watchRequest:  opts.WatchRequest,
		decode:        opts.Decode,
		decodeList:    opts.DecodeList,
		decodeFrame:   opts.DecodeFrame,
		classify:      opts.Classify,
		onDecodeError: opts.OnDecodeError,
		revision:      opts.Revision,
		codec:         opts.EnvelopeCodec,
		framing:       opts.Framing,
		stream:        opts.StreamingList,
		maxFrame:      orDefault(opts.MaxFrameSize, DefaultMaxFrameSize),
		maxListBytes:  orDefault(opts.MaxListBytes, DefaultMaxListBytes),
		maxListItems:  orDefault(opts.MaxListItems, DefaultMaxListItems),
		maxBatch:      orDefault(opts.MaxBatch, DefaultMaxBatch),
		maxBatchBytes: orDefault(opts.MaxBatchBytes, DefaultMaxBatchBytes),
		headerTimeout: orDefault(opts.ResponseHeaderTimeout, DefaultResponseHeaderTimeout),
		listTimeout:   orDefault(opts.ListTimeout, DefaultListTimeout),
		watchGrace:    orDefault(opts.WatchGrace, DefaultWatchGrace),
		endAtTimeout:  opts.EndWatchAtTimeout,
		watchIdle:     orDefault(opts.WatchIdleTimeout, DefaultWatchIdleTimeout),
		maxRetryAfter: orDefault(opts.MaxRetryAfter, DefaultMaxRetryAfter),
	}
	if c.codec == nil {
		c.codec = JSON
	}
	if c.framing == nil {
		c.framing = NDJSON
	}
	return c, nil
}

// orDefault returns v, or def if v is zero or negative.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// sameOriginClient returns a copy of hc that follows a redirect only within the origin of
// the first request, then as hc's own CheckRedirect (or net/http's default) says.
func sameOriginClient(hc *http.Client) *http.Client {
	c := *hc
	check := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if from, to := origin(via[0].URL), origin(req.URL); from != to {
			return fmt.Errorf("httpsource: refused a redirect from %s to another origin, %s: a Client follows redirects only within its origin", from, to)
		}
		if check != nil {
			return check(req, via)
		}
		if len(via) >= 10 {
			return errors.New("httpsource: stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// origin returns scheme://host:port of a URL, the port made explicit.
func origin(u *url.URL) string {
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		switch scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// DecodeErrors returns how many objects the Client skipped because they could not be
// decoded (see ClientOptions.OnDecodeError).
func (c *Client[V]) DecodeErrors() uint64 { return c.decodeErrors.Load() }

// ReportErrorsTo implements informer.ErrorReporting: informer.New calls it, so that the
// objects the Client skips reach every informer built over it (its ErrorHandler, log and
// Stats.DecodeErrors) as well as ClientOptions.OnDecodeError.
func (c *Client[V]) ReportErrorsTo(report func(error)) {
	c.sinks.Add(report)
}

// reportDecode counts and reports a skipped object.
func (c *Client[V]) reportDecode(err *DecodeError) {
	c.decodeErrors.Add(1)
	if c.onDecodeError != nil {
		c.onDecodeError(err)
	}
	c.sinks.Report(err)
}

// itemDecoder decodes the objects of one list or one watch, with ClientOptions.Decode or,
// by default, with encoding/json. The default feeds each object to one json.Decoder,
// which keeps its buffer, scanner and decoding state from one object to the next: each
// object is scanned once and decoded once, with no per-object set-up, as a bare
// json.Decoder loop over the stream would do.
type itemDecoder[V any] struct {
	custom func(json.RawMessage) (V, error)
	feed   feed
	dec    *json.Decoder
	fed    int64 // bytes given to dec
}

func (d *itemDecoder[V]) decode(raw json.RawMessage) (V, error) {
	if d.custom != nil {
		return d.custom(raw)
	}
	if d.dec == nil {
		d.feed.b, d.fed = nil, 0
		d.dec = json.NewDecoder(&d.feed)
	}
	d.feed.b = raw
	d.fed += int64(len(raw))
	var v V
	err := d.dec.Decode(&v)
	if err == nil && (len(d.feed.b) > 0 || d.dec.InputOffset() != d.fed) {
		err = errors.New("unexpected data after the object")
	}
	if err != nil {
		d.dec = nil // a decoder that failed keeps its error: start afresh
		var zero V
		return zero, err
	}
	if len(raw) > largeObject {
		d.dec = nil // do not keep a buffer grown for one large object
	}
	return v, nil
}

// largeObject is the size beyond which an itemDecoder does not keep its buffer.
const largeObject = 1 << 20

// feed is the reader an itemDecoder's json.Decoder reads: the current object, then EOF.
type feed struct{ b []byte }

func (f *feed) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

// StreamingList implements informer.StreamingLister: it reports
// ClientOptions.StreamingList.
func (c *Client[V]) StreamingList() bool { return c.stream }

// List implements informer.ListerWatcher: one request, one page. The whole body is read
// into memory before it is split, so a page costs its size in memory: ask for pages
// (ListOptions.Limit) to bound it; ClientOptions.MaxListBytes and MaxListItems bound what
// a server can make the Client hold, and ListTimeout how long it may take.
//
// The options map to the query as a Kubernetes API server expects: Continue → continue
// (and nothing else but limit); Consistent → no resourceVersion (the newest state);
// Revision → resourceVersion=R&resourceVersionMatch=NotOlderThan; neither →
// resourceVersion=0 (any state, a cache is fine). ClientOptions.ListRequest may reshape
// the request.
//
// An item that cannot be decoded is left out of the page and reported as a *DecodeError
// (ClientOptions.OnDecodeError); the informer then treats its key as absent. A later
// change of it reaches the cache as any change does: its next watch event (an Added, since
// the cache does not hold it) or the next list that decodes it.
//
// The page's Bytes is the length of the response body after any decompression, as
// MaxListBytes counts it, for the informer's progress log.
func (c *Client[V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	at, q := c.params()
	if opts.Limit > 0 {
		q.Set(wire.ParamLimit, strconv.FormatInt(opts.Limit, 10))
	}
	switch {
	case opts.Continue != "":
		q.Set(wire.ParamContinue, opts.Continue)
	case opts.Consistent:
	case opts.Revision != "":
		q.Set(wire.ParamResourceVersion, opts.Revision)
		q.Set(wire.ParamRVMatch, wire.RVMatchNotOlderThan)
	default:
		q.Set(wire.ParamResourceVersion, "0")
	}
	req := c.request(at, q, c.codec.ContentType())
	if c.listRequest != nil {
		if err := c.listRequest(req, opts); err != nil {
			return informer.List[V]{}, fmt.Errorf("httpsource: ListRequest: %w", err)
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	deadline := time.AfterFunc(c.listTimeout, func() { timedOut.Store(true); cancel() })
	defer deadline.Stop()
	resp, err := c.do(lctx, req)
	if err != nil {
		if timedOut.Load() && ctx.Err() == nil {
			return informer.List[V]{}, c.listTimeoutError(req)
		}
		return informer.List[V]{}, err
	}
	body, err := c.readList(resp)
	resp.Body.Close()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return informer.List[V]{}, ctx.Err()
		case timedOut.Load():
			return informer.List[V]{}, c.listTimeoutError(req)
		case errors.Is(err, informer.ErrBadInput):
			return informer.List[V]{}, err
		}
		return informer.List[V]{}, fmt.Errorf("httpsource %s %s: %w: list response cut: %w", req.Method, redact(req.URL), informer.ErrRetryable, err)
	}
	raw, err := c.splitList(body, opts)
	if tm := (wire.TooManyItems{}); errors.As(err, &tm) {
		return informer.List[V]{}, c.tooManyItems(req, tm.Max)
	}
	if err != nil {
		if isClassified(err) {
			return informer.List[V]{}, fmt.Errorf("httpsource %s %s: %w", req.Method, redact(req.URL), err)
		}
		return informer.List[V]{}, fmt.Errorf("%w: %w", badInput("%s %s: malformed list response (Content-Type %q)", req.Method, redact(req.URL), resp.Header.Get("Content-Type")), err)
	}
	if len(raw.Items) > c.maxListItems {
		return informer.List[V]{}, c.tooManyItems(req, c.maxListItems)
	}
	if raw.Revision == "" {
		return informer.List[V]{}, badInput("%s %s: the list page has no revision", req.Method, redact(req.URL))
	}
	items := make([]V, 0, len(raw.Items))
	dec := itemDecoder[V]{custom: c.decode}
	for i, it := range raw.Items {
		if string(it) == "null" {
			return informer.List[V]{}, badInput("%s %s: list item %d is null", req.Method, redact(req.URL), i)
		}
		v, err := dec.decode(it)
		if err != nil {
			c.reportDecode(&DecodeError{Request: req.Method + " " + redact(req.URL), Object: fmt.Sprintf("list item %d %s", i, excerpt(it)), Err: err})
			continue
		}
		items = append(items, v)
	}
	return informer.List[V]{Items: items, Revision: raw.Revision, Continue: raw.Continue, Bytes: int64(len(body))}, nil
}

// readList reads a list body of at most maxListBytes bytes, counted as decoded: a body
// the transport left compressed (a hook asked for gzip itself) is decompressed here.
func (c *Client[V]) readList(resp *http.Response) ([]byte, error) {
	tooLong := func() error {
		return badInput("%s %s: the list response is longer than %d bytes (ClientOptions.MaxListBytes): ask for smaller pages or raise the limit",
			resp.Request.Method, redact(resp.Request.URL), c.maxListBytes)
	}
	body, compressed, err := decodedBody(resp)
	if err != nil {
		return nil, err
	}
	if compressed {
		defer body.Close()
	}
	if resp.ContentLength > c.maxListBytes && !resp.Uncompressed && !compressed {
		return nil, tooLong()
	}
	size := 512
	if resp.ContentLength > 0 && !resp.Uncompressed && !compressed {
		size = int(resp.ContentLength) + bytes.MinRead // ReadFrom wants MinRead free to see EOF
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	n, err := buf.ReadFrom(io.LimitReader(body, c.maxListBytes+1))
	if err != nil {
		return nil, err
	}
	if n > c.maxListBytes {
		return nil, tooLong()
	}
	return buf.Bytes(), nil
}

// decodedBody returns the body of resp as decoded bytes: the body itself, or, when it is
// still gzip-encoded (the transport decompresses only what it asked to be compressed), a
// reader that decompresses it (compressed is then true, and the reader must be closed).
// An encoding the Client cannot decode is an error for the request.
func decodedBody(resp *http.Response) (body io.ReadCloser, compressed bool, err error) {
	enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	switch {
	case resp.Uncompressed, enc == "", enc == "identity":
		return resp.Body, false, nil
	case enc == "gzip", enc == "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, false, badInput("%s %s: the gzip-encoded response does not decompress: %v", resp.Request.Method, redact(resp.Request.URL), err)
		}
		return zr, true, nil
	}
	return nil, false, badInput("%s %s: the response has Content-Encoding %q, which the Client cannot decode: ask for gzip or none (Accept-Encoding)", resp.Request.Method, redact(resp.Request.URL), enc)
}

// splitList splits a list body with DecodeList or the codec.
func (c *Client[V]) splitList(body []byte, opts informer.ListOptions) (RawList, error) {
	switch {
	case c.decodeList != nil:
		return c.decodeList(body, opts)
	case c.codec == JSON:
		l, err := wire.DecodeList(body, c.maxListItems)
		return RawList(l), err
	}
	return c.codec.DecodeList(body)
}

func (c *Client[V]) tooManyItems(req *OutgoingRequest, max int) error {
	return badInput("%s %s: the list page has more than %d items (ClientOptions.MaxListItems): ask for smaller pages or raise the limit", req.Method, redact(req.URL), max)
}

func (c *Client[V]) listTimeoutError(req *OutgoingRequest) error {
	return fmt.Errorf("httpsource %s %s: %w: the list took longer than %v (ClientOptions.ListTimeout)", req.Method, redact(req.URL), informer.ErrRetryable, c.listTimeout)
}

// Watch implements informer.ListerWatcher: it sends the watch request and returns once the
// server has answered with its headers; events are read by Next. opts.Timeout is sent as
// timeoutSeconds (rounded up), for the server to end the watch cleanly; opts.Revision
// as resourceVersion; opts.AllowBookmarks as allowWatchBookmarks=true;
// opts.SendInitialEvents as sendInitialEvents=true (only with ClientOptions.StreamingList,
// else the error matches informer.ErrNotSupported). ClientOptions.WatchRequest may reshape
// the request.
//
// The watch holds one connection and no goroutine. Next returns, once the stream ends:
// io.EOF when the server ended it cleanly; an error matching informer.ErrExpired for an
// ERROR event with code 410; a classified *StatusError for other ERROR events; an error
// matching informer.ErrRetryable for a connection that broke between two events, or for
// a server that did not end the watch within opts.Timeout plus ClientOptions.WatchGrace
// (or, without opts.Timeout, sent no frame for ClientOptions.WatchIdleTimeout, or sent
// none for twice the bookmark interval the server told; with
// ClientOptions.EndWatchAtTimeout, the Client ends the watch at opts.Timeout with io.EOF);
// informer.ErrBadInput for a frame that cannot be used (see Client); ctx.Err() once ctx is
// done; ErrWatchStopped after Stop. Stop and a cancelled ctx make a blocked Next return at
// once: the request is cancelled and the connection closed.
func (c *Client[V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	at, q := c.params()
	q.Set(wire.ParamWatch, "1")
	if opts.Revision != "" {
		q.Set(wire.ParamResourceVersion, opts.Revision)
	}
	if opts.AllowBookmarks {
		q.Set(wire.ParamAllowBookmarks, "true")
	}
	if opts.Timeout > 0 {
		q.Set(wire.ParamTimeoutSeconds, strconv.FormatInt(int64((opts.Timeout+time.Second-1)/time.Second), 10))
	}
	if opts.SendInitialEvents {
		if !c.stream {
			return nil, fmt.Errorf("httpsource: streaming list not enabled (ClientOptions.StreamingList): %w", informer.ErrNotSupported)
		}
		q.Set(wire.ParamSendInitialEvents, "true")
		q.Set(wire.ParamRVMatch, wire.RVMatchNotOlderThan)
		q.Set(wire.ParamAllowBookmarks, "true")
	}
	req := c.request(at, q, c.framing.Accept(c.codec.ContentType()))
	if c.watchRequest != nil {
		if err := c.watchRequest(req, opts); err != nil {
			return nil, fmt.Errorf("httpsource: WatchRequest: %w", err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	resp, err := c.do(wctx, req)
	if err != nil {
		cancel()
		return nil, err
	}
	w := c.newWatch(ctx, cancel, resp.Body)
	w.opts, w.what, w.target = opts, req.Method+" "+redact(req.URL), req.target
	if w.frame != nil {
		w.frame.Options = opts
	}
	switch {
	case opts.Timeout > 0 && c.endAtTimeout:
		w.deadline = time.Now().Add(opts.Timeout)
	case opts.Timeout > 0:
		w.deadline = time.Now().Add(opts.Timeout + c.watchGrace)
	default:
		w.idle = c.watchIdle
	}
	if iv, ok := bookmarkInterval(resp.Header); ok && opts.AllowBookmarks && (w.idle == 0 || 2*iv < w.idle) {
		w.idle, w.told = 2*iv, true
	}
	// Armed once w.timer is set: expire reads it.
	w.timer = time.AfterFunc(math.MaxInt64, w.expire)
	w.timer.Reset(w.nextLimit())
	return w, nil
}

// bookmarkInterval reads the bookmark interval a Server tells in a watch's response.
func bookmarkInterval(h http.Header) (time.Duration, bool) {
	v := h.Get(wire.HeaderBookmarkInterval)
	if v == "" {
		return 0, false
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil || !(secs > 0) || secs > 1e6 {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

func (c *Client[V]) newWatch(ctx context.Context, cancel context.CancelFunc, body io.ReadCloser) *watch[V] {
	w := &watch[V]{c: c, ctx: ctx, cancel: cancel, body: body, frames: c.framing.NewReader(body, c.maxFrame), items: itemDecoder[V]{custom: c.decode}, frame0: -1}
	if c.decodeFrame != nil {
		w.frame = &Frame[V]{items: &w.items}
	}
	return w
}

// acceptable reports whether a response's Content-Type may be read as the media type
// asked for: absent, the same, a name of newline-delimited JSON when JSON was asked for,
// or anything when the request accepts anything.
func acceptable(contentType, accept string) bool {
	got, want := wire.MediaType(contentType), wire.MediaType(accept)
	switch {
	case got == "" || want == "" || want == "*/*" || got == want:
		return true
	case want == "application/json" || isJSONStream(want):
		return isJSONStream(got) || strings.HasSuffix(got, "+json")
	}
	return false
}

// isJSONStream reports whether a media type is one of the names of newline-delimited JSON.
func isJSONStream(mt string) bool {
	switch mt {
	case "application/json", "application/x-ndjson", "application/jsonl", "application/json-seq", "application/stream+json":
		return true
	}
	return false
}

// params returns the target the next request goes to (see ClientOptions.FailoverURLs)
// and a copy of its URL's query.
func (c *Client[V]) params() (int, url.Values) {
	at := int(c.current.Load())
	query := c.targets[at].query
	q := make(url.Values, len(query)+6)
	for k, v := range query {
		q[k] = v
	}
	return at, q
}

// request returns the default request: GET of the target's URL with the query.
func (c *Client[V]) request(at int, q url.Values, accept string) *OutgoingRequest {
	u := c.targets[at].base
	u.RawQuery = q.Encode()
	h := make(http.Header, 2)
	h.Set("Accept", accept)
	h.Set(wire.HeaderHistory, "1")
	return &OutgoingRequest{Method: http.MethodGet, URL: &u, Header: h, target: at}
}

// failover moves the next requests from target at to the next one, in order, wrapping
// around, after a failure that another replica may not have: a refused or broken
// connection, a timeout, a 5xx answer. A Client with one URL stays where it is. It
// reports whether the next requests go to another URL than at.
func (c *Client[V]) failover(at int, err error) bool {
	if len(c.targets) < 2 || !errors.Is(err, informer.ErrRetryable) || errors.Is(err, informer.ErrTooManyRequests) {
		return false
	}
	c.current.CompareAndSwap(int32(at), int32((at+1)%len(c.targets)))
	return int(c.current.Load()) != at
}

// SourceID implements informer.SourceIdentifier: the URL given to NewClient (without
// user information) and, for a Server of this package, the instance it names in
// InstanceHeader, "<URL> instance <id>"; a server that names none (a plain API, a
// Handler, which serves its source's revisions) is its URL alone. It costs one list
// request of one item (ClientOptions.ListRequest applies), whose body is not read. A
// Server's instance is its process: an informer restarted warm after the Server
// restarted lists again.
func (c *Client[V]) SourceID(ctx context.Context) (string, error) {
	at, q := c.params()
	q.Set(wire.ParamLimit, "1")
	q.Set(wire.ParamResourceVersion, "0")
	req := c.request(at, q, c.codec.ContentType())
	if c.listRequest != nil {
		if err := c.listRequest(req, informer.ListOptions{Limit: 1}); err != nil {
			return "", fmt.Errorf("httpsource: ListRequest: %w", err)
		}
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	base := c.targets[0].base
	base.RawQuery = c.targets[0].query.Encode()
	id := redact(&base)
	if instance := resp.Header.Get(InstanceHeader); instance != "" {
		id += " instance " + instance
	}
	return id, nil
}

// URL returns the base URL the next request goes to: the one given to NewClient, or,
// after a failover, one of ClientOptions.FailoverURLs.
func (c *Client[V]) URL() string {
	t := c.targets[c.current.Load()]
	u := t.base
	u.RawQuery = t.query.Encode()
	return redact(&u)
}

// redact returns a URL for an error message, without its user information.
func redact(u *url.URL) string {
	if u == nil {
		return "<nil URL>"
	}
	if u.User == nil {
		return u.String()
	}
	v := *u
	v.User = nil
	return v.String()
}

// do sends a request and returns a 200 response whose Content-Type is acceptable, or a
// classified error. The response headers must arrive within the header timeout.
func (c *Client[V]) do(ctx context.Context, r *OutgoingRequest) (*http.Response, error) {
	if err := c.waitRetryAfter(ctx, r.target); err != nil {
		return nil, err
	}
	resp, err := c.send(ctx, r)
	if err != nil && c.failover(r.target, err) {
		// The delay holds back requests to the URL that asked for it (noted by send); the
		// next URL is tried at once.
		err = withoutRetryAfter(err)
	}
	return resp, err
}

// withoutRetryAfter returns err without the delay withRetryAfter put around it, if any.
func withoutRetryAfter(err error) error {
	if _, ok := informer.RetryAfterOf(err); ok {
		if inner := errors.Unwrap(err); inner != nil {
			return inner
		}
	}
	return err
}

// send sends a request; see do.
func (c *Client[V]) send(ctx context.Context, r *OutgoingRequest) (*http.Response, error) {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	if r.URL == nil {
		return nil, fmt.Errorf("httpsource: a request hook left no URL")
	}
	what := method + " " + redact(r.URL)
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	hctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(hctx, method, r.URL.String(), body)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("httpsource %s: %w", what, err)
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	if r.Body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.prepare != nil {
		if err := c.prepare(req); err != nil {
			cancel()
			return nil, fmt.Errorf("httpsource %s: PrepareRequest: %w", what, err)
		}
	}
	timer := time.AfterFunc(c.headerTimeout, cancel)
	resp, err := c.hc.Do(req)
	if !timer.Stop() && ctx.Err() == nil {
		if err == nil {
			resp.Body.Close()
		}
		return nil, fmt.Errorf("httpsource %s: %w: no response headers within %v (ClientOptions.ResponseHeaderTimeout)", what, informer.ErrRetryable, c.headerTimeout)
	}
	if err != nil {
		cancel()
		return nil, transportError(ctx, what, err)
	}
	// The request's context lives on for the body; ctx's cancellation still reaches it.
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	if resp.StatusCode != http.StatusOK {
		err := c.statusError(resp, what)
		resp.Body.Close()
		c.noteRetryAfter(r.target, err)
		return nil, err
	}
	if accept := req.Header.Get("Accept"); !acceptable(resp.Header.Get("Content-Type"), accept) {
		resp.Body.Close()
		return nil, badInput("%s: the response has Content-Type %q, want %q", what, wire.MediaType(resp.Header.Get("Content-Type")), wire.MediaType(accept))
	}
	return resp, nil
}

// cancelBody releases the request's context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// statusError builds the classified error for a response whose status is not 200.
func (c *Client[V]) statusError(resp *http.Response, what string) error {
	se, d := statusFromResponse(resp, c.maxRetryAfter)
	se.Request = what
	c.applyClass(se)
	return withRetryAfter(se, d)
}

// applyClass runs ClientOptions.Classify on a status.
func (c *Client[V]) applyClass(se *StatusError) {
	if c.classify != nil {
		if class := c.classify(se); class != nil {
			se.Class = class
		}
	}
}

// noteRetryAfter records the delay an error of target at carries, if any: no request to
// it before the delay passes.
func (c *Client[V]) noteRetryAfter(at int, err error) {
	d, ok := informer.RetryAfterOf(err)
	if !ok || d <= 0 {
		return
	}
	t := time.Now().Add(min(d, c.maxRetryAfter))
	c.mu.Lock()
	if t.After(c.notBefore[at]) {
		c.notBefore[at] = t
	}
	c.mu.Unlock()
}

// waitRetryAfter waits until the last Retry-After delay of target at has passed.
func (c *Client[V]) waitRetryAfter(ctx context.Context, at int) error {
	c.mu.Lock()
	d := time.Until(c.notBefore[at])
	c.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// transportError classifies an error from sending a request.
func transportError(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err // what names the method and URL already
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("httpsource %s: %w: %w", what, informer.ErrConnectionRefused, err)
	}
	if isNetworkError(err) {
		return fmt.Errorf("httpsource %s: %w: %w", what, informer.ErrRetryable, err)
	}
	return fmt.Errorf("httpsource %s: %w", what, err)
}

// isNetworkError reports whether err is a failure of the connection rather than of the
// request (TLS verification, a malformed URL, an HTTP protocol error). A request sent on
// a kept-alive connection the server closed at that moment fails with net/http's
// "server closed idle connection", which it exports no value for: it is matched by text.
func isNetworkError(err error) bool {
	var op *net.OpError
	var ne net.Error
	return errors.As(err, &op) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		(errors.As(err, &ne) && ne.Timeout()) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// isClassified reports whether err matches one of the informer's error classes.
func isClassified(err error) bool {
	return errors.Is(err, informer.ErrExpired) || errors.Is(err, informer.ErrRetryable) ||
		errors.Is(err, informer.ErrBadInput) || errors.Is(err, informer.ErrNotSupported)
}

// OrderedClient is a Client whose server's revisions are decimal integers that grow with
// every change, as they are for Server (and, in practice, for etcd and the Kubernetes API
// server). It implements informer.RevisionComparer, which turns on
// Informer.WaitForRevision and the informer's check that a stream never goes back in time.
type OrderedClient[V any] struct {
	*Client[V]
}

// Ordered returns c as an OrderedClient. Use it only for servers whose revisions are
// ordered integers: with any other server the informer would reject every event.
func (c *Client[V]) Ordered() OrderedClient[V] { return OrderedClient[V]{c} }

// CompareRevisions implements informer.RevisionComparer. It compares decimal integers with
// CompareIntegerRevisions (the upstream's revisions, which a Server over an ordered source
// serves), and revisions of a Server's own numbering, <tag>.<n>, of one tag by n. A
// revision of one numbering compared with one of another (an upstream's with a server's
// own, or two servers' own) is an error: Informer.WaitForRevision refuses it rather than
// take it as reached.
//
// A Server over an ordered source tags each revision with its history ("42@k3j9x", see
// PlainRevision); revisions are compared without their tags, so that WaitForRevision of
// the upstream's revision of a write ("42") means what it says, except that two of one
// number with different tags (states of two histories of the upstream) are an error.
func (OrderedClient[V]) CompareRevisions(a, b string) (int, error) {
	a, ha := wire.CutHistory(a)
	b, hb := wire.CutHistory(b)
	c, err := compareRevisions(a, b)
	if err == nil && c == 0 && ha != "" && hb != "" && ha != hb {
		return 0, fmt.Errorf("httpsource: revisions %s@%s and %s@%s name states of two histories of the upstream (restored from a backup)", a, ha, b, hb)
	}
	return c, err
}

// PlainRevision returns a revision of a Server without the tag of its history: "42" for
// "42@k3j9x". A Client asks every server for tags (header Informer-History); a fan-out
// Server over an ordered source sends them, so that a watch resumed from a revision of
// another history of the upstream (one restored from a backup) is answered 410 rather
// than continued on the wrong one. The informer's revisions carry them; PlainRevision
// gives the upstream's revision, to print or store where the tag means nothing.
func PlainRevision(rev string) string {
	plain, _ := wire.CutHistory(rev)
	return plain
}

// compareRevisions compares two revisions without history tags.
func compareRevisions(a, b string) (int, error) {
	ta, na, oka := cutOwnRevision(a)
	tb, nb, okb := cutOwnRevision(b)
	switch {
	case !oka && !okb:
		return CompareIntegerRevisions(a, b)
	case oka && okb && ta == tb:
		return CompareIntegerRevisions(na, nb)
	case oka && okb:
		return 0, fmt.Errorf("httpsource: revisions %q and %q are of two numberings (two instances of a Server that numbers its changes itself)", a, b)
	}
	own, other := a, b
	if okb {
		own, other = b, a
	}
	return 0, fmt.Errorf("httpsource: revision %q is of another numbering than %q, which a Server numbered itself (its upstream's revisions are not ordered, so the server cannot serve them): wait for a revision the server sent", other, own)
}

// cutOwnRevision splits a revision of a Server's own numbering, <tag>.<n>.
func cutOwnRevision(s string) (tag, n string, ok bool) {
	if !wire.IsOwnRevision(s) {
		return "", "", false
	}
	tag, n, _ = strings.Cut(s, ".")
	return tag, n, true
}

// CompareIntegerRevisions compares two revisions written as non-negative decimal integers
// without leading zeros, of any length: -1, 0 or +1 as a is older than, equal to or newer
// than b. Anything else is an error.
func CompareIntegerRevisions(a, b string) (int, error) {
	if !wire.IsCanonicalInteger(a) {
		return 0, fmt.Errorf("httpsource: revision %q is not a decimal integer", a)
	}
	if !wire.IsCanonicalInteger(b) {
		return 0, fmt.Errorf("httpsource: revision %q is not a decimal integer", b)
	}
	switch {
	case len(a) != len(b):
		if len(a) < len(b) {
			return -1, nil
		}
		return 1, nil
	case a < b:
		return -1, nil
	case a > b:
		return 1, nil
	}
	return 0, nil
}
