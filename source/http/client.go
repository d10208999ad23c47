package httpsource

import (
	"bytes"
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
)

// The defaults of the limits of ClientOptions; a zero option means its default.
const (
	// DefaultMaxFrameSize is the longest watch frame a Client accepts: 16 MiB.
	DefaultMaxFrameSize = 16 << 20
	// DefaultMaxListBytes is the largest list response body a Client reads, after any
	// decompression: 256 MiB.
	DefaultMaxListBytes = 256 << 20
	// DefaultMaxListItems is the largest number of items a Client accepts in one list
	// page: 1,000,000.
	DefaultMaxListItems = 1_000_000
	// DefaultResponseHeaderTimeout bounds the time from sending a request (connecting
	// included) to the end of the response headers: 1 minute.
	DefaultResponseHeaderTimeout = time.Minute
	// DefaultListTimeout bounds one list request, its whole body included: 5 minutes.
	DefaultListTimeout = 5 * time.Minute
	// DefaultWatchGrace is how long past the requested timeout a Client waits for the
	// server to end a watch: 30 seconds.
	DefaultWatchGrace = 30 * time.Second
	// DefaultWatchIdleTimeout is how long a watch requested without a timeout may go
	// without a complete frame: 10 minutes.
	DefaultWatchIdleTimeout = 10 * time.Minute
	// DefaultMaxRetryAfter is the longest Retry-After delay a Client obeys: 5 minutes.
	DefaultMaxRetryAfter = 5 * time.Minute
)

// ClientOptions configures a Client. Every field is optional; each zero value is a
// documented default, and with all of them the Client speaks the Kubernetes list+watch
// protocol (see the package documentation). The fields ListRequest, DecodeList,
// DecodeFrame, Classify and OnDecodeError adapt it to another list+watch API.
type ClientOptions[V any] struct {
	// HTTPClient sends the requests; nil means http.DefaultClient. TLS, proxies and dialing
	// are configured there. The Client uses a copy of it whose CheckRedirect refuses a
	// redirect to another origin (see Client) before calling the original's. Leave its
	// Timeout at zero: it bounds a whole request, a watch included, and would cut every
	// watch short; the timeouts below apply whatever client is given.
	HTTPClient *http.Client
	// PrepareRequest is called on every request just before it is sent: set
	// authentication headers (a bearer token), tracing headers. An error aborts the
	// request and is returned (wrapped). To change the method, path, query or body, use
	// ListRequest and WatchRequest.
	PrepareRequest func(*http.Request) error
	// ListRequest, if set, shapes every list request: it receives the request the Client
	// would send by default (GET of the base URL with the Kubernetes query, see Client.List)
	// and the options of the page, and may change its method, URL, headers and body. An
	// error aborts the List call and is returned (wrapped); make it match
	// informer.ErrBadInput for options it cannot serve (a malformed continue token).
	ListRequest func(req *Request, opts informer.ListOptions) error
	// WatchRequest, if set, shapes every watch request, as ListRequest does lists; the
	// default is described at Client.Watch.
	WatchRequest func(req *Request, opts informer.WatchOptions) error
	// Decode turns one encoded object (a list item, a watch event's object) into a V. It
	// may keep raw only if it copies it. Nil means encoding/json.Unmarshal into a new V.
	// An item it rejects is skipped and reported (see OnDecodeError).
	Decode func(raw json.RawMessage) (V, error)
	// DecodeList, if set, splits a list response body instead of Codec.DecodeList. It gets
	// the options of the request that fetched the body, so that it can report the
	// revision and continue token from the request's side: an API whose later pages carry
	// the store's current revision, not the one the list is pinned to, keeps the pinned one
	// in the continue token it makes. The items it returns go to Decode one by one. It runs
	// on the goroutine of List, with no state shared between calls but what it closes over.
	// An error matching no informer class is reported as malformed input
	// (informer.ErrBadInput).
	DecodeList func(body []byte, opts informer.ListOptions) (RawList, error)
	// DecodeFrame, if set, decodes each watch frame instead of Codec.DecodeEvent and
	// Decode: it adds zero or more events to the Frame (changes, or a Bookmark), skips an
	// object it cannot decode with Frame.Skip, or returns an error that ends the watch: a
	// *StatusError (classified as a server's answer is, with Classify), an error that
	// matches an informer class, or any other error, which is reported as malformed input
	// (informer.ErrBadInput). The frame's events are delivered only if it returns nil.
	DecodeFrame func(f *Frame[V]) error
	// Classify, if set, sorts every failure the server reports — a response whose status
	// is not 200, an ERROR event, a *StatusError returned by DecodeFrame — into the
	// informer's error classes: it returns informer.ErrExpired, informer.ErrRetryable,
	// informer.ErrTooManyRequests, informer.ErrUnavailable, informer.ErrBadInput, or nil to
	// keep the default classification (see StatusError). The StatusError holds the status
	// code, the body as read (StatusError.Body) and what could be read from it.
	Classify func(se *StatusError) error
	// OnDecodeError, if set, receives every object the Client skipped because Decode (or
	// DecodeFrame, through Frame.Skip) rejected it, as a *DecodeError, which matches
	// informer.ErrDecode and informer.ErrBadInput. Pass the informer's ReportError so that
	// these errors reach its error handler and its Stats.DecodeErrors. DecodeErrors counts
	// them either way.
	OnDecodeError func(error)
	// Revision returns an object's revision. It is used for watch events whose frame
	// carries none (see RawEvent.Revision); a server of this package always sends one, and
	// a Kubernetes API server's objects carry metadata.resourceVersion, which the JSON
	// codec reads, so it is rarely needed.
	Revision func(V) string
	// Codec splits list pages and watch frames; nil means JSON.
	Codec Codec
	// Framing cuts the watch stream into frames; nil means NDJSON.
	Framing Framing
	// StreamingList makes the client a streaming lister (informer.StreamingLister): the
	// informer then starts with a watch that sends the initial state
	// (sendInitialEvents=true), as a Kubernetes API server with WatchList does and as
	// Server does. Leave it false for servers that do not support it.
	StreamingList bool
	// MaxFrameSize bounds one watch frame in bytes; 0 means DefaultMaxFrameSize (16 MiB). A
	// longer frame ends the watch with an error that matches informer.ErrBadInput.
	MaxFrameSize int
	// MaxListBytes bounds a list response body in bytes, counted after any decompression;
	// 0 means DefaultMaxListBytes (256 MiB). A longer body fails the List with an error
	// that matches informer.ErrBadInput; ask for pages (informer.Options.PageSize) to stay
	// under it.
	MaxListBytes int64
	// MaxListItems bounds the items of one list page; 0 means DefaultMaxListItems
	// (1,000,000). A page with more fails the List with an error that matches
	// informer.ErrBadInput, found while the page is split, before any item is decoded.
	MaxListItems int
	// ResponseHeaderTimeout bounds the time from sending a request, connecting included,
	// to the end of the response headers; 0 means DefaultResponseHeaderTimeout (1 minute).
	// It holds whatever HTTPClient is given, http.DefaultClient included. Beyond it the
	// request fails with an error that matches informer.ErrRetryable.
	ResponseHeaderTimeout time.Duration
	// ListTimeout bounds a whole list request, reading its body included; 0 means
	// DefaultListTimeout (5 minutes). Beyond it the List fails with an error that matches
	// informer.ErrRetryable.
	ListTimeout time.Duration
	// WatchGrace is how long past the requested timeout (informer.WatchOptions.Timeout)
	// the Client waits for the server to end a watch; 0 means DefaultWatchGrace (30
	// seconds). Then Next fails with an error that matches informer.ErrRetryable, and the
	// informer watches again: a server that went silent, or drips bytes that never make a
	// frame, cannot hold a watch open forever.
	WatchGrace time.Duration
	// EndWatchAtTimeout is for APIs whose watches take no timeout and never end by
	// themselves (the etcd gateway): the Client then ends each watch itself once the
	// requested timeout (informer.WatchOptions.Timeout) has passed, and Next returns io.EOF
	// as if the server had ended it; the informer watches again from the last revision it
	// got, so nothing is lost. False (the default): the server is asked to end the watch
	// (timeoutSeconds) and given WatchGrace more.
	EndWatchAtTimeout bool
	// WatchIdleTimeout bounds, for a watch requested without a timeout, the time between
	// two complete frames; 0 means DefaultWatchIdleTimeout (10 minutes). Beyond it Next
	// fails with an error that matches informer.ErrRetryable.
	WatchIdleTimeout time.Duration
	// MaxRetryAfter caps the delay of a server's Retry-After header or retryAfterSeconds;
	// 0 means DefaultMaxRetryAfter (5 minutes). A longer delay is cut to it.
	MaxRetryAfter time.Duration
}

// Request is a request a Client is about to send, as ClientOptions.ListRequest and
// ClientOptions.WatchRequest see and may change it. The Client then builds the
// http.Request from it, calls PrepareRequest and sends it.
type Request struct {
	// Method is the HTTP method; the default is GET.
	Method string
	// URL is the request's URL; the default is the Client's base URL with the query of
	// the protocol. A hook may change its path and query, or point it elsewhere.
	URL *url.URL
	// Header holds the request headers; the default sets Accept to the codec's (or the
	// framing's) media type. The response's Content-Type is checked against Accept (see
	// Client).
	Header http.Header
	// Body is the request body, nil for none. The Client sends it with a Content-Length
	// and can send it again (http.Request.GetBody), so a same-origin 307 or 308 redirect
	// works.
	Body []byte
}

// Frame is one watch frame being decoded by ClientOptions.DecodeFrame, and the events
// decoded from it. The Client reuses one Frame for all frames of a watch.
type Frame[V any] struct {
	// Data is the frame's bytes, valid only during the call.
	Data []byte
	// Options are the options of the watch the frame belongs to.
	Options informer.WatchOptions

	events  []informer.Event[V]
	skipped []error
	items   *itemDecoder[V]
}

// Add appends an event to the frame's events. A Bookmark needs a Revision; a change
// (Added, Modified, Deleted) needs an Object, and a Revision (or ClientOptions.Revision to
// read one from the object). The events are delivered in the order they were added.
func (f *Frame[V]) Add(ev informer.Event[V]) { f.events = append(f.events, ev) }

// Decode decodes an encoded object with the Client's item decoder (ClientOptions.Decode,
// else encoding/json, reusing its state from one object to the next).
func (f *Frame[V]) Decode(raw []byte) (V, error) { return f.items.decode(raw) }

// Skip records that an object of the frame could not be decoded and was left out: once
// the frame is accepted, a *DecodeError naming what (a key, say) and wrapping err goes to
// ClientOptions.OnDecodeError and is counted by DecodeErrors. The cache keeps its previous
// state of the object; a later change of it that decodes is applied as usual. If the
// skipped object was the frame's last change, Add a Bookmark at its revision so that the
// informer's revision still moves past it (Informer.WaitForRevision).
func (f *Frame[V]) Skip(what string, err error) {
	f.skipped = append(f.skipped, &DecodeError{Object: what, Err: err})
}

// DecodeError reports an object a Client skipped because it could not be decoded: a list
// item, or an object of a watch frame that ClientOptions.DecodeFrame skipped. It matches
// informer.ErrDecode (and so informer.ErrBadInput) and unwraps to the decoder's error.
type DecodeError struct {
	// Request names the request whose answer held the object: "GET http://host/path?…".
	Request string
	// Object says which object: "list item 3 {\"name\":…" or what DecodeFrame named.
	Object string
	// Err is the decoder's error.
	Err error
}

// Error describes the failure.
func (e *DecodeError) Error() string {
	if e.Request == "" {
		return fmt.Sprintf("httpsource: cannot decode %s: %v; skipped", e.Object, e.Err)
	}
	return fmt.Sprintf("httpsource %s: cannot decode %s: %v; skipped", e.Request, e.Object, e.Err)
}

// Unwrap returns informer.ErrDecode and the decoder's error.
func (e *DecodeError) Unwrap() []error { return []error{informer.ErrDecode, e.Err} }

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
// A Client does not compare revisions; see Ordered.
type Client[V any] struct {
	base          url.URL
	query         url.Values
	hc            *http.Client
	prepare       func(*http.Request) error
	listRequest   func(*Request, informer.ListOptions) error
	watchRequest  func(*Request, informer.WatchOptions) error
	decode        func(json.RawMessage) (V, error)
	decodeList    func([]byte, informer.ListOptions) (RawList, error)
	decodeFrame   func(*Frame[V]) error
	classify      func(*StatusError) error
	onDecodeError func(error)
	revision      func(V) string
	codec         Codec
	framing       Framing
	stream        bool
	maxFrame      int
	maxListBytes  int64
	maxListItems  int
	headerTimeout time.Duration
	listTimeout   time.Duration
	watchGrace    time.Duration
	endAtTimeout  bool
	watchIdle     time.Duration
	maxRetryAfter time.Duration

	decodeErrors atomic.Uint64

	mu        sync.Mutex
	notBefore time.Time // no request before this time: the server asked to wait (Retry-After)
}

var (
	_ informer.ListerWatcher[int] = (*Client[int])(nil)
	_ informer.StreamingLister    = (*Client[int])(nil)
	_ informer.RevisionComparer   = OrderedClient[int]{}
)

// NewClient returns a client of the collection at baseURL (http or https).
func NewClient[V any](baseURL string, opts ClientOptions[V]) (*Client[V], error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("httpsource: NewClient: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("httpsource: NewClient: %q is not an http or https URL", baseURL)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("httpsource: NewClient: query of %q: %w", baseURL, err)
	}
	u.RawQuery, u.Fragment = "", ""
	hc := opts.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	c := &Client[V]{
		base:          *u,
		query:         q,
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
		codec:         opts.Codec,
		framing:       opts.Framing,
		stream:        opts.StreamingList,
		maxFrame:      orDefault(opts.MaxFrameSize, DefaultMaxFrameSize),
		maxListBytes:  orDefault(opts.MaxListBytes, DefaultMaxListBytes),
		maxListItems:  orDefault(opts.MaxListItems, DefaultMaxListItems),
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

// reportDecode counts and reports a skipped object.
func (c *Client[V]) reportDecode(err *DecodeError) {
	c.decodeErrors.Add(1)
	if c.onDecodeError != nil {
		c.onDecodeError(err)
	}
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
func (c *Client[V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	q := c.params()
	if opts.Limit > 0 {
		q.Set(paramLimit, strconv.FormatInt(opts.Limit, 10))
	}
	switch {
	case opts.Continue != "":
		q.Set(paramContinue, opts.Continue)
	case opts.Consistent:
	case opts.Revision != "":
		q.Set(paramResourceVersion, opts.Revision)
		q.Set(paramRVMatch, rvMatchNotOlderThan)
	default:
		q.Set(paramResourceVersion, "0")
	}
	req := c.request(q, c.codec.ContentType())
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
	if tm := (tooManyItems{}); errors.As(err, &tm) {
		return informer.List[V]{}, c.tooManyItems(req, tm.max)
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
	return informer.List[V]{Items: items, Revision: raw.Revision, Continue: raw.Continue}, nil
}

// readList reads a list body of at most maxListBytes bytes.
func (c *Client[V]) readList(resp *http.Response) ([]byte, error) {
	tooLong := func() error {
		return badInput("%s %s: the list response is longer than %d bytes (ClientOptions.MaxListBytes): ask for smaller pages or raise the limit",
			resp.Request.Method, redact(resp.Request.URL), c.maxListBytes)
	}
	if resp.ContentLength > c.maxListBytes && !resp.Uncompressed {
		return nil, tooLong()
	}
	size := 512
	if resp.ContentLength > 0 && !resp.Uncompressed {
		size = int(resp.ContentLength) + bytes.MinRead // ReadFrom wants MinRead free to see EOF
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, c.maxListBytes+1))
	if err != nil {
		return nil, err
	}
	if n > c.maxListBytes {
		return nil, tooLong()
	}
	return buf.Bytes(), nil
}

// splitList splits a list body with DecodeList or the codec.
func (c *Client[V]) splitList(body []byte, opts informer.ListOptions) (RawList, error) {
	switch {
	case c.decodeList != nil:
		return c.decodeList(body, opts)
	case c.codec == JSON:
		return decodeJSONList(body, c.maxListItems)
	}
	return c.codec.DecodeList(body)
}

func (c *Client[V]) tooManyItems(req *Request, max int) error {
	return badInput("%s %s: the list page has more than %d items (ClientOptions.MaxListItems): ask for smaller pages or raise the limit", req.Method, redact(req.URL), max)
}

func (c *Client[V]) listTimeoutError(req *Request) error {
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
// (or, without opts.Timeout, sent no frame for ClientOptions.WatchIdleTimeout; with
// ClientOptions.EndWatchAtTimeout, the Client ends the watch at opts.Timeout with io.EOF);
// informer.ErrBadInput for a frame that cannot be used (see Client); ctx.Err() once ctx is
// done; ErrWatchStopped after Stop. Stop and a cancelled ctx make a blocked Next return at
// once: the request is cancelled and the connection closed.
func (c *Client[V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	q := c.params()
	q.Set(paramWatch, "1")
	if opts.Revision != "" {
		q.Set(paramResourceVersion, opts.Revision)
	}
	if opts.AllowBookmarks {
		q.Set(paramAllowBookmarks, "true")
	}
	if opts.Timeout > 0 {
		q.Set(paramTimeoutSeconds, strconv.FormatInt(int64((opts.Timeout+time.Second-1)/time.Second), 10))
	}
	if opts.SendInitialEvents {
		if !c.stream {
			return nil, fmt.Errorf("httpsource: streaming list not enabled (ClientOptions.StreamingList): %w", informer.ErrNotSupported)
		}
		q.Set(paramSendInitialEvents, "true")
		q.Set(paramRVMatch, rvMatchNotOlderThan)
		q.Set(paramAllowBookmarks, "true")
	}
	req := c.request(q, c.framing.Accept(c.codec.ContentType()))
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
	w.opts, w.what = opts, req.Method+" "+redact(req.URL)
	if w.frame != nil {
		w.frame.Options = opts
	}
	switch {
	case opts.Timeout > 0 && c.endAtTimeout:
		w.limit = opts.Timeout
	case opts.Timeout > 0:
		w.limit = opts.Timeout + c.watchGrace
	default:
		w.limit, w.idle = c.watchIdle, true
	}
	// Armed once w.timer is set: expire reads it.
	w.timer = time.AfterFunc(math.MaxInt64, w.expire)
	w.timer.Reset(w.limit)
	return w, nil
}

func (c *Client[V]) newWatch(ctx context.Context, cancel context.CancelFunc, body io.ReadCloser) *watch[V] {
	w := &watch[V]{c: c, ctx: ctx, cancel: cancel, body: body, frames: c.framing.NewReader(body, c.maxFrame), items: itemDecoder[V]{custom: c.decode}}
	if c.decodeFrame != nil {
		w.frame = &Frame[V]{items: &w.items}
	}
	return w
}

// acceptable reports whether a response's Content-Type may be read as the media type
// asked for: absent, the same, a name of newline-delimited JSON when JSON was asked for,
// or anything when the request accepts anything.
func acceptable(contentType, accept string) bool {
	got, want := mediaType(contentType), mediaType(accept)
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

// params returns a copy of the base URL's query.
func (c *Client[V]) params() url.Values {
	q := make(url.Values, len(c.query)+6)
	for k, v := range c.query {
		q[k] = v
	}
	return q
}

// request returns the default request: GET of the base URL with the query.
func (c *Client[V]) request(q url.Values, accept string) *Request {
	u := c.base
	u.RawQuery = q.Encode()
	h := make(http.Header, 2)
	h.Set("Accept", accept)
	return &Request{Method: http.MethodGet, URL: &u, Header: h}
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
func (c *Client[V]) do(ctx context.Context, r *Request) (*http.Response, error) {
	if err := c.waitRetryAfter(ctx); err != nil {
		return nil, err
	}
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
		c.noteRetryAfter(err)
		return nil, err
	}
	if accept := req.Header.Get("Accept"); !acceptable(resp.Header.Get("Content-Type"), accept) {
		resp.Body.Close()
		return nil, badInput("%s: the response has Content-Type %q, want %q", what, mediaType(resp.Header.Get("Content-Type")), mediaType(accept))
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

// noteRetryAfter records the delay an error carries, if any: no request before it passes.
func (c *Client[V]) noteRetryAfter(err error) {
	d, ok := informer.RetryAfterOf(err)
	if !ok || d <= 0 {
		return
	}
	t := time.Now().Add(min(d, c.maxRetryAfter))
	c.mu.Lock()
	if t.After(c.notBefore) {
		c.notBefore = t
	}
	c.mu.Unlock()
}

// waitRetryAfter waits until the server's last Retry-After delay has passed.
func (c *Client[V]) waitRetryAfter(ctx context.Context) error {
	c.mu.Lock()
	d := time.Until(c.notBefore)
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
// request (TLS verification, a malformed URL, an HTTP protocol error).
func isNetworkError(err error) bool {
	var op *net.OpError
	var ne net.Error
	return errors.As(err, &op) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// isClassified reports whether err matches one of the informer's error classes.
func isClassified(err error) bool {
	return errors.Is(err, informer.ErrExpired) || errors.Is(err, informer.ErrRetryable) ||
		errors.Is(err, informer.ErrBadInput) || errors.Is(err, informer.ErrNotSupported)
}

// ErrWatchStopped is returned by a watch's Next after Stop.
var ErrWatchStopped = errors.New("httpsource: watch stopped")

// watch is one open watch response.
type watch[V any] struct {
	c       *Client[V]
	ctx     context.Context // the caller's, to tell its cancellation from ours
	cancel  context.CancelFunc
	body    io.ReadCloser
	frames  FrameReader
	items   itemDecoder[V]
	opts    informer.WatchOptions
	what    string // method and URL, for errors
	stopped atomic.Bool
	release sync.Once
	err     error // once set, Next returns it; Next's goroutine only

	frame *Frame[V] // with ClientOptions.DecodeFrame: the frame being delivered
	pos   int       // the next of frame.events to deliver

	timer   *time.Timer   // ends a watch the server does not end (nil in benchmarks)
	limit   time.Duration // the timer's duration
	idle    bool          // the timer restarts at every frame
	expired atomic.Bool   // the timer fired
}

// expire ends a watch that outlived its limit.
func (w *watch[V]) expire() {
	w.expired.Store(true)
	w.close()
}

// Next implements informer.Watch; see Client.Watch.
func (w *watch[V]) Next() (informer.Event[V], error) {
	if w.err != nil {
		return informer.Event[V]{}, w.err
	}
	var ev informer.Event[V]
	var err error
	if w.frame != nil {
		ev, err = w.nextCustom()
	} else {
		ev, err = w.next()
	}
	if err != nil {
		w.err = err
		w.close()
	}
	return ev, err
}

// readFrame reads the next frame and restarts an idle timer.
func (w *watch[V]) readFrame() ([]byte, error) {
	frame, err := w.frames.ReadFrame()
	if err != nil {
		return nil, w.readError(err)
	}
	if w.idle && !w.timer.Reset(w.limit) {
		// The timer fired while the frame was read: the watch is being closed.
		w.expired.Store(true)
		return nil, w.readError(io.ErrUnexpectedEOF)
	}
	return frame, nil
}

func (w *watch[V]) next() (informer.Event[V], error) {
	frame, err := w.readFrame()
	if err != nil {
		return informer.Event[V]{}, err
	}
	raw, err := w.c.codec.DecodeEvent(frame)
	if err != nil {
		return informer.Event[V]{}, fmt.Errorf("%w: %w", badInput("malformed watch frame %s", excerpt(frame)), err)
	}
	var typ informer.EventType
	switch raw.Type {
	case typeAdded:
		typ = informer.Added
	case typeModified:
		typ = informer.Modified
	case typeDeleted:
		typ = informer.Deleted
	case typeBookmark:
		if raw.Revision == "" {
			return informer.Event[V]{}, badInput("BOOKMARK event without a resourceVersion")
		}
		return informer.Event[V]{Type: informer.Bookmark, Revision: raw.Revision, EndOfInitialEvents: raw.EndOfInitialEvents}, nil
	case typeError:
		return informer.Event[V]{}, w.streamError(raw.Status)
	default:
		return informer.Event[V]{}, badInput("unknown watch event type %q", raw.Type)
	}
	if raw.Object == nil {
		return informer.Event[V]{}, badInput("%s event without an object", raw.Type)
	}
	obj, err := w.items.decode(raw.Object)
	if err != nil {
		return informer.Event[V]{}, fmt.Errorf("httpsource: %w: the object of a %s event: %w", informer.ErrDecode, raw.Type, err)
	}
	rev := raw.Revision
	if rev == "" && w.c.revision != nil {
		rev = w.c.revision(obj)
	}
	return informer.Event[V]{Type: typ, Object: obj, Revision: rev}, nil
}

// nextCustom delivers the events of frames decoded by ClientOptions.DecodeFrame.
func (w *watch[V]) nextCustom() (informer.Event[V], error) {
	f := w.frame
	for w.pos >= len(f.events) {
		clear(f.events)
		f.events, f.skipped, w.pos = f.events[:0], f.skipped[:0], 0
		data, err := w.readFrame()
		if err != nil {
			return informer.Event[V]{}, err
		}
		f.Data = data
		err = w.c.decodeFrame(f)
		f.Data = nil
		if err != nil {
			var se *StatusError
			switch {
			case errors.As(err, &se):
				return informer.Event[V]{}, w.streamError(se)
			case isClassified(err):
				return informer.Event[V]{}, fmt.Errorf("httpsource %s: %w", w.what, err)
			}
			return informer.Event[V]{}, fmt.Errorf("%w: %w", badInput("%s: watch frame %s", w.what, excerpt(data)), err)
		}
		for i := range f.events {
			if err := w.check(&f.events[i]); err != nil {
				return informer.Event[V]{}, err
			}
		}
		for _, err := range f.skipped {
			de := err.(*DecodeError)
			de.Request = w.what
			w.c.reportDecode(de)
		}
	}
	ev := f.events[w.pos]
	f.events[w.pos] = informer.Event[V]{} // the cache owns it now
	w.pos++
	return ev, nil
}

// check validates an event added by DecodeFrame and fills in its revision.
func (w *watch[V]) check(ev *informer.Event[V]) error {
	switch ev.Type {
	case informer.Bookmark:
		if ev.Revision == "" {
			return badInput("%s: DecodeFrame added a Bookmark without a revision", w.what)
		}
	case informer.Added, informer.Modified, informer.Deleted:
		if ev.Revision == "" && w.c.revision != nil {
			ev.Revision = w.c.revision(ev.Object)
		}
	default:
		return badInput("%s: DecodeFrame added an event of type %v", w.what, ev.Type)
	}
	return nil
}

// streamError is the error of an in-stream failure: an ERROR event, or a *StatusError
// returned by DecodeFrame.
func (w *watch[V]) streamError(se *StatusError) error {
	err := statusEventError(se, w.c.maxRetryAfter)
	if se != nil {
		se.Request = w.what
		w.c.applyClass(se)
	}
	w.c.noteRetryAfter(err)
	return err
}

// readError classifies an error from reading the stream.
func (w *watch[V]) readError(err error) error {
	switch {
	case w.stopped.Load():
		return ErrWatchStopped
	case w.ctx.Err() != nil:
		return w.ctx.Err()
	case w.expired.Load() && !w.idle && w.c.endAtTimeout:
		return io.EOF // the watch's time is up (ClientOptions.EndWatchAtTimeout)
	case w.expired.Load() && w.idle:
		return fmt.Errorf("httpsource %s: %w: no complete watch frame for %v (ClientOptions.WatchIdleTimeout): the server went silent; watching again", w.what, informer.ErrRetryable, w.limit)
	case w.expired.Load():
		return fmt.Errorf("httpsource %s: %w: the server did not end the watch within its timeout plus %v (ClientOptions.WatchGrace); watching again", w.what, informer.ErrRetryable, w.c.watchGrace)
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, informer.ErrBadInput):
		return err
	}
	return fmt.Errorf("httpsource %s: %w: watch connection lost: %w", w.what, informer.ErrRetryable, err)
}

// statusEventError is the error of an ERROR event.
func statusEventError(se *StatusError, maxRetryAfter time.Duration) error {
	if se == nil {
		se = &StatusError{}
	}
	if se.Code == 0 && se.Reason == "" && se.Message == "" {
		se.Message = "ERROR event without a status"
	}
	var d time.Duration
	if se.Details != nil && se.Details.RetryAfterSeconds > 0 {
		d = min(time.Duration(se.Details.RetryAfterSeconds)*time.Second, maxRetryAfter)
	}
	return withRetryAfter(se, d)
}

// excerpt quotes the start of a frame for an error message.
func excerpt(frame []byte) string {
	const n = 120
	if len(frame) > n {
		return strconv.Quote(string(frame[:n])) + "…"
	}
	return strconv.Quote(string(frame))
}

// Stop implements informer.Watch: it cancels the request and closes the connection, so
// that a Next blocked in a read returns at once with ErrWatchStopped.
func (w *watch[V]) Stop() {
	w.stopped.Store(true)
	w.close()
}

func (w *watch[V]) close() {
	w.release.Do(func() {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.cancel()
		w.body.Close()
	})
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

// CompareRevisions implements informer.RevisionComparer with CompareIntegerRevisions.
func (OrderedClient[V]) CompareRevisions(a, b string) (int, error) {
	return CompareIntegerRevisions(a, b)
}

// CompareIntegerRevisions compares two revisions written as non-negative decimal integers
// without leading zeros, of any length: -1, 0 or +1 as a is older than, equal to or newer
// than b. Anything else is an error.
func CompareIntegerRevisions(a, b string) (int, error) {
	if !isCanonicalInteger(a) {
		return 0, fmt.Errorf("httpsource: revision %q is not a decimal integer", a)
	}
	if !isCanonicalInteger(b) {
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

func isCanonicalInteger(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}
