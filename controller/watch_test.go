package controller

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/testkit"
)

// TestResyncPeriodic shows the informer-wide periodic reconcile: an informer with a resync
// period (controller-runtime's SyncPeriod) re-delivers every cached object as an update
// each period on its fake clock, and the controller reconciles every key again.
func TestResyncPeriodic(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "a"})
	src.Put(&obj{Name: "b"})
	ic := clock.NewFake(time.Unix(0, 0)) // the informer's clock: only its resync timer runs on it
	const syncPeriod = 10 * time.Minute
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs", Clock: ic, ResyncPeriod: syncPeriod})

	calls := testkit.NewLog()
	var resyncs atomic.Int64
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(key)
		return Result{}, nil
	}), Options[string]{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	countResyncs := PredicateFuncs[*obj]{UpdateFunc: func(old, new *obj) bool {
		if old == new {
			resyncs.Add(1)
		}
		return true
	}}
	if err := For(c, inf, objKeyErr, countResyncs); err != nil {
		t.Fatal(err)
	}
	start(t, c)

	if got := joined(calls.Next(t, 2)); got != "a b" {
		t.Fatalf("initial reconciles: %s", got)
	}
	for i := 1; i <= 3; i++ {
		ic.WaitForWaiters(1, nil) // the reflector's resync timer
		ic.Step(syncPeriod)
		got := calls.Next(t, 2)
		slices.Sort(got)
		if joined(got) != "a b" {
			t.Fatalf("resync %d: reconciled %s, want a b", i, joined(got))
		}
		if r := resyncs.Load(); r != int64(2*i) {
			t.Fatalf("resync %d: %d resync updates seen, want %d", i, r, 2*i)
		}
	}
	calls.ExpectNoMore(t)
}

// TestWatchesMapsAndFilters: Watches maps objects to their owners' keys, an update queues the
// old owner and the new, and predicates drop notifications. One worker, so the order of
// the reconciles is the order of the notifications.
func TestWatchesMapsAndFilters(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "x", Owner: "A"})
	src.Put(&obj{Name: "y", Owner: "B"})
	src.Put(&obj{Name: "z"}) // no owner
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "children"})

	c, calls := recording(t, Options[string]{})
	owner := func(o *obj) []string {
		if o.Owner == "" {
			return nil
		}
		return []string{o.Owner}
	}
	genChanged := PredicateFuncs[*obj]{UpdateFunc: func(old, new *obj) bool { return old.Gen != new.Gen }}
	if err := Watches(c, inf, owner, genChanged); err != nil {
		t.Fatal(err)
	}
	start(t, c)

	expect := func(when string, want ...string) {
		t.Helper()
		if got := joined(calls.Next(t, len(want))); got != joined(want) {
			t.Fatalf("%s: reconciled %s, want %s", when, got, joined(want))
		}
	}
	expect("initial list", "A", "B")
	src.Put(&obj{Name: "x", Owner: "C", Gen: 1})
	expect("owner change", "A", "C")
	src.Put(&obj{Name: "y", Owner: "B"}) // same Gen: filtered
	src.Put(&obj{Name: "w", Owner: "D"}) // a marker: y's update would have come first
	expect("filtered update", "D")
	src.Delete("x")
	expect("delete", "C")
	calls.ExpectNoMore(t)
}

// TestKeyFuncError: a key function that fails drops that notification and logs it.
func TestKeyFuncError(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "bad"})
	src.Put(&obj{Name: "good"})
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs"})
	var logs logBuffer
	c, calls := recording(t, Options[string]{Logger: logs.logger()})
	key := func(o *obj) (string, error) {
		if o.Name == "bad" {
			return "", errBoom
		}
		return o.Name, nil
	}
	if err := For(c, inf, key); err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if got := calls.Next(t, 1)[0]; got != "good" {
		t.Fatalf("reconciled %s", got)
	}
	if !strings.Contains(logs.String(), "key function failed") {
		t.Errorf("key error not logged:\n%s", logs.String())
	}
}

// For with a nil key function keys by the informer's own key (Informer.Key), written once;
// an informer without a Key method of the controller's key type is an error.
func TestForDefaultsToTheInformersKey(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "a"})
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs", Key: func(o *obj) (string, error) { return "k/" + o.Name, nil }})
	c, calls := recording(t, Options[string]{})
	if err := For(c, inf, nil); err != nil {
		t.Fatal(err)
	}
	c2, err := New(ReconcilerFunc[int](func(context.Context, int) (Result, error) { return Result{}, nil }), Options[int]{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := For[int](c2, inf, nil); err == nil || !strings.Contains(err.Error(), "no Key method") {
		t.Fatalf("For with a nil key on an informer of another key type: %v", err)
	}
	start(t, c)
	if got := joined(calls.Next(t, 1)); got != "k/a" {
		t.Fatalf("reconciled %s, want the informer's key k/a", got)
	}
}
