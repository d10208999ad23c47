package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3"
)

// traffic writes random changes to the prefix, one request at a time, from a seed: puts,
// deletes, transactions of 2–8 keys (each after a write outside the prefix, so that the
// revision before a transaction is not the prefix's), and keys bound to short leases
// that etcd deletes when they expire.
type traffic struct {
	cli    *clientv3.Client
	rng    *rand.Rand
	prefix string
	keys   int
	single bool // every change touches one key: no transaction, one key per lease

	pause sync.RWMutex // held for writing while a failure needs the traffic stopped

	op     int
	counts map[string]int // operations sent, by kind
	errors int
	leases []clientv3.LeaseID // every lease granted, revoked when the run settles
}

func newTraffic(cli *clientv3.Client, seed int64, prefix string, keys int) *traffic {
	return &traffic{cli: cli, rng: rand.New(rand.NewPCG(uint64(seed), 0x7261666669630a)), prefix: prefix, keys: keys, counts: make(map[string]int)}
}

func (tr *traffic) key() string { return fmt.Sprintf("%sk%03d", tr.prefix, tr.rng.IntN(tr.keys)) }

// value is unique in the run: the operation's number and the key's place in it.
func (tr *traffic) value(i int) string { return fmt.Sprintf("v%d.%d", tr.op, i) }

// run sends operations until ctx ends. An operation under way then is finished, not
// cancelled: a cancelled request may still be applied after the run's last write.
func (tr *traffic) run(ctx context.Context) {
	for ctx.Err() == nil {
		tr.pause.RLock()
		tr.step()
		tr.pause.RUnlock()
	}
}

// revoke revokes every lease granted, so that no key expires after the run settles.
func (tr *traffic) revoke(ctx context.Context) error { return tr.revokeThrough(ctx, tr.cli) }

// revokeThrough revokes every lease granted through cli and forgets them. Call it with
// the traffic paused.
func (tr *traffic) revokeThrough(ctx context.Context, cli *clientv3.Client) error {
	for _, id := range tr.leases {
		if _, err := cli.Revoke(ctx, id); err != nil && !strings.Contains(err.Error(), "not found") {
			return fmt.Errorf("revoking lease %x: %w", id, err)
		}
	}
	tr.leases = tr.leases[:0]
	return nil
}

func (tr *traffic) step() {
	tr.op++
	octx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var err error
	kind := ""
	switch r := tr.rng.IntN(100); {
	case r < 35:
		kind = "put"
		_, err = tr.cli.Put(octx, tr.key(), tr.value(0))
	case r < 45:
		kind = "delete"
		_, err = tr.cli.Delete(octx, tr.key())
	case r < 80:
		kind = "txn"
		if _, err = tr.cli.Put(octx, "/outside/"+fmt.Sprint(tr.rng.IntN(4)), tr.value(0)); err != nil {
			break
		}
		n := 2 + tr.rng.IntN(7)
		if tr.single {
			n = 1
		}
		seen := map[string]bool{}
		var ops []clientv3.Op
		for i := 0; len(ops) < n; i++ {
			k := tr.key()
			if seen[k] {
				continue
			}
			seen[k] = true
			if tr.rng.IntN(5) == 0 {
				ops = append(ops, clientv3.OpDelete(k))
			} else {
				ops = append(ops, clientv3.OpPut(k, tr.value(i)))
			}
		}
		_, err = tr.cli.Txn(octx).Then(ops...).Commit()
	case r < 88:
		kind = "lease"
		var lease *clientv3.LeaseGrantResponse
		if lease, err = tr.cli.Grant(octx, int64(1+tr.rng.IntN(2))); err != nil {
			break
		}
		tr.leases = append(tr.leases, lease.ID)
		var ops []clientv3.Op
		n := 1 + tr.rng.IntN(3)
		if tr.single {
			n = 1
		}
		for i := range n {
			ops = append(ops, clientv3.OpPut(tr.key(), tr.value(i), clientv3.WithLease(lease.ID)))
		}
		_, err = tr.cli.Txn(octx).Then(ops...).Commit()
	default:
		kind = "outside"
		_, err = tr.cli.Put(octx, "/outside/"+fmt.Sprint(tr.rng.IntN(4)), tr.value(0))
	}
	tr.counts[kind]++
	if err != nil {
		tr.errors++
	}
}

// Ops returns the operations sent so far (call it once run has returned).
func (tr *traffic) Ops() int { return tr.op }
