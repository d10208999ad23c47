package informertest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/memory"
)

type item struct{ Name, Val string }

func describe(it *item) (string, string) { return it.Name, it.Val }

// The recorder's notation for every kind of call, and the life-cycle checker's verdicts.
func TestRecorderAndLifeCycle(t *testing.T) {
	r := informertest.NewRecorder(describe)
	c := informertest.NewLifeCycle(describe, informertest.LifeCycleOptions{})
	for _, h := range []informer.Handler[*item]{r, c} {
		h.OnAdd(&item{"a", "1"}, true)
		h.OnUpdate(&item{"a", "1"}, &item{"a", "2"})
		h.OnUpdate(&item{"a", "2"}, &item{"a", "2"})
		h.OnDelete(&item{"a", "2"}, false)
		h.OnAdd(&item{"a", "3"}, false)
		h.OnDelete(&item{"a", "3"}, true)
	}
	r.Expect(t, "add*a=1", "update a=1→2", "resync a=2", "delete a=2", "add a=3", "delete?a=3")
	if errs := c.Errors(); len(errs) != 0 {
		t.Fatalf("a valid life cycle reported %q", errs)
	}
	if got, want := c.States("a"), []string{"1", "2", "2", informertest.Deleted, "3", informertest.Deleted}; !slices.Equal(got, want) {
		t.Fatalf("states %q, want %q", got, want)
	}
	if !c.Converged(map[string]string{}) || c.Converged(map[string]string{"a": "3"}) {
		t.Fatal("Converged")
	}
	if !informertest.IsSubsequence([]string{"1", "3"}, []string{"1", "2", "3"}) || informertest.IsSubsequence([]string{"3", "1"}, []string{"1", "2", "3"}) {
		t.Fatal("IsSubsequence")
	}

	bad := informertest.NewLifeCycle(describe, informertest.LifeCycleOptions{})
	bad.OnUpdate(&item{"b", "1"}, &item{"b", "2"}) // never added
	bad.OnAdd(&item{"c", "1"}, false)
	bad.OnAdd(&item{"c", "2"}, false) // add on top of an add
	bad.OnDelete(&item{"c", "9"}, false)
	want := []string{
		`update b=2 without a preceding add (seen [])`,
		`add c=2 on top of "1" (no delete between)`,
		`delete c: old "9" but last seen "2"`,
	}
	if got := bad.Errors(); !slices.Equal(got, want) {
		t.Fatalf("errors %q, want %q", got, want)
	}
	// With Coalesce, a delete may carry a newer state than the last one seen.
	co := informertest.NewLifeCycle(describe, informertest.LifeCycleOptions{Coalesce: true})
	co.OnAdd(&item{"d", "1"}, false)
	co.OnDelete(&item{"d", "5"}, false)
	if errs := co.Errors(); len(errs) != 0 {
		t.Fatalf("coalesced delete reported %q", errs)
	}
}

// ExampleRecorder tests a program's informer end to end: record its handler's calls and
// compare them with the expected sequence.
func ExampleRecorder() {
	src := memory.New(func(it *item) string { return it.Name }, memory.Options{})
	src.Put(&item{"a", "1"})
	inf, _ := informer.New(src, informer.Options[string, *item]{
		Key: func(it *item) (string, error) { return it.Name, nil },
	})
	rec := informertest.NewRecorder(describe)
	inf.AddHandler(rec, informer.HandlerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx)
	_ = informer.WaitForCacheSync(ctx, inf)
	src.Put(&item{"a", "2"})
	src.Delete("a")
	calls, err := rec.Wait(ctx, 3) // in a test: rec.Expect(t, "add*a=1", …)
	fmt.Println(calls, err)
	// Output: [add*a=1 update a=1→2 delete a=2] <nil>
}

func TestEventually(t *testing.T) {
	start := time.Now()
	n := 0
	informertest.Eventually(t, time.Second, func() bool { n++; return n == 3 }, "never")
	if n != 3 || time.Since(start) > time.Second {
		t.Fatalf("polled %d times", n)
	}
}
