package fanout

import (
	"context"
	"encoding/json"
	"net/http"

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
// A source error is answered by its class: informer.ErrExpired → 410,
// informer.ErrTooManyRequests → 429, other informer.ErrRetryable → 503,
// informer.ErrNotSupported → 400, anything else → 500. A list with resourceVersion=0 asks
// the source for any state (ListOptions with no Revision), without resourceVersion for a
// consistent one; a watch without resourceVersion passes an empty WatchOptions.Revision on.
type PassThrough[V any] struct {
	core core[V]
}

// NewPassThrough returns a PassThrough that serves lw.
func NewPassThrough[V any](lw informer.ListerWatcher[V], opts PassThroughOptions[V]) *PassThrough[V] {
	encode := opts.Encode
	if encode == nil {
		encode = func(v V) ([]byte, error) { return json.Marshal(v) }
	}
	h := &PassThrough[V]{}
	h.core.lw = lw
	h.core.appendObject = func(dst []byte, v V) ([]byte, error) {
		b, err := encode(v)
		if err == nil {
			b, err = wire.CompactJSON(b)
		}
		if err != nil {
			return dst, err
		}
		return append(dst, b...), nil
	}
	h.core.revs = identityRevisions{}
	h.core.init(opts.ServeOptions, "fanout: pass-through", clock.Real{})
	return h
}

// ServeHTTP implements http.Handler; it answers GET only.
func (h *PassThrough[V]) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.core.ServeHTTP(w, r) }

// Shutdown stops serving, as Server.Shutdown does: new requests get 503, open watches end
// cleanly, and it waits for every request handler to return or for ctx.
func (h *PassThrough[V]) Shutdown(ctx context.Context) error { return h.core.shutdown(ctx) }

// Stats returns the handler's counters, read now.
func (h *PassThrough[V]) Stats() ServeStats { return h.core.stats.read() }

// identityRevisions puts the source's revisions and tokens on the wire unchanged.
type identityRevisions struct{}

func (identityRevisions) watchRevision(onWire string) (string, error) { return onWire, nil }
func (identityRevisions) listRevision(onWire string) (string, error)  { return onWire, nil }
func (identityRevisions) appendWire(dst []byte, rev string) ([]byte, bool) {
	return append(dst, rev...), true
}
func (identityRevisions) continueToken(onWire string) (string, error) { return onWire, nil }
func (identityRevisions) appendContinue(dst []byte, tok string) []byte {
	return append(dst, tok...)
}
