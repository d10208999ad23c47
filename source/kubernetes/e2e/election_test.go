package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/kubernetes/election"
)

// killable is a Lease client that fails every call once killed, as a replica whose
// process died: it neither renews nor resigns.
type killable struct {
	coordinationclient.LeasesGetter
	dead atomic.Bool
}

var errKilled = errors.New("killed")

func (k *killable) Leases(ns string) coordinationclient.LeaseInterface {
	return killableLeases{k.LeasesGetter.Leases(ns), k}
}

type killableLeases struct {
	coordinationclient.LeaseInterface
	k *killable
}

func (l killableLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if l.k.dead.Load() {
		return nil, errKilled
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l killableLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if l.k.dead.Load() {
		return nil, errKilled
	}
	return l.LeaseInterface.Create(ctx, lease, opts)
}

func (l killableLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.k.dead.Load() {
		return nil, errKilled
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// Two managers elect one leader on a Lease of the real kube-apiserver; the leader writes a
// ConfigMap with FencedUpdate. When the leader dies (its Lease client fails every call),
// its term ends within its renew deadline and the other takes over after the lease
// duration; a write under the dead leader's term is then refused.
func TestLeaseElectionFailoverAndFencing(t *testing.T) {
	checkLeaks(t)
	c := newClients(t, envURL)
	ns := namespace(t, c)
	ctx := testContext(t)
	cms := c.kube.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "target"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fencedWrite := func(ctx context.Context) error {
		_, err := election.FencedUpdate(ctx,
			func(ctx context.Context) (*corev1.ConfigMap, error) {
				return cms.Get(ctx, "target", metav1.GetOptions{})
			},
			func(cm *corev1.ConfigMap) error {
				term, _ := manager.TermFrom(ctx)
				if cm.Data == nil {
					cm.Data = map[string]string{}
				}
				cm.Data["term"] = strconv.FormatInt(term.Value, 10)
				return nil
			},
			func(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
				return cms.Update(ctx, cm, metav1.UpdateOptions{})
			})
		return err
	}
	const leaseDuration = 3 * time.Second
	type replica struct {
		name   string
		leases *killable
		m      *manager.Manager
		done   chan error
		cancel context.CancelFunc
	}
	var rs []*replica
	for _, name := range []string{"a", "b"} {
		r := &replica{name: name, leases: &killable{LeasesGetter: c.kube.CoordinationV1()}, done: make(chan error, 1)}
		el, err := election.New(r.leases, election.Options{
			Namespace: ns, Name: "leader", Identity: name,
			LeaseDuration: leaseDuration, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		r.m, err = manager.New(manager.Options{
			Elector: el, CampaignRetry: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			OnLeaderStuck: func(names []string) { t.Errorf("%s: stuck: %v", name, names) },
		})
		if err != nil {
			t.Fatal(err)
		}
		r.m.AddLeader("writer", manager.RunnableFunc(func(ctx context.Context) error {
			tick := time.NewTicker(50 * time.Millisecond) // the writer's pace
			defer tick.Stop()
			for {
				if err := fencedWrite(ctx); errors.Is(err, election.ErrStaleTerm) {
					<-ctx.Done()
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
			}
		}))
		rctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		go func() { r.done <- r.m.Start(rctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-r.done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s: Start did not return", name)
			}
		})
		rs = append(rs, r)
	}
	leader := func(among ...*replica) (*replica, manager.Term) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, r := range among {
				if term, ok := r.m.Leading(); ok {
					return r, term
				}
			}
			time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
		}
		t.Fatal("no leader within 30s")
		return nil, manager.Term{}
	}
	old, oldTerm := leader(rs...)
	other := rs[0]
	if other == old {
		other = rs[1]
	}
	killed := time.Now()
	old.leases.dead.Store(true)
	for {
		if _, ok := old.m.Leading(); !ok {
			break
		}
		if time.Since(killed) > 2*time.Second+time.Second {
			t.Fatalf("%s still leads %v after it died; its renew deadline is 2s", old.name, time.Since(killed))
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	_, newTerm := leader(other)
	took := time.Since(killed)
	if newTerm.Value <= oldTerm.Value {
		t.Fatalf("new term %d not above the old %d", newTerm.Value, oldTerm.Value)
	}
	if took > leaseDuration+2*time.Second {
		t.Errorf("%s led %v after %s died; want within the lease duration %v plus 2s", other.name, took, old.name, leaseDuration)
	}
	// Wait for the new leader's first write, then write under the dead leader's term.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cm, err := cms.Get(ctx, "target", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["term"] == fmt.Sprint(newTerm.Value) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write under term %d within 30s: %v", newTerm.Value, cm.Data)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	err := fencedWrite(manager.WithTerm(ctx, oldTerm))
	if !errors.Is(err, election.ErrStaleTerm) {
		t.Fatalf("a write under the dead leader's term %d: %v; want ErrStaleTerm", oldTerm.Value, err)
	}
	t.Logf("failover after the leader died (lease duration %v): %v; term %d → %d; stale write refused: %v", leaseDuration, took.Round(time.Millisecond), oldTerm.Value, newTerm.Value, err)
}
