package fanout

import (
	"errors"
	"log/slog"
	"net/http"
	"time"
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

// ServeOptions are the options Server and PassThrough share. Every zero value is a documented
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
	// reads. Behind middleware whose ResponseWriter cannot set a write deadline (one that
	// only flushes), the deadline is set on the connection ConnContext recorded: install
	// ConnContext, or such a stalled client is never cut. 0 means DefaultWriteTimeout;
	// negative means no timeout, which lets a stalled client hold its goroutine until it
	// goes away.
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
	// Logger receives a Debug line for every failure reported and, with no ErrorHandler,
	// the Warn lines of failures (see ErrorHandler); a panic of a watch is logged at Error
	// with its stack. Nil means slog.Default().
	Logger *slog.Logger
	// ErrorHandler receives failures the server cannot send to anyone: objects that fail to
	// encode, are too large or lose their key, filter index functions that fail, events of
	// an unknown type from the source, clients disconnected because they stalled
	// (WriteTimeout), lists cut because they were too slow, watches that panicked. Each
	// error names the server (`fanout: server for informer "items"`, or `fanout:
	// pass-through`), the object's key or the client's address, and says what to do. It
	// must not block. Nil means they are logged at Warn, at most one line per kind of
	// failure per 10 s, which counts the ones left out.
	ErrorHandler func(error)
}

// The errors an Authorize function returns to choose the status of a refusal. Wrap them
// to add detail: fmt.Errorf("token expired: %w", fanout.ErrUnauthorized).
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

// Message returns the message shown to the caller.
func (e *clientMessage) Message() string { return e.message }

// ServeStats are the counters of a Server or PassThrough, as Stats reads them: each
// counts from the server's start, but OpenWatches, which is the number open now. Each
// field is read atomically; together they are not one instant.
type ServeStats struct {
	Lists         uint64 // list requests served (200)
	Watches       uint64 // watches started (200)
	OpenWatches   int64  // watches open now
	Rejected      uint64 // watches refused by MaxWatchers or MaxWatchersPerClient (429)
	ListsRejected uint64 // lists refused by MaxLists or MaxListsPerClient (429)
	Evicted       uint64 // clients disconnected: a watcher fell behind the history (ERROR 410) or a watcher or list reader stalled (WriteTimeout)
	BadRequests   uint64 // requests refused with 400, 405 or 406
	Denied        uint64 // requests refused by Authorize (401, 403)
	EncodeErrors  uint64 // objects that could not be encoded
	TooLarge      uint64 // objects refused because their encoding is longer than MaxObjectSize (Server)
	IndexErrors   uint64 // objects a filter's index function failed or panicked on in the Server though the informer had indexed them (a function that is not pure): the object leaves that index's filters
}
