package fanout

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/wire"
)

// PassThroughOptions configures a PassThrough. Every zero value is a documented default.
type PassThroughOptions[V any] struct {
	ServeOptions
	// Encode returns an object's JSON; nil means encoding/json.Marshal. It is called once
	// per object per request (per watcher, for watch events). An object that fails to
	// encode fails the list (500) or ends the watch with an ERROR event (500).
	Encode func(V) ([]byte, error)
}

// PassThrough serves any informer.ListerWatcher over HTTP in the protocol
// httpsource.Client speaks, passing each request through: a list request is one List
// call (the source's pages and continue tokens, as they are), a watch request one Watch
// call for as long as the watch lasts, with the source's revisions on the wire as they
// are. It adds authorization,
// validation, the limits on watches and lists (in all and per client), the watch
// lifetime, eviction of stalled clients and graceful shutdown, but no caching and
// no fan-out: every watcher is a watch on the source, and every event is encoded once per
// watcher. To serve many watchers from one upstream watch, put an informer in front and
// use Server.
//
// Revisions are the source's own, passed through in both directions: a PassThrough over an
// ordered source (source/etcd, source/memory) serves revisions that a client's
// WaitForRevision can use for read-your-writes, and two PassThroughs over one source serve the
// same revisions. The changes a source's watch says share a revision
// (informer.BatchedWatch: a fan-out Server's batch passed on by a Client, a transaction of
// a user's source) are sent as a batch, every one but the last with the partial mark ('~'
// after the revision), which a Client applies whole, so that its WaitForRevision never
// returns halfway through one; every other event stands alone.
//
// A delete whose source sent the key alone (informer.Event.LastStateUnknown) is sent as
// the key-only object with "lastStateUnknown":true in its frame: a Client passes the mark
// on, and a client informer hands OnDelete the state its cache held (see the package
// documentation).
//
// A source error is answered by its class: informer.ErrExpired → 410,
// informer.ErrTooManyRequests → 429, other informer.ErrRetryable → 503,
// informer.ErrNotSupported → 400, anything else → 500. A list with resourceVersion=0 asks
// the source for any state (ListOptions with no Revision), without resourceVersion for a
// consistent one; a watch without resourceVersion passes an empty WatchOptions.Revision on.
type PassThrough[V any] struct {
	h *handler[V]
}

// NewPassThrough returns a PassThrough that serves lw.
func NewPassThrough[V any](lw informer.ListerWatcher[V], opts PassThroughOptions[V]) *PassThrough[V] {
	encode := opts.Encode
	if encode == nil {
		encode = func(v V) ([]byte, error) { return json.Marshal(v) }
	}
	b := &passBackend[V]{lw: lw, encode: encode}
	return &PassThrough[V]{h: newHandler[V](b, newGate(opts.ServeOptions), newReporter(opts.ServeOptions, "fanout: pass-through", clock.Real{}), opts.ServeOptions)}
}

// ServeHTTP implements http.Handler; it answers GET only.
func (h *PassThrough[V]) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.h.ServeHTTP(w, r) }

// Shutdown stops serving, as Server.Shutdown does: new requests get 503, open watches end
// cleanly, and it waits for every request handler to return or for ctx.
func (h *PassThrough[V]) Shutdown(ctx context.Context) error { return h.h.Shutdown(ctx) }

// Stats returns the handler's counters, read now.
func (h *PassThrough[V]) Stats() ServeStats { return h.h.Stats().Read() }

// passBackend serves a ListerWatcher request for request, its revisions and continue
// tokens on the wire as they are.
type passBackend[V any] struct {
	lw     informer.ListerWatcher[V]
	encode func(V) ([]byte, error)
}

// List reads one page from the source: a continue token's, at rev ("0": any state), or
// a consistent one.
func (b *passBackend[V]) List(ctx context.Context, _ string, _ valueFilter, rev, cont string, limit int64) (page[V], error) {
	opts := informer.ListOptions{Limit: limit}
	switch {
	case cont != "":
		opts.Continue = cont
	case rev == "":
		opts.Consistent = true
	case rev != "0":
		opts.Revision = rev
	}
	l, err := b.lw.List(ctx, opts)
	if err != nil {
		return page[V]{}, err
	}
	return newPage[V](l.Revision, l.Continue, slices.Values(l.Items), nil), nil
}

// Watch opens one watch on the source (a PassThrough has no filters: the handler
// refuses any).
func (b *passBackend[V]) Watch(ctx context.Context, _ valueFilter, rev string, opts informer.WatchOptions) (informer.Watch[V], error) {
	opts.Revision = rev
	return b.lw.Watch(ctx, opts)
}

func (b *passBackend[V]) Ready() bool { return true }

func (b *passBackend[V]) AppendObject(dst []byte, v V) ([]byte, error) {
	j, err := b.encode(v)
	if err == nil {
		j, err = wire.CompactJSON(j)
	}
	if err != nil {
		return dst, err
	}
	return append(dst, j...), nil
}

func (b *passBackend[V]) AppendRevision(dst []byte, rev string) ([]byte, bool) {
	return append(dst, rev...), true
}

func (b *passBackend[V]) StaleState() (func() bool, string) { return nil, "" }

func (b *passBackend[V]) Filters() []string { return nil }

func (b *passBackend[V]) Policy() policy { return policy{} }
