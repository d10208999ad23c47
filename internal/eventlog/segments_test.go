package eventlog

import (
	"strconv"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
)

// TestMain checks that no goroutine is left when the tests end.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

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

// The segmented log returns every event still in the history, across segment boundaries
// and compactions of every size.
func TestEventLog(t *testing.T) {
	var l segments[int]
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
