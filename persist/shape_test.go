package persist

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/memory"
)

// snapshotOf returns an informer's snapshot of objs, keyed by key.
func snapshotOf[V any](t *testing.T, objs []V, key func(V) string) *informer.Snapshot[string, V] {
	t.Helper()
	src := memory.New(key, memory.Options{})
	for _, o := range objs {
		src.Put(o)
	}
	inf, err := informer.New(src, informer.Options[string, V]{Key: func(v V) (string, error) { return key(v), nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, informertest.DefaultTimeout)
	defer wcancel()
	if informer.WaitForCacheSync(wctx, inf) != nil {
		t.Fatal("informer did not sync")
	}
	return inf.Snapshot()
}

// oneIdentity is the description two builds of one program give the same object type:
// same informer, same type name and package path, whatever the type's shape.
var oneIdentity = informer.PersistedCache{Informer: "configs", Type: "*example.com/app.Config"}

// restoreAs saves objs with the default codec of A and loads the snapshot with the
// default codec of B under the same identity, as a new build of a program whose object
// type changed shape would.
func restoreAs[A, B any](t *testing.T, objs []A, key func(A) string) ([]B, error) {
	t.Helper()
	dir := t.TempDir()
	fa, err := New[string, A](dir, Options[A]{Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := fa.Save(context.Background(), oneIdentity, snapshotOf(t, objs, key)); err != nil {
		t.Fatal(err)
	}
	fb, err := New[string, B](dir, Options[B]{Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var got []B
	_, err = fb.Load(context.Background(), oneIdentity, func(b B) { got = append(got, b) })
	return got, err
}

type (
	renamedA struct{ Name, Host string }
	renamedB struct{ Name, Addr string }

	swappedA struct {
		Name        string
		Port, Limit int
	}
	swappedB struct {
		Name        string
		Limit, Port int
	}

	innerA      struct{ Min, Max int }
	innerB      struct{ Max, Min int }
	nestedSwapA struct {
		Name  string
		Range innerA
	}
	nestedSwapB struct {
		Name  string
		Range innerB
	}

	shiftedA struct {
		Name string
		X, Y int
	}
	shiftedB struct {
		Name string
		Y, Z int
	}

	signedA struct {
		Name string
		Port int
	}
	unsignedB struct {
		Name string
		Port uint
	}

	signedMapA struct {
		Name   string
		Limits map[string]int
	}
	unsignedMapB struct {
		Name   string
		Limits map[string]uint
	}

	signedSliceA struct {
		Name  string
		Ports []int
	}
	unsignedSliceB struct {
		Name  string
		Ports []uint
	}
)

// A snapshot whose object type changed shape in a way Binary cannot read exactly is
// refused as written by another configuration, naming the first difference; it is never
// restored with values in the wrong fields.
func TestShapeChangeRefused(t *testing.T) {
	for _, tc := range []struct {
		name, diff string
		restore    func(t *testing.T) (got any, err error)
	}{
		{"renamed field", "field renamedB.Addr: was Host", func(t *testing.T) (any, error) {
			return restoreAs[renamedA, renamedB](t, []renamedA{{Name: "a", Host: "db1"}}, func(v renamedA) string { return v.Name })
		}},
		{"swapped fields", "field swappedB.Limit: was Port", func(t *testing.T) (any, error) {
			return restoreAs[swappedA, swappedB](t, []swappedA{{Name: "a", Port: 80, Limit: 5}}, func(v swappedA) string { return v.Name })
		}},
		{"swapped fields of a nested struct", "field nestedSwapB.Range.Max: was Min", func(t *testing.T) (any, error) {
			return restoreAs[nestedSwapA, nestedSwapB](t, []nestedSwapA{{Name: "a", Range: innerA{Min: 1, Max: 9}}}, func(v nestedSwapA) string { return v.Name })
		}},
		{"X, Y to Y, Z", "field shiftedB.Y: was X", func(t *testing.T) (any, error) {
			return restoreAs[shiftedA, shiftedB](t, []shiftedA{{Name: "a", X: 1, Y: 2}}, func(v shiftedA) string { return v.Name })
		}},
		{"int to uint", "field unsignedB.Port: was int, now uint", func(t *testing.T) (any, error) {
			return restoreAs[signedA, unsignedB](t, []signedA{{Name: "a", Port: 5}, {Name: "b", Port: -63}}, func(v signedA) string { return v.Name })
		}},
		{"int to uint in a map", "field unsignedMapB.Limits[value]: was int, now uint", func(t *testing.T) (any, error) {
			return restoreAs[signedMapA, unsignedMapB](t, []signedMapA{{Name: "a", Limits: map[string]int{"cpu": 5}}}, func(v signedMapA) string { return v.Name })
		}},
		{"int to uint in a slice", "field unsignedSliceB.Ports[]: was int, now uint", func(t *testing.T) (any, error) {
			return restoreAs[signedSliceA, unsignedSliceB](t, []signedSliceA{{Name: "a", Ports: []int{5, -63}}}, func(v signedSliceA) string { return v.Name })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.restore(t)
			if err == nil {
				t.Fatalf("restored silently: %+v", got)
			}
			if !errors.Is(err, ErrIncompatible) || errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrIncompatible, not ErrCorrupt", err)
			}
			for _, want := range []string{tc.diff, "changed shape", "lists"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

type (
	port    int
	number  int
	taggedA struct {
		Name string `json:"name"`
		Port port   `json:"port"`
	}
	taggedB struct {
		Name string `json:"n"`
		Port number `json:"p,omitempty"`
	}
	narrowA struct {
		Name  string
		Small int32
		Count uint16
		Sizes map[int8]int16
	}
	wideB struct {
		Name  string
		Small int
		Count uint64
		Sizes map[int64]int
	}
	skippedA struct {
		Name string
		Note string `json:"-"`
		Port int
	}
	skippedB struct {
		Name  string
		Port  int
		Cache []string `json:"-"`
	}
	recursiveA struct {
		Name string
		Next *recursiveA
	}
	recursiveB struct {
		Name string
		Next *recursiveB
	}
)

// The shape changes Binary reads exactly are restored, value for value: json tags
// changed, named types renamed, integers widened, fields Binary does not store (json:"-")
// added or removed, a recursive type renamed.
func TestShapeChangeRestored(t *testing.T) {
	check := func(t *testing.T, got, want any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("restored %+v, want %+v", got, want)
		}
	}
	t.Run("json tags and type names", func(t *testing.T) {
		got, err := restoreAs[taggedA, taggedB](t, []taggedA{{Name: "a", Port: -63}}, func(v taggedA) string { return v.Name })
		check(t, got, []taggedB{{Name: "a", Port: -63}}, err)
	})
	t.Run("wider integers", func(t *testing.T) {
		got, err := restoreAs[narrowA, wideB](t, []narrowA{{Name: "a", Small: -1 << 31, Count: 65535, Sizes: map[int8]int16{-128: -32768}}}, func(v narrowA) string { return v.Name })
		check(t, got, []wideB{{Name: "a", Small: -1 << 31, Count: 65535, Sizes: map[int64]int{-128: -32768}}}, err)
	})
	t.Run("fields not stored", func(t *testing.T) {
		got, err := restoreAs[skippedA, skippedB](t, []skippedA{{Name: "a", Note: "x", Port: 8}}, func(v skippedA) string { return v.Name })
		check(t, got, []skippedB{{Name: "a", Port: 8}}, err)
	})
	t.Run("recursive type", func(t *testing.T) {
		got, err := restoreAs[recursiveA, recursiveB](t, []recursiveA{{Name: "a", Next: &recursiveA{Name: "b"}}}, func(v recursiveA) string { return v.Name })
		check(t, got, []recursiveB{{Name: "a", Next: &recursiveB{Name: "b"}}}, err)
	})
}

type oldFixture struct {
	Name string
	Port int
}

// Snapshots of the previous file format (testdata, written by the previous version of
// this package) are read when their codec records no shape, and refused as incompatible,
// saying why, when it was Binary, whose shape they do not record.
func TestLoadPreviousFormat(t *testing.T) {
	load := func(file string, codec Codec[oldFixture]) ([]oldFixture, error) {
		f, err := New[string, oldFixture](filepath.Join("testdata"), Options[oldFixture]{Interval: -1, Codec: codec, FileName: file})
		if err != nil {
			t.Fatal(err)
		}
		var got []oldFixture
		_, err = f.Load(context.Background(), oneIdentity, func(v oldFixture) { got = append(got, v) })
		return got, err
	}
	got, err := load("format2-json.snapshot", JSON[oldFixture]())
	if want := []oldFixture{{"a", 80}, {"b", -63}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("JSON snapshot of format 2: %v, %v; want %v", got, err, want)
	}
	got, err = load("format2-binary.snapshot", nil)
	if !errors.Is(err, ErrIncompatible) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "did not record the shape") {
		t.Fatalf("Binary snapshot of format 2: %v, %v; want ErrIncompatible saying the shape is not recorded", got, err)
	}
}

type (
	wideInt     struct{ N int64 }
	narrowInt   struct{ N int32 }
	twoFields   struct{ A, B string }
	oneField    struct{ A string }
	array3      struct{ A [3]int }
	array4      struct{ A [4]int }
	byteSlice   struct{ B []byte }
	uint16Slice struct{ B []uint16 }
	pointerInt  struct{ P *int }
	plainInt    struct{ P int }
	float32s    struct{ F float32 }
	float64s    struct{ F float64 }
	treeA       struct {
		Kids map[string]*treeA
		V    int
	}
	treeB struct {
		Kids map[string]*treeB
		V    uint
	}
	selfSlice  []selfSlice
	selfSlice2 []selfSlice2
)

// Each shape change Binary cannot read is found, and named; recursive types end.
func TestReadsExactly(t *testing.T) {
	for _, tc := range []struct {
		old, now reflect.Type
		diff     string
	}{
		{reflect.TypeFor[wideInt](), reflect.TypeFor[narrowInt](), "field narrowInt.N: was int64, now int32, narrower"},
		{reflect.TypeFor[oneField](), reflect.TypeFor[twoFields](), "field twoFields.B: not in the snapshot (a field added)"},
		{reflect.TypeFor[twoFields](), reflect.TypeFor[oneField](), "field oneField.B: in the snapshot, no longer in the type (a field removed)"},
		{reflect.TypeFor[array3](), reflect.TypeFor[array4](), "field array4.A: was [3]int, now [4]int"},
		{reflect.TypeFor[byteSlice](), reflect.TypeFor[uint16Slice](), "field uint16Slice.B: was []byte, now []uint16"},
		{reflect.TypeFor[pointerInt](), reflect.TypeFor[plainInt](), "field plainInt.P: was *int, now int"},
		{reflect.TypeFor[float32s](), reflect.TypeFor[float64s](), "field float64s.F: was float32, now float64"},
		{reflect.TypeFor[treeA](), reflect.TypeFor[treeB](), "field treeB.V: was int, now uint"},
		{reflect.TypeFor[*treeA](), reflect.TypeFor[treeA](), "the object: was *treeA, now treeA"},
		{reflect.TypeFor[int](), reflect.TypeFor[uint](), "the object: was int, now uint"},
		{reflect.TypeFor[selfSlice](), reflect.TypeFor[selfSlice2](), ""},
		{reflect.TypeFor[selfSlice](), reflect.TypeFor[[]int](), "the object[]: was selfSlice, now int"},
	} {
		old, now := shapeOf(tc.old), shapeOf(tc.now)
		decoded, err := decodeShape(old.encode())
		if err != nil {
			t.Fatalf("%v: %v", tc.old, err)
		}
		if got := readsExactly(decoded, now); got != tc.diff {
			t.Errorf("%v to %v: %q, want %q", tc.old, tc.now, got, tc.diff)
		}
	}
}
