package informer_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
)

// A first list whose second page answers ErrExpired (its continue token expired) is read
// again unpaged; the objects of the first page, already delivered as initial adds, are
// not delivered again when the retry lists them unchanged.
func TestInformer_ExpiredSecondPageDeliversOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		revision func(*obj) string
		retryRev string // the revision of the unpaged retry
	}{
		{"same list revision", nil, "101"},
		{"same list revision, with Options.Revision", func(o *obj) string { return o.Rev }, "101"},
		{"newer list revision, with Options.Revision", func(o *obj) string { return o.Rev }, "102"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm00 := &obj{Key: "cm00", Val: "10", Rev: "10"}
			cm01 := &obj{Key: "cm01", Val: "11", Rev: "11"}
			var lists atomic.Int64
			events := make(chan watchResult, 1)
			lw := informer.ListerWatcherFuncs[*obj]{
				ListFunc: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
					lists.Add(1)
					switch {
					case opts.Limit == 1 && opts.Continue == "":
						return informer.List[*obj]{Items: []*obj{{Key: "cm00", Val: "10", Rev: "10"}}, Revision: "101", Continue: "page2"}, nil
					case opts.Continue != "":
						return informer.List[*obj]{}, informer.ErrExpired
					}
					// A fresh decode of the same objects.
					a, b := *cm00, *cm01
					return informer.List[*obj]{Items: []*obj{&a, &b}, Revision: tc.retryRev}, nil
				},
				WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
					return newChanWatch(ctx, events), nil
				},
			}
			rec := informertest.NewRecorder(func(o *obj) (string, string) { return o.Key, o.Val })
			inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{
				Key:          objKeyErr,
				Revision:     tc.revision,
				PageSize:     1,
				Logger:       quiet,
				ErrorHandler: func(error) {},
				Backoff:      fastBackoff,
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
				t.Fatal(err)
			}
			ctx := informertest.Run(t, inf)
			if err := informer.WaitForCacheSync(ctx, inf); err != nil {
				t.Fatal(err)
			}
			// A change after the sync: once it is delivered, everything before it was.
			events <- watchResult{ev: informer.Event[*obj]{Type: informer.Added, Object: &obj{Key: "cm02", Val: "12", Rev: "12"}, Revision: "103"}}
			rec.WaitFor(t, 3)
			want := []string{"add*cm00=10", "add*cm01=11", "add cm02=12"}
			if got := rec.Calls(); !slices.Equal(got, want) {
				t.Fatalf("lists %d: calls %q, want %q", lists.Load(), got, want)
			}
		})
	}
}
