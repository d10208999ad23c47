package httpsource

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// The defaults of the limits of ClientOptions; a zero option means its default.
const (
	// DefaultMaxFrameSize is the longest watch frame a Client accepts: 16 MiB.
	DefaultMaxFrameSize = wire.DefaultMaxFrameSize
	// DefaultMaxListBytes is the largest list response body a Client reads, after any
	// decompression: 256 MiB.
	DefaultMaxListBytes = 256 << 20
	// DefaultMaxListItems is the largest number of items a Client accepts in one list
	// page: 1,000,000.
	DefaultMaxListItems = 1_000_000
	// DefaultMaxBatch is the largest number of events a Client holds of one batch (see
	// ClientOptions.MaxBatch): DefaultMaxListItems, since a replay of the state is a batch.
	DefaultMaxBatch = DefaultMaxListItems
	// DefaultMaxBatchBytes bounds the frames a Client reads while it holds one batch:
	// DefaultMaxListBytes, since a replay of the state is a batch.
	DefaultMaxBatchBytes = DefaultMaxListBytes
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
	// Filter asks a Server for the objects under one value of one of its filter indexes
	// (index=…&value=… on every list and watch): the cache then holds exactly those. The
	// zero Filter asks for everything. See Filter.
	Filter Filter
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
	ListRequest func(req *OutgoingRequest, opts informer.ListOptions) error
	// WatchRequest, if set, shapes every watch request, as ListRequest does lists; the
	// default is described at Client.Watch.
	WatchRequest func(req *OutgoingRequest, opts informer.WatchOptions) error
	// Decode turns one encoded object (a list item, a watch event's object) into a V. It
	// may keep raw only if it copies it. Nil means encoding/json.Unmarshal into a new V.
	// An item it rejects is skipped and reported (see OnDecodeError).
	Decode func(raw json.RawMessage) (V, error)
	// DecodeList, if set, splits a list response body instead of EnvelopeCodec. It gets
	// the options of the request that fetched the body, so that it can report the
	// revision and continue token from the request's side: an API whose later pages carry
	// the store's current revision, not the one the list is pinned to, keeps the pinned one
	// in the continue token it makes. The items it returns go to Decode one by one. It runs
	// on the goroutine of List, with no state shared between calls but what it closes over.
	// An error matching no informer class is reported as malformed input
	// (informer.ErrBadInput).
	DecodeList func(body []byte, opts informer.ListOptions) (RawList, error)
	// DecodeFrame, if set, decodes each watch frame instead of EnvelopeCodec and
	// Decode: it adds zero or more events to the Frame (changes, or a Bookmark), skips an
	// object it cannot decode with Frame.Skip, or returns an error that ends the watch: a
	// *StatusError (classified as a server's answer is, with Classify), an error that
	// matches an informer class, or any other error, which is reported as malformed input
	// (informer.ErrBadInput). The frame's events are delivered only if it returns nil.
	// A Deleted event of an API that sends a delete's key without the object's last state
	// sets informer.Event.LastStateUnknown: OnDelete then receives the informer's cached
	// state (examples/etcdgateway does, for etcd's JSON gateway).
	DecodeFrame func(f *Frame[V]) error
	// Classify, if set, sorts every failure the server reports — a response whose status
	// is not 200, an ERROR event, a *StatusError returned by DecodeFrame — into the
	// informer's error classes: it returns informer.ErrExpired, informer.ErrRetryable,
	// informer.ErrTooManyRequests, informer.ErrUnavailable, informer.ErrBadInput, or nil to
	// keep the default classification (see StatusError). The StatusError holds the status
	// code, the body as read (StatusError.Body) and what could be read from it.
	Classify func(se *StatusError) error
	// OnDecodeError, if set, also receives every object the Client skipped because Decode
	// (or DecodeFrame, through Frame.Skip) rejected it, as a *DecodeError, which matches
	// informer.ErrDecode and informer.ErrBadInput. The informers built over the Client get
	// them anyway (informer.New hands the Client its error sink: see ReportErrorsTo); this
	// is for a program that wants them elsewhere too. DecodeErrors counts them either way.
	OnDecodeError func(error)
	// Revision returns an object's revision. It is used for watch events whose frame
	// carries none (see RawEvent.Revision); a server of this package always sends one, and
	// a Kubernetes API server's objects carry metadata.resourceVersion, which the JSON
	// codec reads, so it is rarely needed.
	Revision func(V) string
	// EnvelopeCodec splits list pages and watch frames; nil means JSON.
	EnvelopeCodec EnvelopeCodec
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
	// MaxListBytes bounds a list response body in bytes, counted after any decompression
	// (a gzip body the transport leaves compressed, because a hook asked for it with
	// Accept-Encoding, is decompressed by the Client and counted as decompressed);
	// 0 means DefaultMaxListBytes (256 MiB). A longer body fails the List with an error
	// that matches informer.ErrBadInput; ask for pages (informer.Options.PageSize) to stay
	// under it.
	MaxListBytes int64
	// MaxListItems bounds the items of one list page; 0 means DefaultMaxListItems
	// (1,000,000). A page with more fails the List with an error that matches
	// informer.ErrBadInput, found while the page is split, before any item is decoded.
	MaxListItems int
	// MaxBatch bounds the events a watch holds of one batch — the changes a server marks
	// as one revision ("11~", …, "11"), the initial events of a streaming list or replay
	// included — until the batch's last event comes; 0 means DefaultMaxBatch. A longer
	// batch ends the watch with an error that matches informer.ErrBadInput, and the
	// informer lists again: a server that never ends a batch cannot make the Client hold
	// more than this.
	MaxBatch int
	// MaxBatchBytes bounds the bytes of the frames read while one batch is held, as
	// MaxListBytes bounds a list; 0 means DefaultMaxBatchBytes. Beyond it the watch ends
	// as beyond MaxBatch.
	MaxBatchBytes int64
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
	// fails with an error that matches informer.ErrRetryable. Whatever the timeout, a
	// watch that asked for bookmarks from a server that tells its bookmark interval (a
	// Server does, in the header Informer-Bookmark-Interval) is bounded the same way by
	// twice that interval, if shorter: a Server gone silent is noticed within two of its
	// bookmark intervals (2 minutes by default), not at the end of the watch's timeout.
	WatchIdleTimeout time.Duration
	// MaxRetryAfter caps the delay of a server's Retry-After header or retryAfterSeconds;
	// 0 means DefaultMaxRetryAfter (5 minutes). A longer delay is cut to it.
	MaxRetryAfter time.Duration
	// FailoverURLs are more URLs of the same collection with the same revisions: replicas
	// of a Server over informers of one ordered source (see Server). The Client sends its
	// requests to the URL given to NewClient until one fails with an error another
	// replica may not have — a refused or broken connection (a watch cut included), a
	// timeout, a 5xx answer such as a replica's 503 while it catches up — then to the
	// next URL, in order, wrapping around; it stays on a URL while it answers. The
	// informer then watches again from its revision at the next replica, without a
	// relist when the revision is within that replica's history. A Retry-After delay
	// holds back requests to the URL that gave it only: a failure that moves the Client
	// on (a replica shutting down answers 503 with one) is retried at the next URL at
	// once. Nil: one URL.
	FailoverURLs []string
}

// OutgoingRequest is a request a Client is about to send, as ClientOptions.ListRequest
// and ClientOptions.WatchRequest see and may change it. The Client then builds the
// http.Request from it, calls PrepareRequest and sends it.
type OutgoingRequest struct {
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

	target int // the index of the Client's URL the request was made for
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
// Changes added one after another at one revision are one batch (a transaction): the
// informer counts the revision reached, for WaitForRevision, only once the last of them
// is in its cache.
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
