package intern_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/informer-go/informer/intern"
)

func counting() (*intern.Table[[]int], *int) {
	adds := 0
	return &intern.Table[[]int]{
		Hash: func(v []int) uint64 {
			var h uint64
			for _, x := range v {
				h = h*31 + uint64(x)
			}
			return h
		},
		Equal: slices.Equal[[]int],
		Add:   func([]int) { adds++ },
		Size:  4,
	}, &adds
}

// Share hands back the first equal value it holds, calls Add once per new value, and
// keeps unequal values apart, colliding hashes included.
func TestTable_SharesEqualValues(t *testing.T) {
	tab, adds := counting()
	first := []int{1, 2}
	if got := tab.Share(first); &got[0] != &first[0] {
		t.Fatal("the first value is not the one held")
	}
	if got := tab.Share([]int{1, 2}); &got[0] != &first[0] {
		t.Error("an equal value did not get the held one")
	}
	other := []int{2, 1}
	if got := tab.Share(other); &got[0] != &other[0] {
		t.Error("an unequal value got another")
	}
	collide := []int{0, 33} // 0*31+33 == 1*31+2
	if got := tab.Share(collide); &got[0] != &collide[0] {
		t.Error("a value with a colliding hash got the held one")
	}
	if *adds != 3 {
		t.Errorf("Add called %d times, want 3", *adds)
	}
}

// A value in steady use stays shared across generations; one not used for two
// generations is dropped (a new equal value becomes the shared one).
func TestTable_Generations(t *testing.T) {
	tab, _ := counting()
	hot, cold := []int{7}, []int{8}
	tab.Share(hot)
	tab.Share(cold)
	for i := range 12 { // three generations of 4
		tab.Share([]int{100 + i})
		if got := tab.Share([]int{7}); &got[0] != &hot[0] {
			t.Fatalf("after %d others: the value in use lost its place", i+1)
		}
	}
	fresh := []int{8}
	if got := tab.Share(fresh); &got[0] != &fresh[0] {
		t.Error("a value unused for two generations is still held")
	}
}

// StringMap shares equal maps (whatever their order of insertion), keeps unequal ones
// apart, and returns nil and empty maps as they are.
func TestStringMap(t *testing.T) {
	a := map[string]string{fresh("app"): fresh("web"), fresh("tier"): fresh("front")}
	b := map[string]string{fresh("tier"): fresh("front"), fresh("app"): fresh("web")}
	c := map[string]string{fresh("app"): fresh("front"), fresh("tier"): fresh("web")}
	a = intern.StringMap(a)
	runtime.GC()
	if got := intern.StringMap(b); fmt.Sprintf("%p", got) != fmt.Sprintf("%p", a) {
		t.Error("an equal map was not shared")
	}
	if got := intern.StringMap(c); fmt.Sprintf("%p", got) == fmt.Sprintf("%p", a) || got["app"] != "front" {
		t.Errorf("a map with the values swapped got the shared one: %v", got)
	}
	for k, v := range a {
		if !sameData(k, intern.String(fresh(k))) || !sameData(v, intern.String(fresh(v))) {
			t.Errorf("%s=%s: not interned", k, v)
		}
	}
	if intern.StringMap(nil) != nil {
		t.Error("nil map")
	}
	if e := map[string]string{}; fmt.Sprintf("%p", intern.StringMap(e)) != fmt.Sprintf("%p", e) {
		t.Error("empty map not returned as it is")
	}
}
