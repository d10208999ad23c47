package histogram

import (
	"slices"
	"testing"
)

func TestHistogram_BucketsSumCumulative(t *testing.T) {
	h := New(1, 2, 5)
	for _, v := range []float64{0.5, 1, 1.5, 5, 7, 100} {
		h.Observe(v)
	}
	s := h.Snapshot()
	if want := []uint64{2, 1, 1, 2}; !slices.Equal(s.Counts, want) {
		t.Fatalf("counts %v, want %v (a value equal to a bound falls in that bound's bucket)", s.Counts, want)
	}
	if s.Count != 6 || s.Sum != 115 {
		t.Fatalf("count %d sum %v, want 6 and 115", s.Count, s.Sum)
	}
	c := s.Cumulative()
	if c[1] != 2 || c[2] != 3 || c[5] != 4 || len(c) != 3 {
		t.Fatalf("cumulative %v, want map[1:2 2:3 5:4]", c)
	}
	var nilH *Histogram
	nilH.Observe(1) // a histogram not kept ignores observations
	if s := nilH.Snapshot(); s.Bounds != nil || s.Count != 0 {
		t.Fatalf("nil histogram snapshot %+v", s)
	}
}
