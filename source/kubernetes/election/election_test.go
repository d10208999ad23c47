package election_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

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
