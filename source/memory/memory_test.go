package memory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type obj struct {
	Key, Val string
}

func (o *obj) String() string { return o.Key + "=" + o.Val }

func newSource(opts memory.Options) *memory.Source[string, *obj] {
	return memory.New(func(o *obj) string { return o.Key }, opts)
}

// sourceOf returns a new Source holding key=1 for each key, written in order.
func sourceOf(keys ...string) *memory.Source[string, *obj] {
	s := newSource(memory.Options{})
	for _, k := range keys {
		put(s, k, "1")
	}
	return s
}

func put(s *memory.Source[string, *obj], key, val string) int64 {
	return s.Put(&obj{Key: key, Val: val})
}

// format renders an event as "Added a=1@3", "Bookmark@3" or "Bookmark(end)@3".
func format(ev informer.Event[*obj]) string {
	switch {
	case ev.Type == informer.Bookmark && ev.EndOfInitialEvents:
		return "Bookmark(end)@" + ev.Revision
	case ev.Type == informer.Bookmark:
		return "Bookmark@" + ev.Revision
	case ev.Object == nil:
		return fmt.Sprintf("%v <nil>@%s", ev.Type, ev.Revision)
	}
	return fmt.Sprintf("%v %v@%s", ev.Type, ev.Object, ev.Revision)
}

// ready reads n events that must already be available (Next does not block for them).
func ready(t *testing.T, w informer.Watch[*obj], n int) []string {
	t.Helper()
	var got []string
	for range n {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("Next after %q: %v", got, err)
		}
		got = append(got, format(ev))
	}
	return got
}

func expectEvents(t *testing.T, w informer.Watch[*obj], want ...string) {
	t.Helper()
	if got := ready(t, w, len(want)); !slices.Equal(got, want) {
		t.Fatalf("events\n got %q\nwant %q", got, want)
	}
}

type result struct {
	ev  informer.Event[*obj]
	err error
}

// nextAsync calls Next in a goroutine; the result arrives on the channel.
func nextAsync(w informer.Watch[*obj]) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ev, err := w.Next()
		ch <- result{ev, err}
	}()
	return ch
}

// await returns the result of nextAsync, failing the test after 10s (a hang, not a timing).
func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return within 10s")
		return result{}
	}
}

func watch(t *testing.T, s *memory.Source[string, *obj], opts informer.WatchOptions) informer.Watch[*obj] {
	t.Helper()
	w, err := s.Watch(context.Background(), opts)
	if err != nil {
		t.Fatalf("Watch(%+v): %v", opts, err)
	}
	t.Cleanup(w.Stop)
	return w
}

func keys(items []*obj) string {
	var b strings.Builder
	for i, o := range items {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(o.String())
	}
	return b.String()
}

func TestPutDeleteGet(t *testing.T) {
	s := newSource(memory.Options{})
	if s.Revision() != 0 || s.Len() != 0 || len(s.Items()) != 0 {
		t.Fatalf("new source: revision %d, len %d", s.Revision(), s.Len())
	}
	w := watch(t, s, informer.WatchOptions{})
	for i, step := range []struct {
		do   func() int64
		want int64
	}{
		{func() int64 { return put(s, "b", "1") }, 1},
		{func() int64 { return put(s, "a", "1") }, 2},
		{func() int64 { return put(s, "b", "2") }, 3},
		{func() int64 { r, _ := s.Delete("a"); return r }, 4},
		{func() int64 { return put(s, "a", "2") }, 5},
	} {
		if got := step.do(); got != step.want {
			t.Fatalf("step %d: revision %d, want %d", i, got, step.want)
		}
	}
	if rev, ok := s.Delete("missing"); ok || rev != 5 {
		t.Fatalf("Delete(missing) = %d, %v; want 5, false", rev, ok)
	}
	expectEvents(t, w, "Added b=1@1", "Added a=1@2", "Modified b=2@3", "Deleted a=1@4", "Added a=2@5")
	if o, ok := s.Get("b"); !ok || o.Val != "2" {
		t.Fatalf("Get(b) = %v, %v", o, ok)
	}
	if _, ok := s.Get("c"); ok {
		t.Fatal("Get(c) found an object")
	}
	items := s.Items()
	if got := keys(items); got != "a=2 b=2" || s.Len() != 2 || s.Revision() != 5 {
		t.Fatalf("Items %q, Len %d, Revision %d", got, s.Len(), s.Revision())
	}
	items[0] = nil // the slice is the caller's
	if got := keys(s.Items()); got != "a=2 b=2" {
		t.Fatalf("Items after changing the returned slice: %q", got)
	}
}

var errOK = errors.New("no error")
