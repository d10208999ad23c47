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

// Check against a history and a final state: every kind of problem, in key order, and
// none for a removed handler's keys (final nil) beyond the life cycle and the history.
func TestLifeCycleCheck(t *testing.T) {
	history := map[string][]string{
		"a": {"1", "2", "3"},
		"b": {"1", informertest.Deleted},
		"c": {"1", "2"},
		"d": {"1"},
		"e": {"1"},
	}
	final := map[string]string{"a": "3", "c": "2", "d": "1", "e": "1"}
	good := informertest.NewLifeCycle(describe, informertest.LifeCycleOptions{})
	good.OnAdd(&item{"a", "1"}, true)
	good.OnUpdate(&item{"a", "1"}, &item{"a", "3"}) // a skipped state is allowed
	good.OnAdd(&item{"b", "1"}, true)
	good.OnDelete(&item{"b", "1"}, false)
	for _, k := range []string{"c", "d", "e"} {
		good.OnAdd(&item{k, history[k][len(history[k])-1]}, true)
	}
	if problems := good.Check(history, final); len(problems) != 0 {
		t.Fatalf("a handler that converged reported %q", problems)
	}

	bad := informertest.NewLifeCycle(describe, informertest.LifeCycleOptions{})
	bad.OnAdd(&item{"a", "2"}, true)
	bad.OnUpdate(&item{"a", "2"}, &item{"a", "1"}) // reordered
	bad.OnAdd(&item{"b", "1"}, true)               // the delete never came
	bad.OnAdd(&item{"c", "1"}, true)               // the last update never came
	bad.OnAdd(&item{"d", "1"}, true)
	bad.OnAdd(&item{"d", "1"}, false) // an add on top of an add
	// e was never heard of.
	want := []string{
		`add d=1 on top of "1" (no delete between)`,
		`key a: saw ["2" "1"], not a subsequence of ["1" "2" "3"]`,
		`key a: last saw "1", final state "3" (saw ["2" "1"], history ["1" "2" "3"])`,
		`key b: last saw "1", but the key is gone (history ["1" "<deleted>"])`,
		`key c: last saw "1", final state "2" (saw ["1"], history ["1" "2"])`,
		`key d: saw ["1" "1"], not a subsequence of ["1"]`,
		`never heard of e`,
	}
	if got := bad.Check(history, final); !slices.Equal(got, want) {
		t.Fatalf("problems\n%q\nwant\n%q", got, want)
	}
	// A removed handler: its life cycle and its history only.
	want = []string{want[0], want[1], want[5]}
	if got := bad.Check(history, nil); !slices.Equal(got, want) {
		t.Fatalf("problems without a final state\n%q\nwant\n%q", got, want)
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
