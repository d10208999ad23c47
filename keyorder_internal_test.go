package informer

import (
	"fmt"
	"testing"
)

func TestDefaultCompare(t *testing.T) {
	ci, ok := defaultCompare[int64]()
	if !ok || ci(-5, 3) >= 0 || ci(3, 3) != 0 {
		t.Fatal("int64 order")
	}
	// A struct of ordered fields is ordered as a tuple, field by field.
	type nsName struct{ Namespace, Name string }
	cs, ok := defaultCompare[nsName]()
	if !ok {
		t.Fatal("a struct of strings has an order")
	}
	checkCompare(t, cs, []compareCase[nsName]{
		{nsName{"a", "z"}, nsName{"b", "a"}, -1},
		{nsName{"b", "a"}, nsName{"a", "z"}, 1},
		{nsName{"a", "a"}, nsName{"a", "b"}, -1},
		{nsName{"a", "b"}, nsName{"a", "b"}, 0},
		{nsName{"", "x"}, nsName{"a", ""}, -1},
	})
	type mixed struct {
		Group string
		Prio  int8
		ID    uint64
		Score float32
	}
	cm, ok := defaultCompare[mixed]()
	if !ok {
		t.Fatal("a struct of ordered fields has an order")
	}
	checkCompare(t, cm, []compareCase[mixed]{
		{mixed{"g", -1, 9, 0}, mixed{"g", 1, 0, 0}, -1},
		{mixed{"g", 1, 2, 0}, mixed{"g", 1, 1, 0}, 1},
		{mixed{"g", 1, 1, 0.5}, mixed{"g", 1, 1, 0.25}, 1},
		{mixed{"a", 9, 9, 9}, mixed{"b", 0, 0, 0}, -1},
		{mixed{"g", 1, 1, 1}, mixed{"g", 1, 1, 1}, 0},
	})
	type withPointer struct {
		Name string
		P    *int
	}
	if _, ok := defaultCompare[withPointer](); ok {
		t.Fatal("a struct with a pointer field has no natural order")
	}
	type nested struct{ In nsName }
	if _, ok := defaultCompare[nested](); ok {
		t.Fatal("a struct with a struct field has no natural order (give CompareKeys)")
	}
	// Named ordered types have their natural order too.
	type ID int64
	cid, ok := defaultCompare[ID]()
	if !ok || cid(-5, 3) >= 0 || cid(3, 3) != 0 || cid(7, 3) <= 0 {
		t.Fatal("named int64 order")
	}
	type Name string
	cn, ok := defaultCompare[Name]()
	if !ok || cn("a", "b") >= 0 || cn("b", "b") != 0 {
		t.Fatal("named string order")
	}
	if !isString[Name]() {
		t.Fatal("a named string key takes the string fast path")
	}
	type Score float64
	if cf, ok := defaultCompare[Score](); !ok || cf(-1.5, 2) >= 0 {
		t.Fatal("named float order")
	}
	type Port uint16
	if cp, ok := defaultCompare[Port](); !ok || cp(80, 443) >= 0 {
		t.Fatal("named uint16 order")
	}
	// And an informer over a named key type needs no CompareKeys.
	if _, err := New[ID, string](&scripted{}, Options[ID, string]{Key: func(string) (ID, error) { return 0, nil }}); err != nil {
		t.Fatalf("New with a named integer key: %v", err)
	}
	// Nor one over a struct key of ordered fields.
	if _, err := New[nsName, string](&scripted{}, Options[nsName, string]{Key: func(string) (nsName, error) { return nsName{}, nil }}); err != nil {
		t.Fatalf("New with a struct key: %v", err)
	}
	_ = fmt.Sprint
}

// compareCase is two keys and what comparing them must return, exactly.
type compareCase[K any] struct {
	a, b K
	want int
}

// checkCompare reports every case that compare gets wrong.
func checkCompare[K any](t *testing.T, compare func(K, K) int, cases []compareCase[K]) {
	t.Helper()
	for _, c := range cases {
		if got := compare(c.a, c.b); got != c.want {
			t.Errorf("compare(%v, %v) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
