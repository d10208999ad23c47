package election

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ObserveLeader calls fn with the identity of the replica that leads (the value of the
// oldest key under the prefix, "" while there is none) now and at each change, until ctx
// is done. It reads the prefix again after each change it watches, and retries every
// RetryPeriod while etcd is unreachable.
func (e *Elector) ObserveLeader(ctx context.Context, fn func(identity string)) {
	prefix := strings.TrimSuffix(e.opts.Prefix, "/") + "/"
	reported, last := false, ""
	for ctx.Err() == nil {
		resp, err := e.client.Get(ctx, prefix, clientv3.WithFirstCreate()...)
		if err == nil {
			id := ""
			if len(resp.Kvs) > 0 {
				id = string(resp.Kvs[0].Value)
			}
			if !reported || id != last {
				reported, last = true, id
				fn(id)
			}
			e.waitChange(ctx, prefix, resp.Header.Revision+1)
			continue
		}
		t := time.NewTimer(e.opts.RetryPeriod)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// waitChange returns at the first change under prefix from rev on, when the watch fails,
// or when ctx is done.
func (e *Elector) waitChange(ctx context.Context, prefix string, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range e.client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if resp.Err() != nil || len(resp.Events) > 0 {
			return
		}
	}
}
