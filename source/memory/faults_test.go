package memory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/source/memory"
)

func TestFailNext(t *testing.T) {
	s := newSource(memory.Options{})
	ctx := context.Background()
	boom := errors.New("boom")
	s.FailNext(2, memory.OpWatch, boom)
	s.FailNext(1, memory.OpAny, nil)
	s.FailNext(1, memory.OpList, informer.ErrTooManyRequests)
	s.FailNext(0, memory.OpList, boom) // nothing

	list := func() error { _, err := s.List(ctx, informer.ListOptions{}); return err }
	wat := func() error {
		w, err := s.Watch(ctx, informer.WatchOptions{})
		if err == nil {
			w.Stop()
		}
		return err
	}
	for i, step := range []struct {
		call func() error
		want error
	}{
		{list, informer.ErrUnavailable}, // the OpAny rule: the oldest that matches a list
		{wat, boom},
		{list, informer.ErrTooManyRequests},
		{wat, boom},
		{list, nil},
		{wat, nil},
	} {
		if err := step.call(); !errors.Is(err, step.want) || (step.want == nil && err != nil) {
			t.Fatalf("call %d: %v, want %v", i, err, step.want)
		}
	}
	reqs := s.Requests()
	var ops []string
	for _, r := range reqs {
		ops = append(ops, r.Op.String())
	}
	if want := []string{"List", "Watch", "List", "Watch", "List", "Watch"}; !slices.Equal(ops, want) {
		t.Fatalf("requests %q, want %q", ops, want)
	}
}

func TestRequestsRecordOptions(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	ctx := context.Background()
	lopts := informer.ListOptions{Revision: "1", Consistent: true, Limit: 5}
	wopts := informer.WatchOptions{Revision: "1", Timeout: 90 * time.Second, AllowBookmarks: true}
	s.List(ctx, lopts)
	w, _ := s.Watch(ctx, wopts)
	w.Stop()
	reqs := s.Requests()
	if len(reqs) != 2 || reqs[0] != (memory.Request{Op: memory.OpList, List: lopts}) ||
		reqs[1] != (memory.Request{Op: memory.OpWatch, Watch: wopts}) {
		t.Fatalf("requests %+v", reqs)
	}
	reqs[0].Op = memory.OpWatch // the slice is the caller's
	if s.Requests()[0].Op != memory.OpList {
		t.Fatal("Requests returned the source's own slice")
	}
}

// KeepRequests keeps the newest calls only, or none.
func TestRequestsKept(t *testing.T) {
	ctx := context.Background()
	for _, keep := range []int{-1, 1, 3} {
		s := newSource(memory.Options{KeepRequests: keep})
		for i := range 10 {
			w, err := s.Watch(ctx, informer.WatchOptions{Revision: "0", Timeout: time.Duration(i+1) * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			w.Stop()
		}
		var got []time.Duration
		for _, r := range s.Requests() {
			got = append(got, r.Watch.Timeout/time.Second)
		}
		var want []time.Duration
		for i := 10 - keep + 1; keep > 0 && i <= 10; i++ {
			want = append(want, time.Duration(i))
		}
		if !slices.Equal(got, want) {
			t.Errorf("KeepRequests %d: the calls kept have timeouts %v, want %v", keep, got, want)
		}
	}
}

func TestDropWatches(t *testing.T) {
	for _, tc := range []struct {
		err, want error
	}{
		{nil, io.EOF},
		{informer.ErrUnavailable, informer.ErrUnavailable},
	} {
		t.Run(fmt.Sprint(tc.want), func(t *testing.T) {
			s := newSource(memory.Options{})
			put(s, "a", "1")
			pending := watch(t, s, informer.WatchOptions{Revision: "0"})
			blocked := watch(t, s, informer.WatchOptions{})
			ch := nextAsync(blocked)
			if s.OpenWatches() != 2 {
				t.Fatalf("%d open watches", s.OpenWatches())
			}
			s.DropWatches(tc.err)
			// Pending events are abandoned.
			if _, err := pending.Next(); !errors.Is(err, tc.want) {
				t.Fatalf("Next of a dropped watch: %v, want %v", err, tc.want)
			}
			if r := await(t, ch); !errors.Is(r.err, tc.want) {
				t.Fatalf("blocked Next of a dropped watch: %v, want %v", r.err, tc.want)
			}
			if s.OpenWatches() != 0 {
				t.Fatalf("%d open watches after the drop", s.OpenWatches())
			}
			// The consumer watches again from its last revision and misses nothing.
			again := watch(t, s, informer.WatchOptions{Revision: "0"})
			put(s, "a", "2")
			expectEvents(t, again, "Added a=1@1", "Modified a=2@2")
		})
	}
}

func TestSetDelay(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	s := newSource(memory.Options{Clock: fc})
	put(s, "a", "1")
	s.SetDelay(time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := s.List(context.Background(), informer.ListOptions{})
		done <- err
	}()
	fc.WaitForWaiters(1, t.Context().Done())
	select {
	case err := <-done:
		t.Fatalf("List returned before the delay: %v", err)
	default:
	}
	fc.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A cancelled context ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := s.Watch(ctx, informer.WatchOptions{})
		done <- err
	}()
	fc.WaitForWaiters(1, t.Context().Done())
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch cancelled during the delay: %v", err)
	}
	if fc.Waiters() != 0 {
		t.Fatal("the delay timer was not released")
	}
	s.SetDelay(0)
	if _, err := s.List(context.Background(), informer.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Requests()); n != 3 {
		t.Fatalf("%d requests recorded, want 3", n)
	}
}

func TestInject(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	w := watch(t, s, informer.WatchOptions{Revision: "0"})
	w2 := watch(t, s, informer.WatchOptions{})
	ch := nextAsync(w2)
	s.Inject(informer.Event[*obj]{Type: informer.Modified, Object: &obj{Key: "a", Val: "stale"}, Revision: "0"})
	s.Inject(informer.Event[*obj]{Type: informer.EventType(42), Revision: "x"})
	put(s, "b", "1")
	expectEvents(t, w, "Added a=1@1", "Modified a=stale@0", "EventType(42) <nil>@x", "Added b=1@2")
	if r := await(t, ch); r.err != nil || format(r.ev) != "Modified a=stale@0" {
		t.Fatalf("blocked watch got %s, %v", format(r.ev), r.err)
	}
	expectEvents(t, w2, "EventType(42) <nil>@x", "Added b=1@2")
	if s.Revision() != 2 || s.Len() != 2 {
		t.Fatalf("Inject changed the state: revision %d, len %d", s.Revision(), s.Len())
	}
}

func TestWaitForWatches(t *testing.T) {
	s := newSource(memory.Options{})
	done := make(chan error, 1)
	go func() { done <- s.WaitForWatches(context.Background(), 2) }()
	w1 := watch(t, s, informer.WatchOptions{})
	select {
	case err := <-done:
		t.Fatalf("WaitForWatches(2) returned with one watch: %v", err)
	default:
	}
	watch(t, s, informer.WatchOptions{})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w1.Stop()
	if s.OpenWatches() != 1 {
		t.Fatalf("OpenWatches %d", s.OpenWatches())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitForWatches(ctx, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForWatches with a cancelled context: %v", err)
	}
}
