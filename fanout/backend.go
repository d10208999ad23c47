package fanout

import (
	"context"

	"github.com/informer-go/informer"
)

// backend is what a handler serves, and all it knows of it: a Server's log, snapshots
// and filter indexes, or a PassThrough's ListerWatcher. Revisions and continue tokens
// are given and taken in their wire form.
type backend[V any] interface {
	// List returns the page a list request asks for: with filter f (zero: none), at
	// resourceVersion rev ("" for a consistent state, "0" for any), continuing cont,
	// at most limit items (0: all). It waits, bounded, for a revision not reached yet.
	// An error of the request's revision or token is a *requestError.
	List(ctx context.Context, client string, f valueFilter, rev, cont string, limit int64) (page[V], error)
	// Watch opens the watch of opts with filter f, from the wire revision rev ("": none;
	// opts.Revision is then ""), waiting for rev as List does. Errors as for List.
	Watch(ctx context.Context, f valueFilter, rev string, opts informer.WatchOptions) (informer.Watch[V], error)
	// Ready reports whether the backend serves: a Server has synced.
	Ready() bool
	// AppendObject appends the JSON of v.
	AppendObject(dst []byte, v V) ([]byte, error)
	// AppendRevision appends the wire form of a revision of the backend's watch,
	// unquoted, and reports whether it is the newest the backend has (so that buffered
	// frames should be sent).
	AppendRevision(dst []byte, rev string) ([]byte, bool)
	// StaleState returns a check that the state a streaming list opened now sends has
	// left the history, and that state's wire revision; nil: never (a PassThrough).
	StaleState() (stale func() bool, rev string)
	// Filters returns the names of the filter indexes served, sorted; none for a
	// PassThrough.
	Filters() []string
	// Policy returns what the backend asks of the handler beyond the protocol.
	Policy() policy
}
