package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"

	"github.com/informer-go/informer"
)

// errWatchStopped is what Next returns after Stop.
var errWatchStopped = errors.New("etcd: watch stopped")

// Watch streams the changes under the prefix made after opts.Revision (empty: after the
// moment the watch starts), in revision order. It opens an etcd watch with
// WithRequireLeader and WithPrevKV, and with WithProgressNotify when opts.AllowBookmarks
// is set, and returns once etcd has accepted it.
//
// Each etcd event becomes one informer event whose Revision is the event's ModRevision.
// The events of one etcd transaction share its revision R, and the watch is an
// informer.BatchedWatch: MoreAtRevision reports, after each of them but the last, that
// more of R follow, so that the informer applies the transaction whole, and
// Informer.WaitForRevision(R), a Snapshot at R and a snapshot persisted at R never hold
// part of it. Progress notifications become Bookmark
// events if opts.AllowBookmarks is set and are dropped otherwise; when the last events of
// a transaction were skipped because they did not decode, a Bookmark at its revision
// stands in for them (again only if bookmarks are allowed).
//
// The stream ends with io.EOF once opts.Timeout has passed (0: never), and never in the
// middle of a transaction. It ends with an error matching informer.ErrExpired when
// opts.Revision has been compacted, when it is newer than the cluster's revision (a
// revision of another history: the cluster was replaced), or when a delete cannot be
// decoded (see the package documentation), with one matching informer.ErrUnavailable when etcd has no leader, and
// with the context's error once ctx is done. Opening the watch fails with an error
// matching informer.ErrUnavailable if etcd has not accepted it within
// Options.RequestTimeout, for example while the cluster is unreachable. Streaming lists
// (opts.SendInitialEvents) are not supported: the error matches informer.ErrNotSupported.
func (s *Source[V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	if opts.SendInitialEvents {
		return nil, newError(informer.ErrNotSupported, nil, "etcd watch: streaming lists are not supported")
	}
	var after int64
	if opts.Revision != "" {
		var err error
		if after, err = ParseRevision(opts.Revision); err != nil {
			return nil, fmt.Errorf("etcd watch: %w", err)
		}
	}
	ops := []clientv3.OpOption{clientv3.WithRange(s.end), clientv3.WithPrevKV()}
	if after > 0 {
		// The created notification carries the cluster's revision: a start above it is
		// refused (see take).
		ops = append(ops, clientv3.WithRev(after+1), clientv3.WithCreatedNotify())
	}
	if opts.AllowBookmarks {
		ops = append(ops, clientv3.WithProgressNotify())
	}

	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	// The etcd client's Watch blocks until the server has accepted the watch, for as long
	// as the cluster is unreachable; bound that wait.
	var opening *time.Timer
	if s.timeout > 0 {
		opening = time.AfterFunc(s.timeout, cancel)
	}
	ch := s.client.Watch(wctx, s.start, ops...)
	if opening != nil && !opening.Stop() {
		cancel()
		if ctx.Err() != nil {
			return nil, classify(ctx, s.at("watch"), ctx.Err())
		}
		return nil, newError(informer.ErrUnavailable, nil, "etcd %s: unavailable: the watch was not established within %v", s.at("watch"), s.timeout)
	}
	if ctx.Err() != nil {
		cancel()
		return nil, classify(ctx, s.at("watch"), ctx.Err())
	}

	w := &watch[V]{src: s, parent: ctx, ctx: wctx, cancel: cancel, ch: ch, bookmarks: opts.AllowBookmarks, after: after}
	w.hist.see(after)
	go w.monitor()
	if opts.Timeout > 0 {
		w.timer = time.NewTimer(opts.Timeout)
		w.timeout = w.timer.C
	}
	md, _ := metadata.FromOutgoingContext(wctx)
	s.mu.Lock()
	s.watchMD = md
	s.watches++
	s.mu.Unlock()
	return w, nil
}

// watch is one open etcd watch. Next is called by one goroutine at a time; Stop by any.
type watch[V any] struct {
	src       *Source[V]
	parent    context.Context // the caller's
	ctx       context.Context // the etcd watch's: parent, require-leader, cancelled by Stop
	cancel    context.CancelFunc
	ch        clientv3.WatchChan
	timer     *time.Timer
	timeout   <-chan time.Time
	bookmarks bool
	after     int64 // the revision the watch streams changes after
	hist      history

	// The events of the current etcd response not yet returned, and their etcd revisions.
	buf  []informer.Event[V]
	revs []int64
	next int
	err  error // once set, returned by every Next after buf is drained
	// incomplete: the revision of a transaction the stream ends inside (0: none); each
	// of its events is followed by more of it, which never come.
	incomplete int64

	// the revision string of the last revision formatted
	revNum int64
	revStr string

	stopped  atomic.Bool
	stopOnce sync.Once
}

// Next returns the next event; see Source.Watch for how the stream ends.
func (w *watch[V]) Next() (informer.Event[V], error) {
	for {
		if w.stopped.Load() {
			return informer.Event[V]{}, errWatchStopped
		}
		if w.next < len(w.buf) {
			ev := w.buf[w.next]
			w.buf[w.next] = informer.Event[V]{}
			w.next++
			return ev, nil
		}
		if w.err != nil {
			return informer.Event[V]{}, w.err
		}
		select {
		case resp, ok := <-w.ch:
			if !ok {
				w.fail(w.closedErr())
				continue
			}
			w.take(&resp)
		case <-w.timeout:
			w.fail(io.EOF)
		case <-w.ctx.Done():
			w.fail(w.closedErr())
		}
	}
}

// MoreAtRevision implements informer.BatchedWatch: the next buffered event has the etcd
// revision of the one Next returned last (a transaction's changes, which etcd sends in
// one response), or that one is of a transaction the stream ends inside.
func (w *watch[V]) MoreAtRevision() bool {
	if w.next == 0 || w.next > len(w.revs) {
		return false
	}
	rev := w.revs[w.next-1]
	return (w.next < len(w.revs) && w.revs[w.next] == rev) || rev == w.incomplete
}

// fail ends the stream with err and releases the etcd watch.
func (w *watch[V]) fail(err error) {
	w.err = err
	w.cancel()
}

// closedErr says why the etcd watch channel closed or its context ended.
func (w *watch[V]) closedErr() error {
	switch {
	case w.stopped.Load():
		return errWatchStopped
	case w.hist.err.Load() != nil:
		return *w.hist.err.Load()
	case w.parent.Err() != nil:
		return fmt.Errorf("etcd watch: %w", w.parent.Err())
	}
	return newError(informer.ErrUnavailable, nil, "etcd %s: unavailable: the watch was closed by the etcd client", w.src.at("watch"))
}

// take turns one etcd watch response into buffered events, or sets the error that ends
// the stream.
func (w *watch[V]) take(resp *clientv3.WatchResponse) {
	w.buf, w.revs, w.next = w.buf[:0], w.revs[:0], 0
	if err := resp.Err(); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			w.fail(newError(informer.ErrExpired, err, "etcd watch: history compacted up to revision %d", resp.CompactRevision))
			return
		}
		w.fail(classify(w.parent, w.src.at("watch"), err))
		return
	}
	if resp.Created && resp.Header.Revision < w.after {
		w.fail(newError(informer.ErrExpired, nil, "etcd %s: revision %d is newer than the cluster's %d (not from this cluster's history)", w.src.at("watch"), w.after, resp.Header.Revision))
		return
	}
	if w.hist.suspect(resp.Header) {
		if err := w.verify(w.parent); err != nil {
			w.fail(err)
			return
		}
	}
	if n := len(resp.Events); n > 0 {
		w.hist.see(resp.Events[n-1].Kv.ModRevision)
	}
	if resp.IsProgressNotify() {
		if w.bookmarks {
			w.push(informer.Event[V]{Type: informer.Bookmark}, resp.Header.Revision)
			w.finishRevisions(0)
		}
		return
	}
	if len(resp.Events) == 0 {
		return // a created notification
	}
	if n := len(resp.Events) + 1; cap(w.buf) < n { // every event and perhaps a bookmark
		w.buf, w.revs = make([]informer.Event[V], 0, n), make([]int64, 0, n)
	}
	for _, e := range resp.Events {
		kv := e.Kv
		switch e.Type {
		case mvccpb.PUT:
			obj, err := w.src.decode(kv)
			if err != nil {
				w.src.reportDecode(kv.Key, kv.ModRevision, err)
				continue
			}
			typ := informer.Modified
			if kv.CreateRevision == kv.ModRevision {
				typ = informer.Added
			}
			w.push(informer.Event[V]{Type: typ, Object: obj}, kv.ModRevision)
		case mvccpb.DELETE:
			obj, keyOnly, err := w.src.decodeDeleted(e)
			if err != nil {
				// The delete cannot reach the informer; a relist turns it into a tombstone.
				// The transaction is not complete, so its revision is not reached either.
				w.finishRevisions(kv.ModRevision)
				w.fail(newError(informer.ErrExpired, err, "etcd watch: the delete of %q at revision %d cannot be decoded; relisting", kv.Key, kv.ModRevision))
				return
			}
			w.push(informer.Event[V]{Type: informer.Deleted, Object: obj, LastStateUnknown: keyOnly}, kv.ModRevision)
		}
	}
	if last := resp.Events[len(resp.Events)-1].Kv.ModRevision; w.bookmarks && (len(w.revs) == 0 || w.revs[len(w.revs)-1] < last) {
		// The newest events did not decode; say that the stream has got past them.
		w.push(informer.Event[V]{Type: informer.Bookmark}, last)
	}
	w.finishRevisions(0)
}

func (w *watch[V]) push(ev informer.Event[V], rev int64) {
	w.buf = append(w.buf, ev)
	w.revs = append(w.revs, rev)
}

// finishRevisions sets the buffered events' revision strings, each event's etcd revision,
// and records incomplete, the revision of a transaction that is not delivered whole (0:
// none).
func (w *watch[V]) finishRevisions(incomplete int64) {
	w.incomplete = incomplete
	for i, rev := range w.revs {
		if rev != w.revNum || w.revStr == "" {
			w.revNum, w.revStr = rev, FormatRevision(rev)
		}
		w.buf[i].Revision = w.revStr
	}
}

// Stop ends the watch: Next returns an error from now on, and the etcd watch is cancelled.
func (w *watch[V]) Stop() {
	w.stopOnce.Do(func() {
		w.stopped.Store(true)
		w.cancel()
		if w.timer != nil {
			w.timer.Stop()
		}
		w.src.mu.Lock()
		w.src.watches--
		w.src.mu.Unlock()
	})
}

// decodeDeleted decodes the object a Deleted event carries: the key's last value, or, when
// etcd no longer has it (or it does not decode), the key alone with a nil value; keyOnly
// says which (the event's LastStateUnknown: the informer takes the last state from its
// cache).
func (s *Source[V]) decodeDeleted(e *clientv3.Event) (obj V, keyOnly bool, err error) {
	if prev := e.PrevKv; prev != nil {
		if obj, err := s.decode(prev); err == nil {
			return obj, false, nil
		}
	}
	obj, err = s.decode(&mvccpb.KeyValue{Key: e.Kv.Key, ModRevision: e.Kv.ModRevision})
	if err != nil {
		s.reportDecodeDeleted(e.Kv.Key, e.Kv.ModRevision, err)
	}
	return obj, true, err
}

// history is what a watch knows of the cluster's history: the newest revision it has
// seen and the cluster ID. A response with an older revision or another cluster, or a
// reconnection of the client, makes it read the cluster's header (linearizable: a member
// that lags is not taken for another history); a revision behind the one seen, or another
// cluster ID, ends the watch with informer.ErrOtherHistory.
type history struct {
	seen    atomic.Int64
	cluster atomic.Uint64
	err     atomic.Pointer[error] // why the watch ended, set by the connection monitor
}

// suspect reports whether a response header does not fit the history seen so far; it
// records the header's revision and cluster otherwise.
func (h *history) suspect(hd *pb.ResponseHeader) bool {
	if hd == nil || hd.Revision == 0 {
		return false
	}
	if c := h.cluster.Load(); c != 0 && c != hd.ClusterId || hd.Revision < h.seen.Load() {
		return true
	}
	h.cluster.Store(hd.ClusterId)
	h.see(hd.Revision)
	return false
}

// see records a revision the watch has reached.
func (h *history) see(rev int64) {
	for {
		old := h.seen.Load()
		if rev <= old || h.seen.CompareAndSwap(old, rev) {
			return
		}
	}
}

// verify reads the cluster's header and returns an error matching
// informer.ErrOtherHistory if the cluster is behind the history seen or is another
// cluster; any other error if it could not ask.
func (w *watch[V]) verify(ctx context.Context) error {
	hd, err := w.src.header(ctx)
	if err != nil {
		return classify(ctx, w.src.at("watch history check"), err)
	}
	if c := w.hist.cluster.Load(); c != 0 && c != hd.ClusterId {
		return newError(informer.ErrOtherHistory, nil, "etcd %s: the cluster ID changed from %x to %x: another cluster answers at these endpoints; relisting", w.src.at("watch"), c, hd.ClusterId)
	}
	if seen := w.hist.seen.Load(); hd.Revision < seen {
		return newError(informer.ErrOtherHistory, nil, "etcd %s: the cluster is at revision %d, behind the %d this watch has seen: it was restored from a backup or replaced; relisting", w.src.at("watch"), hd.Revision, seen)
	}
	return nil
}

// monitor verifies the history each time the client's connection becomes ready again
// (etcd's client resumes a watch across a reconnection without telling), until the watch
// ends. A failed check ends the watch with its error.
func (w *watch[V]) monitor() {
	conn := w.src.client.ActiveConnection()
	if conn == nil {
		return
	}
	state := conn.GetState()
	for conn.WaitForStateChange(w.ctx, state) {
		// Ready after a change: the connection was lost and made again.
		if state = conn.GetState(); state != connectivity.Ready {
			continue
		}
		err := w.verify(w.ctx)
		if errors.Is(err, informer.ErrOtherHistory) {
			w.hist.err.Store(&err)
			w.cancel()
			return
		}
	}
}
