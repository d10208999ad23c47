package election_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/informer-go/informer/source/kubernetes/election"
)

// A term whose renewals fail ends at its renew deadline, not up to a RetryPeriod later:
// the wait before the next attempt never passes the deadline. (The Lease API server is a
// fake here; source/kubernetes/e2e runs the elector against a real kube-apiserver.)
func TestLossNoticedAtTheRenewDeadline(t *testing.T) {
	client := fake.NewClientset()
	el, err := election.New(client.CoordinationV1(), election.Options{
		Namespace: "default", Name: "leader", Identity: "a",
		LeaseDuration: 2 * time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 400 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The Lease is created (no update): every renewal fails from the first.
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is unreachable")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := el.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("the term did not end")
	}
	if late := time.Since(l.Renewed().Add(l.RenewDeadline())); late > 150*time.Millisecond {
		t.Fatalf("the term ended %v after its renew deadline", late.Round(time.Millisecond))
	}
}

// RetryPeriod must be below RenewDeadline, and the Elector tells its timing.
func TestTimingChecked(t *testing.T) {
	client := fake.NewClientset()
	_, err := election.New(client.CoordinationV1(), election.Options{
		Namespace: "default", Name: "leader", RenewDeadline: time.Second, RetryPeriod: time.Second,
	})
	if err == nil {
		t.Fatal("RetryPeriod equal to RenewDeadline accepted")
	}
	el, err := election.New(client.CoordinationV1(), election.Options{Namespace: "default", Name: "leader"})
	if err != nil {
		t.Fatal(err)
	}
	if got := el.Timing(); got.TTL != election.DefaultLeaseDuration || got.RenewDeadline != election.DefaultRenewDeadline || got.RetryPeriod != election.DefaultRetryPeriod {
		t.Fatalf("Timing() = %+v; want the defaults", got)
	}
}

// The Lease names its holder in spec.holderIdentity and carries Options.Labels over the
// labels it had; a replica that does not lead observes the holder, and "" once released.
func TestLeaseLabelsAndObservedLeader(t *testing.T) {
	client := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "leader", Labels: map[string]string{"team": "payments"}}})
	newElector := func(id string) *election.Elector {
		el, err := election.New(client.CoordinationV1(), election.Options{
			Namespace: "default", Name: "leader", Identity: id,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 20 * time.Millisecond,
			Labels: map[string]string{"app.kubernetes.io/name": "status-controller"},
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	a, b := newElector("a"), newElector("b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := client.CoordinationV1().Leases("default").Get(ctx, "leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lease.Labels; got["team"] != "payments" || got["app.kubernetes.io/name"] != "status-controller" {
		t.Errorf("labels %v; want the Lease's own and Options.Labels", got)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != "a" {
		t.Errorf("holderIdentity %v; want a", h)
	}
	seen := make(chan string, 10)
	octx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.ObserveLeader(octx, func(id string) { seen <- id }) }()
	defer func() { stop(); <-done }()
	select {
	case id := <-seen:
		if id != "a" {
			t.Fatalf("b observed %q; want a", id)
		}
	case <-ctx.Done():
		t.Fatal("b observed no leader")
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-seen:
		if id != "" {
			t.Fatalf("b observed %q after a resigned; want none", id)
		}
	case <-ctx.Done():
		t.Fatal("b did not observe the release")
	}
}
