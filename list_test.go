package informer_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
)

// A source of an interface type V is checked for nil items without a panic, whatever the
// items hold: a struct value is an item, a nil pointer inside the interface is not.
func TestReflector_NilCheckOfInterfaceItems(t *testing.T) {
	type thing struct{ Name string }
	var nilThing *thing
	items := []any{thing{"a"}, nilThing, &thing{"b"}}
	inf, err := informer.New[string, any](informer.ListerWatcherFuncs[any]{
		ListFunc: func(context.Context, informer.ListOptions) (informer.List[any], error) {
			return informer.List[any]{Items: slices.Clone(items), Revision: "1"}, nil
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[any], error) {
			return nil, ctx.Err()
		},
	}, informer.Options[string, any]{
		Key: func(o any) (string, error) {
			switch o := o.(type) {
			case thing:
				return o.Name, nil
			case *thing:
				return o.Name, nil
			}
			return "", fmt.Errorf("unknown %T", o)
		},
		ErrorHandler: func(error) {}, // the nil item is reported; not what this test checks
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	if keys := informer.ReadKeys(inf); !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("cached %q, want a and b (the nil pointer skipped)", keys)
	}
}

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

// While a paged list is in progress, Stats.ListObjects counts the objects its pages have
// brought so far; once the list is applied it is 0 again.
func TestReflector_StatsCountListInProgress(t *testing.T) {
	secondPage := make(chan struct{})
	release := make(chan struct{})
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
			if opts.Continue == "" {
				return informer.List[*obj]{Items: []*obj{newObj("a", "", "1"), newObj("b", "", "1"), newObj("c", "", "1")}, Revision: "5", Continue: "page-2"}, nil
			}
			close(secondPage)
			<-release
			return informer.List[*obj]{Items: []*obj{newObj("d", "", "1")}, Revision: "5"}, nil
		},
		WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
			return newChanWatch(ctx, make(chan watchResult)), nil
		},
	}
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{Key: objKeyErr, Name: "counted", PageSize: 3, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	if st := inf.Stats(); st.ListObjects != 0 {
		t.Fatalf("before any list: ListObjects %d, want 0", st.ListObjects)
	}
	ctx := informertest.Run(t, inf)
	<-secondPage
	if st := inf.Stats(); st.ListObjects != 3 || st.ListStarted.IsZero() {
		t.Fatalf("during the list, after a page of 3: ListObjects %d (want 3), ListStarted %v", st.ListObjects, st.ListStarted)
	}
	close(release)
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	if st := inf.Stats(); st.ListObjects != 0 || st.Objects != 4 {
		t.Fatalf("after the list: ListObjects %d (want 0), Objects %d (want 4)", st.ListObjects, st.Objects)
	}
}

// A long list says how far it has come, at Info, at most every 10 s of the informer's
// clock, then once at the end with the count, the size and the rate.
func TestReflector_LongListLogsProgress(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
			page := 0
			if opts.Continue != "" {
				page, _ = strconv.Atoi(opts.Continue)
			}
			fc.Step(3 * time.Second) // every page takes 3 s
			l := informer.List[*obj]{Revision: "5", Bytes: 150_000}
			for i := range 100 {
				l.Items = append(l.Items, newObj(fmt.Sprintf("o%d-%d", page, i), "", "1"))
			}
			if page < 9 {
				l.Continue = strconv.Itoa(page + 1)
			}
			return l, nil
		},
		WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
			return newChanWatch(ctx, make(chan watchResult)), nil
		},
	}
	logs := &testkit.LogBuffer{}
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{
		Key: objKeyErr, Name: "big", PageSize: 100, Clock: fc, Logger: logs.Logger(slog.LevelInfo), Backoff: fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.Lines(logs.String()) {
		if _, msg, ok := strings.Cut(line, ` msg="listed `); ok {
			got = append(got, "listed "+msg[:strings.IndexByte(msg, '"')])
		}
	}
	want := []string{
		"listed 400 objects (600.0 kB) in 12s, page 4",
		"listed 800 objects (1.2 MB) in 24s, page 8",
		"listed 1,000 objects (1.5 MB) in 30s, 10 pages, 33 objects/s",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("progress lines:\n%s\nwant:\n%s\nlog:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), logs.String())
	}
}
