package election_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/kubernetes/election"
)

// Two replicas campaign for one Lease: the first takes it (term 1), the second takes it
// once the first resigns (term 2, a higher fencing token). In a cluster the client is a
// clientset of the elector's own; here it is client-go's fake one. Give the elector to
// manager.Options.Elector and the manager runs the leader-only work under the term.
func ExampleNew() {
	client := fake.NewClientset()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	campaign := func(identity string) manager.Leadership {
		el, err := election.New(client.CoordinationV1(), election.Options{
			Namespace: "default", Name: "my-controller", Identity: identity,
			LeaseDuration: 3 * time.Second, RetryPeriod: 10 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			panic(err)
		}
		lead, err := el.Campaign(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(identity, "leads, term", lead.Term().Value)
		return lead
	}
	a := campaign("replica-a")
	lease, _ := client.CoordinationV1().Leases("default").Get(ctx, "my-controller", metav1.GetOptions{})
	fmt.Println("lease held by", *lease.Spec.HolderIdentity)
	if err := a.Resign(ctx); err != nil {
		panic(err)
	}
	b := campaign("replica-b")
	if err := b.Resign(ctx); err != nil {
		panic(err)
	}
	// Output:
	// replica-a leads, term 1
	// lease held by replica-a
	// replica-b leads, term 2
}
