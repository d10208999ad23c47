package election

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer/manager"
)

// ErrStaleTerm is returned by Fenced when etcd refused the write because the term is no
// longer current: another replica may lead now. The caller must not retry under this term.
var ErrStaleTerm = errors.New("election: stale term: the write was refused")

// ErrNoTerm is returned by Fenced when ctx carries no term (manager.TermFrom): only a
// leader-only runnable's context does.
var ErrNoTerm = errors.New("election: no term in the context: fenced writes belong to leader-only runnables")

// FenceCmp returns the comparison that holds while t is current: its election key still
// exists with t.Value as its create revision. A key is never recreated with an older
// create revision, so once it fails it fails forever. Add it to your own transactions'
// If to fence them.
func FenceCmp(t manager.Term) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.Key), "=", t.Value)
}

// Fenced commits ops in one transaction on kv if, and only if, the term ctx carries is
// still current (FenceCmp), so a leader that lost its term without knowing it (paused by
// GC, SIGSTOP or a partition past its lease) has its writes refused by etcd itself. It
// returns the transaction's response; ErrStaleTerm (wrapped, naming the term) when etcd
// refused it; ErrNoTerm; or etcd's error, in which case the write may or may not have
// been applied, as with any etcd write. kv is usually the service's data client, not the
// Elector's.
func Fenced(ctx context.Context, kv clientv3.KV, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	t, ok := manager.TermFrom(ctx)
	if !ok || t.IsZero() {
		return nil, ErrNoTerm
	}
	resp, err := kv.Txn(ctx).If(FenceCmp(t)).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return resp, fmt.Errorf("%w: term %d (key %s) is no longer current at revision %d", ErrStaleTerm, t.Value, t.Key, resp.Header.Revision)
	}
	return resp, nil
}
