package memory

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/informer-go/informer"
)

func TestRevStrings(t *testing.T) {
	var r revStrings
	for rev := int64(1); rev <= 3*revChunk+7; rev++ {
		if got, want := r.get(rev), strconv.FormatInt(rev, 10); got != want {
			t.Fatalf("get(%d) = %q", rev, got)
		}
	}
	for _, rev := range []int64{5, 1 << 40, 99999, 1<<63 - 1} {
		if got, want := r.get(rev), strconv.FormatInt(rev, 10); got != want {
			t.Fatalf("get(%d) = %q", rev, got)
		}
	}
}

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

// The segmented log returns every event still in the history, across segment boundaries
// and compactions of every size.
func TestEventLog(t *testing.T) {
	var l eventLog[int]
	compacted, last := int64(0), int64(0)
	check := func() {
		t.Helper()
		for r := compacted + 1; r <= last; r++ {
			if ev := l.at(r); ev.Object != int(r) {
				t.Fatalf("at(%d) = %d (compacted %d, last %d)", r, ev.Object, compacted, last)
			}
		}
		if n := int64(len(l.segs)); n*segmentSize < last-l.base || l.base > compacted {
			t.Fatalf("%d segments from %d for revisions %d…%d", n, l.base, compacted+1, last)
		}
	}
	for _, step := range []struct{ add, drop int64 }{
		{1, 0}, {10, 5}, {600, 0}, {0, 505}, {0, 1}, {1000, 1000}, {3, 500}, {segmentSize*3 + 1, 0}, {0, 100000},
	} {
		for range step.add {
			last++
			l.add(last, informer.Event[int]{Object: int(last)})
		}
		to := min(compacted+step.drop, last)
		l.drop(compacted, to)
		compacted = to
		check()
	}
	// Only the segment the next revision goes to is kept, cleared.
	if len(l.segs) != 1 || l.spare == nil || l.segs[0][0].Object != 0 {
		t.Fatalf("after dropping everything: %d segments, spare %v", len(l.segs), l.spare != nil)
	}
}
