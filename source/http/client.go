package httpsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/informer-go/informer"
)

// DefaultMaxFrameSize is the longest watch frame a Client accepts when
// ClientOptions.MaxFrameSize is 0.
const DefaultMaxFrameSize = 16 << 20

// ClientOptions configures a Client. Every field is optional; each zero value is a
// documented default.
type ClientOptions[V any] struct {
	// HTTPClient sends the requests; nil means http.DefaultClient. TLS, proxies, dial and
	// header timeouts are configured there. Leave its Timeout at zero: it bounds a whole
	// request, a watch included, and would cut every watch short.
	HTTPClient *http.Client
	// PrepareRequest is called on every request before it is sent: set authentication
	// headers (a bearer token), tracing headers, extra query parameters. An error aborts
	// the request and is returned as is (wrapped).
	PrepareRequest func(*http.Request) error
	// Decode turns one encoded object (a list item, a watch event's object) into a V. It
	// may keep raw only if it copies it. Nil means encoding/json.Unmarshal into a new V.
	Decode func(raw json.RawMessage) (V, error)
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
	// MaxFrameSize bounds one watch frame in bytes; 0 means DefaultMaxFrameSize. A longer
	// frame ends the watch with an error that matches informer.ErrBadInput.
	MaxFrameSize int
}

// Client is an informer.ListerWatcher[V] for a collection served over HTTP in the
// Kubernetes list+watch protocol: by Server or Handler of this package, or by a
// Kubernetes API server's REST endpoint. It is safe for concurrent use.
//
// A list is GET <base>?limit=…&continue=…&resourceVersion=…; a watch is
// GET <base>?watch=1&resourceVersion=…&timeoutSeconds=…&allowWatchBookmarks=true, whose
// body streams one event per frame. Query parameters already in the base URL (a label
// selector, say) are kept on every request.
//
// Errors are classified for the informer (see StatusError): 410 → informer.ErrExpired; 429
// → informer.ErrTooManyRequests with the Retry-After delay (informer.RetryAfterOf);
// 503 → informer.ErrUnavailable; other 5xx and broken connections → informer.ErrRetryable;
// a refused connection → informer.ErrConnectionRefused; 400, 401, 403, 404 → a
// *StatusError of no class. Anything the server sends that cannot be used — a malformed
// list or frame, an unknown event type, an object Decode rejects, a stream cut inside a
// frame — matches informer.ErrBadInput: the watch ends, the informer lists again, and no
// event is ever half-delivered.
//
// After an answer with a Retry-After delay (429, 503, or an ERROR event with
// retryAfterSeconds) the client sends nothing to the server before the delay has passed: a
// List or Watch called meanwhile waits (or returns ctx.Err()). The informer waits too, but
// this keeps the promise even for callers that retry at once.
//
// A Client does not compare revisions; see Ordered.
type Client[V any] struct {
	base     url.URL
	query    url.Values
	hc       *http.Client
	prepare  func(*http.Request) error
	decode   func(json.RawMessage) (V, error)
	revision func(V) string
	codec    Codec
	framing  Framing
	stream   bool
	maxFrame int

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
	c := &Client[V]{
		base:     *u,
		query:    q,
		hc:       opts.HTTPClient,
		prepare:  opts.PrepareRequest,
		decode:   opts.Decode,
		revision: opts.Revision,
		codec:    opts.Codec,
		framing:  opts.Framing,
		stream:   opts.StreamingList,
		maxFrame: opts.MaxFrameSize,
	}
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	if c.codec == nil {
		c.codec = JSON
	}
	if c.framing == nil {
		c.framing = NDJSON
	}
	if c.maxFrame <= 0 {
		c.maxFrame = DefaultMaxFrameSize
	}
	return c, nil
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

// List implements informer.ListerWatcher: one GET, one page. The whole body is read into
// memory before it is decoded, so a page costs its size in memory; ask for pages
// (ListOptions.Limit) to bound it.
//
// The options map to the query as a Kubernetes API server expects: Continue → continue
// (and nothing else but limit); Consistent → no resourceVersion (the newest state);
// Revision → resourceVersion=R&resourceVersionMatch=NotOlderThan; neither →
// resourceVersion=0 (any state, a cache is fine).
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
	resp, err := c.do(ctx, q, c.codec.ContentType())
	if err != nil {
		return informer.List[V]{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		if ctx.Err() != nil {
			return informer.List[V]{}, ctx.Err()
		}
		return informer.List[V]{}, fmt.Errorf("httpsource: %w: list response cut: %w", informer.ErrRetryable, err)
	}
	raw, err := c.codec.DecodeList(body)
	if err != nil {
		return informer.List[V]{}, fmt.Errorf("%w: %w", badInput("malformed list response (Content-Type %q)", resp.Header.Get("Content-Type")), err)
	}
	items := make([]V, 0, len(raw.Items))
	dec := itemDecoder[V]{custom: c.decode}
	for i, it := range raw.Items {
		if string(it) == "null" {
			return informer.List[V]{}, badInput("list item %d is null", i)
		}
		v, err := dec.decode(it)
		if err != nil {
			return informer.List[V]{}, fmt.Errorf("httpsource: %w: list item %d: %w", informer.ErrDecode, i, err)
		}
		items = append(items, v)
	}
	return informer.List[V]{Items: items, Revision: raw.Revision, Continue: raw.Continue}, nil
}

// Watch implements informer.ListerWatcher: it sends the watch request and returns once the
// server has answered with its headers; events are read by Next. opts.Timeout is sent as
// timeoutSeconds (rounded up), for the server to end the watch cleanly; opts.Revision
// as resourceVersion; opts.AllowBookmarks as allowWatchBookmarks=true;
// opts.SendInitialEvents as sendInitialEvents=true (only with ClientOptions.StreamingList,
// else the error matches informer.ErrNotSupported).
//
// The watch holds one connection and no goroutine. Next returns, once the stream ends:
// io.EOF when the server ended it cleanly; an error matching informer.ErrExpired for an
// ERROR event with code 410; a classified *StatusError for other ERROR events; an error
// matching informer.ErrRetryable for a connection that broke between two events;
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
	accept := c.framing.Accept(c.codec.ContentType())
	wctx, cancel := context.WithCancel(ctx)
	resp, err := c.do(wctx, q, accept)
	if err != nil {
		cancel()
		return nil, err
	}
	if got, want := mediaType(resp.Header.Get("Content-Type")), mediaType(accept); got != "" && got != want && !(want == "application/json" && isJSONStream(got)) {
		resp.Body.Close()
		cancel()
		return nil, badInput("watch response has Content-Type %q, want %q", got, want)
	}
	return c.newWatch(ctx, cancel, resp.Body), nil
}

func (c *Client[V]) newWatch(ctx context.Context, cancel context.CancelFunc, body io.ReadCloser) *watch[V] {
	return &watch[V]{c: c, ctx: ctx, cancel: cancel, body: body, frames: c.framing.NewReader(body, c.maxFrame), items: itemDecoder[V]{custom: c.decode}}
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

// do sends a GET with the query and returns a 200 response, or a classified error.
func (c *Client[V]) do(ctx context.Context, q url.Values, accept string) (*http.Response, error) {
	if err := c.waitRetryAfter(ctx); err != nil {
		return nil, err
	}
	u := c.base
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("httpsource: %w", err)
	}
	req.Header.Set("Accept", accept)
	if c.prepare != nil {
		if err := c.prepare(req); err != nil {
			return nil, fmt.Errorf("httpsource: PrepareRequest: %w", err)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := statusFromResponse(resp)
		resp.Body.Close()
		c.noteRetryAfter(err)
		return nil, err
	}
	return resp, nil
}

// noteRetryAfter records the delay an error carries, if any: no request before it passes.
func (c *Client[V]) noteRetryAfter(err error) {
	d, ok := informer.RetryAfterOf(err)
	if !ok || d <= 0 {
		return
	}
	t := time.Now().Add(d)
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
func transportError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("httpsource: %w: %w", informer.ErrConnectionRefused, err)
	}
	if isNetworkError(err) {
		return fmt.Errorf("httpsource: %w: %w", informer.ErrRetryable, err)
	}
	return fmt.Errorf("httpsource: %w", err)
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
	stopped atomic.Bool
	release sync.Once
	err     error // once set, Next returns it; Next's goroutine only
}

// Next implements informer.Watch; see Client.Watch.
func (w *watch[V]) Next() (informer.Event[V], error) {
	if w.err != nil {
		return informer.Event[V]{}, w.err
	}
	ev, err := w.next()
	if err != nil {
		w.err = err
		w.close()
	}
	return ev, err
}

func (w *watch[V]) next() (informer.Event[V], error) {
	frame, err := w.frames.ReadFrame()
	if err != nil {
		return informer.Event[V]{}, w.readError(err)
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
		err := statusEventError(raw.Status)
		w.c.noteRetryAfter(err)
		return informer.Event[V]{}, err
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

// readError classifies an error from reading the stream.
func (w *watch[V]) readError(err error) error {
	switch {
	case w.stopped.Load():
		return ErrWatchStopped
	case w.ctx.Err() != nil:
		return w.ctx.Err()
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, informer.ErrBadInput):
		return err
	}
	return fmt.Errorf("httpsource: %w: watch connection lost: %w", informer.ErrRetryable, err)
}

// statusEventError is the error of an ERROR event.
func statusEventError(se *StatusError) error {
	if se == nil {
		se = &StatusError{}
	}
	if se.Code == 0 && se.Reason == "" && se.Message == "" {
		se.Message = "ERROR event without a status"
	}
	var d time.Duration
	if se.Details != nil && se.Details.RetryAfterSeconds > 0 {
		d = time.Duration(se.Details.RetryAfterSeconds) * time.Second
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
