package memory

import (
	"context"
	"errors"
	"testing"

	"github.com/informer-go/informer"
)

func pinCount(s *Source[string, string]) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pins)
}

// Snapshots of paged lists live only while needed.
func TestPinsAreReleased(t *testing.T) {
	s := New(func(v string) string { return v }, Options{})
	for _, v := range []string{"a", "b", "c"} {
		s.Put(v)
	}
	ctx := context.Background()
	if _, err := s.List(ctx, informer.ListOptions{Limit: 3}); err != nil || pinCount(s) != 0 {
		t.Fatalf("a list that fits one page pinned %d snapshots (err %v)", pinCount(s), err)
	}
	p1, _ := s.List(ctx, informer.ListOptions{Limit: 2})
	if pinCount(s) != 1 {
		t.Fatalf("%d pins after a first page", pinCount(s))
	}
	if _, err := s.List(ctx, informer.ListOptions{Limit: 2, Continue: p1.Continue}); err != nil || pinCount(s) != 0 {
		t.Fatalf("%d pins after the last page (err %v)", pinCount(s), err)
	}

	// Abandoned lists: compaction past them releases them.
	s.List(ctx, informer.ListOptions{Limit: 1})
	s.Put("d")
	s.List(ctx, informer.ListOptions{Limit: 1})
	s.Compact(4)
	if pinCount(s) != 1 {
		t.Fatalf("%d pins after compaction, want the one at revision 4", pinCount(s))
	}

	// And there are never more than maxPins.
	first, _ := s.List(ctx, informer.ListOptions{Limit: 1})
	for range maxPins + 10 {
		s.List(ctx, informer.ListOptions{Limit: 1})
	}
	if pinCount(s) != maxPins {
		t.Fatalf("%d pins, want at most %d", pinCount(s), maxPins)
	}
	if _, err := s.List(ctx, informer.ListOptions{Limit: 1, Continue: first.Continue}); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("continue of an evicted list: %v, want ErrExpired", err)
	}
}

// Next allocates nothing; Put allocates nothing once the log has room (the revision
// strings come 256 to a chunk).
func TestAllocs(t *testing.T) {
	s := New(func(v string) string { return v }, Options{})
	w, err := s.Watch(context.Background(), informer.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s.Put("a")
	w.Next()
	if n := testing.AllocsPerRun(1000, func() {
		s.Put("a")
		if _, err := w.Next(); err != nil {
			t.Fatal(err)
		}
	}); n > 0.01 {
		t.Fatalf("Put+Next: %v allocations per run", n)
	}
}
