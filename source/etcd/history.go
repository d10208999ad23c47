package etcd

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/informer-go/informer"
)

var _ informer.HistoryProver = (*Source[int])(nil)

// ProveHistory implements informer.HistoryProver: it reads the prefix at rev without
// values (a keys-only range, or only its count when every entry of revisions is "") and
// compares the number of keys and their ModRevisions with revisions, which are then the
// objects' ModRevisions as decimal strings (a KVDecoder that keeps kv.ModRevision, and
// informer.Options.Revision returning it). A cluster restored from a backup (etcdutl
// snapshot restore) keeps its cluster ID, so SourceID cannot tell it from the cluster the
// state was saved from; its keys at a revision after the backup's are another history's,
// and the comparison tells. A rev the cluster has not reached is another history; a
// compacted rev matches informer.ErrExpired. Keys the decoder rejected count as keys here
// and make the proof fail (the informer then lists).
//
// It costs one range read of keys and revisions, far less than a list, which also sends
// and decodes every value: see BenchmarkHistoryProof.
func (s *Source[V]) ProveHistory(ctx context.Context, rev string, revisions []string) error {
	at, err := ParseRevision(rev)
	if err != nil {
		return err
	}
	want := make([]int64, 0, len(revisions))
	for _, r := range revisions {
		if r == "" {
			want = nil
			break
		}
		n, err := ParseRevision(r)
		if err != nil {
			return err
		}
		want = append(want, n)
	}
	ops := []clientv3.OpOption{clientv3.WithRange(s.end), clientv3.WithRev(at)}
	if want == nil {
		ops = append(ops, clientv3.WithCountOnly())
	} else {
		ops = append(ops, clientv3.WithKeysOnly())
	}
	resp, err := s.get(ctx, s.start, ops...)
	switch {
	case errors.Is(err, rpctypes.ErrFutureRev):
		return newError(informer.ErrOtherHistory, nil, "etcd %s: the saved revision %d is newer than the cluster's (restored from a backup, or replaced)", s.at("history proof"), at)
	case err != nil:
		return classify(ctx, s.at("history proof"), err)
	case resp.Count != int64(len(revisions)):
		return newError(informer.ErrOtherHistory, nil, "etcd %s: the saved state at revision %d holds %d objects, the cluster held %d keys under %q there (restored from a backup?)", s.at("history proof"), at, len(revisions), resp.Count, s.prefix)
	case want == nil:
		return nil
	}
	got := make([]int64, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		got[i] = kv.ModRevision
	}
	slices.Sort(got)
	slices.Sort(want)
	for i := range got {
		if got[i] != want[i] {
			return newError(informer.ErrOtherHistory, nil, "etcd %s: the saved state at revision %d is not the cluster's state there: a key changed at revision %d in one and not in the other (restored from a backup?)", s.at("history proof"), at, min(got[i], want[i]))
		}
	}
	return nil
}

// header reads the cluster's current response header with one linearizable single-key
// read (a round trip bounded by Options.RequestTimeout).
func (s *Source[V]) header(ctx context.Context) (*pb.ResponseHeader, error) {
	resp, err := s.get(ctx, s.start, clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	return resp.Header, nil
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
