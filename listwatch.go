package informer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ListerWatcher is a source: a collection that can be listed and whose changes can be
// streamed. It is the only thing an Informer needs to know about where its data lives.
//
// A source identifies states of the collection by revisions, opaque strings that the source
// chooses (an etcd revision, a Kubernetes resourceVersion, an HTTP stream cursor). A source
// whose revisions are ordered implements RevisionComparer as well; that turns on
// Informer.WaitForRevision and the check that a stream never goes back in time.
//
// Both methods must return promptly once ctx is cancelled. Errors are classified with
// errors.Is against ErrExpired and ErrRetryable (see those); any other error makes the
// informer back off and list again.
//
// A source may also implement optional capabilities, each an interface of one method that
// New (or the reflector, for a Watch) finds with a type assertion; this is the complete
// list, and SOURCES.md at the root of the repository says when to implement which:
//
//   - RevisionComparer: the source's revisions are ordered. Turns on WaitForRevision and
//     the check that a stream never goes back in time.
//   - PageSizer: the page size the source serves best, used when Options.PageSize is 0.
//   - StreamingLister: the source can serve a list as the start of a watch.
//   - ErrorReporting: the source reports errors it finds without failing a call (an object
//     it could not decode) to the informer's ReportError.
//   - SourceIdentifier: the source says which collection and history it serves, so that a
//     warm restart restores a saved cache only into the same one.
//   - HistoryProver: the source checks that a saved cache is its own state at the saved
//     revision, so that a warm restart does not trust a state of another history (a
//     cluster restored from a backup keeps its identity but not its history).
//   - BatchedWatch (on a Watch, not the source): several changes at one revision (a
//     transaction) reach the cache in one write, and their revision is reached only then.
type ListerWatcher[V any] interface {
	// List returns one page of the collection. The first page is requested with an empty
	// ListOptions.Continue; every later page with the Continue token of the page before, and
	// all pages of one list must reflect the same revision, the one the first page reports.
	List(ctx context.Context, opts ListOptions) (List[V], error)

	// Watch streams the changes made after opts.Revision, in revision order. If that
	// revision is no longer available the source returns an error that matches ErrExpired,
	// either from Watch itself or from Watch.Next.
	//
	// A revision newer than any the source has reached is refused the same way, not
	// waited for without bound: it comes from another history (a replaced cluster, a
	// reset server, a state saved from another source), and a watch that waited for it
	// would keep the other history's objects. (A source whose replicas may lag may first
	// wait a bounded time for the revision.) List refuses a ListOptions.Revision it has
	// not reached likewise.
	Watch(ctx context.Context, opts WatchOptions) (Watch[V], error)
}

// ListOptions selects one page of a list.
type ListOptions struct {
	// Revision is the oldest revision the list may reflect: the list must be at least as
	// fresh as Revision. Empty means the source may answer from any revision it likes
	// (a cache, say) unless Consistent is set.
	Revision string
	// Consistent asks for the newest state of the collection (a quorum read), not a
	// possibly stale cached one. The reflector sets it only when a list at a Revision
	// answered ErrExpired or was older than Revision: the source cannot serve it.
	Consistent bool
	// Limit is the largest number of items the page may hold; 0 means no limit.
	Limit int64
	// Continue is the token of the previous page, empty for the first page.
	Continue string
}

// List is one page of a list.
type List[V any] struct {
	// Items are the objects of this page. The slice belongs to the caller, which may
	// change it; the objects themselves are not changed.
	Items []V
	// Revision is the revision the whole list reflects; every page of one list reports the
	// same one.
	Revision string
	// Continue is the token for the next page; empty on the last page.
	Continue string
	// Bytes is the size of the page as the source received it, when it knows it (0 when
	// not): the informer's log says how many bytes a long list has read so far.
	Bytes int64
}

// WatchOptions configures a watch.
type WatchOptions struct {
	// Revision is the revision to stream changes after. Events with this revision or older
	// are not sent.
	Revision string
	// Timeout asks the source to end the watch cleanly after this long (the reflector
	// randomises it so that reconnects spread out); 0 means no timeout.
	Timeout time.Duration
	// AllowBookmarks tells the source that it may send Bookmark events.
	AllowBookmarks bool
	// SendInitialEvents asks a source that implements StreamingLister to start the stream
	// with the current state as Added events followed by a Bookmark whose
	// EndOfInitialEvents is set (a streaming list). Sources that do not support it return
	// an error that matches ErrNotSupported.
	SendInitialEvents bool
}

// Watch is an open stream of changes. It is used by one goroutine at a time.
type Watch[V any] interface {
	// Next blocks until the next event and returns it. It returns io.EOF when the stream
	// ended normally (a server-side timeout, say); any other error ends the stream too,
	// classified like the errors of ListerWatcher. After Stop, or once the context given
	// to ListerWatcher.Watch is cancelled, Next returns promptly with an error.
	Next() (Event[V], error)
	// Stop ends the stream and releases its resources. It is safe to call more than once
	// and from any goroutine.
	Stop()
}

// BatchedWatch is implemented by a Watch whose source changes several objects at one
// revision (an etcd transaction; a batch of a source/http Server over an ordered
// upstream) and whose Next returns such changes one by one from what it has received
// whole. The informer holds such changes back until the last of them has arrived and
// writes them to its cache together, so that no read (an Informer's read methods, a
// Snapshot), no WaitForRevision and no state a Persister saves holds part of them. A
// transaction larger than a batch (Options.MaxBatch keys) or than Options.MaxPending
// changes is written in parts; until its last part is in, the cache's state is not exact,
// so no revision is reached and nothing is saved, but a read may see the parts written
// (under the revision last reached). A Watch that does not implement BatchedWatch has
// every event taken as the last of its revision.
type BatchedWatch interface {
	// MoreAtRevision reports whether the event Next returned last is followed by more
	// events of the same revision (the source's own revision, not a label derived from
	// it), which Next will return next without waiting; or, for a transaction the stream
	// cannot deliver whole, ends the stream with an error that makes the informer list
	// again.
	MoreAtRevision() bool
}

// EventType is the kind of a watch event.
type EventType uint8

// The kinds of watch events.
const (
	// Added: an object was created.
	Added EventType = iota + 1
	// Modified: an object changed.
	Modified
	// Deleted: an object was removed. The event's Object is its last state, or its key
	// alone when the event's LastStateUnknown is set.
	Deleted
	// Bookmark: no object changed, but every change up to the event's Revision has been
	// sent. The event's Object is not used.
	Bookmark
)

// String returns the name of the event type.
func (t EventType) String() string {
	switch t {
	case Added:
		return "Added"
	case Modified:
		return "Modified"
	case Deleted:
		return "Deleted"
	case Bookmark:
		return "Bookmark"
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one change in a watch stream.
type Event[V any] struct {
	// Type says what happened: Added, Modified, Deleted or Bookmark. Any other value is
	// bad input: the watch fails and the informer lists again.
	Type EventType
	// Object is the new state (Added, Modified) or the last state (Deleted). For Deleted, a
	// source that does not know the last state must still return an object from which the
	// informer's key function can compute the key, and set LastStateUnknown.
	Object V
	// Revision is the revision of the collection after this change.
	Revision string
	// LastStateUnknown says, on a Deleted event, that Object carries the key alone, not
	// the object's last state: the source could not send it (etcd compacted the last value
	// away before the watch delivered the delete; a PostgreSQL delete carries only the
	// key columns). The informer then hands OnDelete the state its cache holds for the
	// key, the last one its handlers were given, and calls no index function on Object.
	// OnDelete's finalStateUnknown stays false: the delete was observed, in order, and
	// the cached state is the last the informer was sent (the object's final state unless
	// the source skipped a later change it could not decode, which it reported). A key
	// the cache does not hold is not notified, as for any delete. On other event types
	// it is ignored.
	LastStateUnknown bool
	// EndOfInitialEvents marks, on a Bookmark, the end of the initial events of a streaming
	// list (see WatchOptions.SendInitialEvents).
	EndOfInitialEvents bool
}

// RevisionComparer is implemented by sources whose revisions are ordered. It enables
// Informer.WaitForRevision and the reflector's check that revisions never go backwards.
type RevisionComparer interface {
	// CompareRevisions returns -1, 0 or +1 as a is older than, equal to or newer than b, or
	// an error if either is not a revision of this source.
	CompareRevisions(a, b string) (int, error)
}

// StreamingLister is implemented by sources that can serve a list as the start of a watch
// (Kubernetes' WatchList): Watch with WatchOptions.SendInitialEvents set streams the current
// state as Added events, then a Bookmark with EndOfInitialEvents, then changes. The reflector
// uses it instead of List when StreamingList reports true, and falls back to List if the
// watch fails with ErrNotSupported.
type StreamingLister interface {
	// StreamingList reports whether the source serves streaming lists now.
	StreamingList() bool
}

// PageSizer is implemented by a source that knows which page size it serves best, for
// example because each page costs it more than the objects it holds (etcd counts the rest
// of the range on every page). The informer uses DefaultPageSize when Options.PageSize is
// 0: a positive value is the page size, a negative one means no paging, and 0 means the
// informer's default of 500.
type PageSizer interface {
	// DefaultPageSize returns the page size the source serves best.
	DefaultPageSize() int64
}

// ErrorReporting is implemented by a source that finds errors without failing a call: an
// object it could not decode and skipped, say. New calls ReportErrorsTo with a function
// that passes an error to the new informer's ReportError, so that such errors reach that
// informer's ErrorHandler, its log and its Stats with no wiring by the user. A source given
// to several informers should report to each of them. The function holds the informer
// weakly: a source that outlives an informer does not keep it or its cache, and once the
// informer has stopped (or is collected) the function does nothing: what the source reports
// then comes from other informers' calls. What stays with the source for each
// informer ever built over it is that function, about 50 bytes, called only when the
// source reports an error.
type ErrorReporting interface {
	// ReportErrorsTo adds report to the functions the source reports its errors to.
	ReportErrorsTo(report func(error))
}

// SourceIdentifier is implemented by a source that can say which collection it serves and
// which history its revisions belong to. Two sources answer the same identity only if
// each accepts the other's revisions with the same meaning: the same cluster and prefix
// of etcd, the same server process behind a URL, the same Source value in memory. A
// warm restart (Options.Persist) restores a saved cache only into a source of the same
// identity; a source that does not implement it is taken to be the one the state was
// saved from. The informer calls SourceID before it loads a saved state (waiting for a
// source that does not answer, or serving the state unconfirmed: see
// Options.ServeUnconfirmed) and before each save; a save whose call fails uses the
// identity the source gave before, or is skipped if it never gave one.
type SourceIdentifier interface {
	// SourceID returns the source's identity, an opaque string. It may ask the source
	// (one round trip) and must return promptly once ctx is done.
	SourceID(ctx context.Context) (string, error)
}

// HistoryProver is implemented by a source that can check, for much less than a list
// costs, that a saved state is the state its own history had at a revision. A source keeps
// its identity (SourceIdentifier) across a restore from a backup, but the restored
// history after the backup's revision is another one: a saved cache at a revision past
// the backup's names a state the source never had. At a warm restart (Options.Persist)
// the informer calls ProveHistory before it trusts a loaded state; on a running watch, a
// source that sees its history change (a revision going backwards) fails the watch with
// an error matching ErrOtherHistory, and the informer lists again as after an expiry.
type HistoryProver interface {
	// ProveHistory checks that the source held, at rev, exactly one object for each of
	// revisions, which are the objects' own revisions (Options.Revision) of a saved
	// state at rev, in no particular order; an entry is "" when the informer has no
	// Options.Revision, and then only the number of objects is compared. It returns
	// nil when the state is the source's, an error matching ErrOtherHistory when it is
	// not, one matching ErrExpired when the source no longer keeps rev (the watch from
	// rev will expire and the informer relist), and any other error when it could not
	// ask. It must return promptly once ctx is done.
	ProveHistory(ctx context.Context, rev string, revisions []string) error
}

// The error classes a source sorts its errors into. Match them with errors.Is. Their
// messages carry no "informer:" prefix: they are wrapped into errors that already say
// which informer and which call they come from.
var (
	// ErrExpired means the requested revision is no longer available (compacted, or too old
	// for the server's history). The informer lists again, asking for a consistent list.
	ErrExpired = errors.New("revision expired")

	// ErrRetryable means the failure is transient and the current revision is still good:
	// the informer backs off and watches again from the same revision, without a relist.
	// ErrTooManyRequests, ErrUnavailable and ErrConnectionRefused all match it.
	ErrRetryable = errors.New("retryable")

	// ErrTooManyRequests means the source is shedding load (HTTP 429). Wrap it with
	// RetryAfter to say how long to wait.
	ErrTooManyRequests error = &classError{msg: "too many requests", class: ErrRetryable}

	// ErrUnavailable means the source is temporarily unable to serve (HTTP 503, no leader).
	ErrUnavailable error = &classError{msg: "source unavailable", class: ErrRetryable}

	// ErrConnectionRefused means the source could not be reached.
	ErrConnectionRefused error = &classError{msg: "connection refused", class: ErrRetryable}

	// ErrNoProgress means a source call made no progress within Options.ProgressTimeout:
	// a list page that did not return, a watch that sent nothing. The informer ended the
	// call and tries again. It matches ErrRetryable.
	ErrNoProgress error = &classError{msg: "no progress from the source", class: ErrRetryable}

	// ErrOtherHistory means the source's revisions no longer belong to the history the
	// informer followed: a revision went backwards, the source was restored from a
	// backup or replaced, or a saved state is not the source's state at its revision
	// (see HistoryProver). It matches ErrExpired: the informer lists again, and handlers
	// hear only the differences.
	ErrOtherHistory error = &classError{msg: "another history of the source", class: ErrExpired}

	// ErrNotSupported means the source does not support what was asked (a streaming list).
	ErrNotSupported = errors.New("not supported by the source")

	// ErrBadInput means the source sent something the informer cannot use: a malformed
	// page, an unknown event type, a revision older than one already seen. The informer
	// reports it and lists again.
	ErrBadInput = errors.New("bad input from source")

	// ErrDecode means the source could not decode an object it received. It matches
	// ErrBadInput, and is counted apart (Stats.DecodeErrors, the "decode" kind of the
	// metrics' error counter).
	ErrDecode error = &classError{msg: "object cannot be decoded", class: ErrBadInput}
)

// classError is a sentinel that also matches its class.
type classError struct {
	msg   string
	class error
}

// Error returns the class's message.
func (e *classError) Error() string { return e.msg }

// Is reports whether target is the error's class.
func (e *classError) Is(target error) bool { return target == e.class }

// RetryAfter wraps err with the delay the source asked for (an HTTP Retry-After header).
// The informer waits at least that long before it retries.
func RetryAfter(err error, after time.Duration) error {
	return &retryAfterError{err: err, after: after}
}

type retryAfterError struct {
	err   error
	after time.Duration
}

// Error returns the wrapped error's message with the delay.
func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.err, e.after)
}

// Unwrap returns the wrapped error.
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfterOf returns the delay carried by an error made with RetryAfter, if any.
func RetryAfterOf(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after, true
	}
	return 0, false
}

// ListerWatcherFuncs adapts two functions into a ListerWatcher. Both are required: New
// refuses a ListerWatcherFuncs with a nil function.
type ListerWatcherFuncs[V any] struct {
	// ListFunc serves List.
	ListFunc func(ctx context.Context, opts ListOptions) (List[V], error)
	// WatchFunc serves Watch.
	WatchFunc func(ctx context.Context, opts WatchOptions) (Watch[V], error)
}

// List calls ListFunc.
func (f ListerWatcherFuncs[V]) List(ctx context.Context, opts ListOptions) (List[V], error) {
	return f.ListFunc(ctx, opts)
}

// Watch calls WatchFunc.
func (f ListerWatcherFuncs[V]) Watch(ctx context.Context, opts WatchOptions) (Watch[V], error) {
	return f.WatchFunc(ctx, opts)
}
