package etcd

import (
	"context"
	"errors"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
)

var _ informer.HistoryProver = (*Source[int])(nil)

// ProveHistory implements informer.HistoryProver: it reads the prefix at rev without
// values (a keys-only range, or only its count when every entry of revisions is "") and
// checks the number of keys and their ModRevisions against revisions, which are then the
// objects' ModRevisions as decimal strings (a KVDecoder that keeps kv.ModRevision, and
// informer.Options.Revision returning it). A cluster restored from a backup (etcdutl
// snapshot restore) keeps its cluster ID, so SourceID cannot tell it from the cluster the
// state was saved from; its keys at a revision after the backup's are another history's,
// and the comparison tells. A rev the cluster has not reached is another history; a
// compacted rev matches informer.ErrExpired. The cluster may hold more keys than the saved
// state has objects (a value the decoder rejected, an object a Transform or key function
// left out): the proof asks that every saved object's ModRevision is a key's, not that the
// two lists are equal.
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
	case resp.Count < int64(len(revisions)):
		// Fewer is no proof: an object the informer left out (a value that did not
		// decode, a Transform or key function that failed) is a key etcd holds.
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
	// Every saved object's revision is one a key had at the saved revision (the keys the
	// informer left out are the cluster's extra ones).
	i := 0
	for _, w := range want {
		for i < len(got) && got[i] < w {
			i++
		}
		if i == len(got) || got[i] != w {
			return newError(informer.ErrOtherHistory, nil, "etcd %s: the saved state at revision %d is not the cluster's state there: no key under %q changed at revision %d, as a saved object did (restored from a backup?)", s.at("history proof"), at, s.prefix, w)
		}
		i++
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
