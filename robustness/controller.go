package robustness

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/etcd/election"
)

// controllers are two replicas of a service (manager package) that elect a leader in
// etcd; the leader runs a reconcile loop that reads an informer's cache and writes what
// it computed back to etcd through election.Fenced, so that a write of a leader that lost
// its term is refused. Every write etcd accepted is recorded with its term and revision.
type controllers struct {
	wg     sync.WaitGroup
	cancel context.CancelFunc
	elect  []*election.Elector
}

// startControllers starts n replicas whose elections and writes go through endpoints;
// the reconcile loop reads cache.
func startControllers(n int, endpoints []string, writer clientv3.KV, cache informer.Reader[string, *Item], rec *Recording, restores *atomic.Int64) (*controllers, error) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &controllers{cancel: cancel}
	for i := range n {
		e, err := election.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, DialKeepAliveTime: time.Second,
			DialKeepAliveTimeout: time.Second, Logger: zap.NewNop()},
			election.Options{Prefix: "/election/robustness", Identity: fmt.Sprint("controller-", i), TTL: 2 * time.Second, Logger: quiet})
		if err != nil {
			c.stop()
			return nil, err
		}
		c.elect = append(c.elect, e)
		m, err := manager.New(manager.Options{Elector: e, Logger: quiet, ShutdownTimeout: 10 * time.Second,
			CampaignRetry: 100 * time.Millisecond,
			OnLeaderStuck: func([]string) {}}) // the loop returns on its context; never exit the test process
		if err != nil {
			c.stop()
			return nil, err
		}
		reconcile := func(ctx context.Context) error {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				t, _ := manager.TermFrom(ctx)
				key := fmt.Sprint("/controller/out-", i)
				wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
				epoch := restores.Load()
				resp, err := election.Fenced(wctx, writer, clientv3.OpPut(key, fmt.Sprintf("term %d saw %d keys", t.Value, cache.Len())))
				wcancel()
				if err == nil && restores.Load() == epoch {
					rec.AddWrite(FencedWrite{Term: t.Value, Rev: resp.Header.Revision, Key: key, Epoch: int(epoch)})
				}
			}
		}
		if err := m.AddLeader("reconcile", manager.RunnableFunc(reconcile)); err != nil {
			c.stop()
			return nil, err
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			_ = m.Start(ctx)
		}()
	}
	return c, nil
}

// stop stops the replicas and waits for them.
func (c *controllers) stop() {
	c.cancel()
	c.wg.Wait()
	for _, e := range c.elect {
		e.Close()
	}
}
