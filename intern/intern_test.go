package intern_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/informer-go/informer/intern"
)

// fresh returns a copy of s with bytes of its own, as a decoder would produce.
func fresh(s string) string { return string([]byte(s)) }

func sameData(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestString_SharesBytes(t *testing.T) {
	a, b := fresh("kube-system"), fresh("kube-system")
	if sameData(a, b) {
		t.Fatal("the test's two strings already share their bytes")
	}
	ia, ib := intern.String(a), intern.String(b)
	if ia != "kube-system" || ib != "kube-system" {
		t.Fatalf("String changed the contents: %q, %q", ia, ib)
	}
	if !sameData(ia, ib) {
		t.Error("two interned equal strings do not share their bytes")
	}
	if got := intern.String(""); got != "" {
		t.Errorf(`String("") = %q`, got)
	}
}

// An object interned after a garbage collection still shares the strings of one interned
// before it, although no unique.Handle of the caller survived: the package holds the
// handles of recently interned strings.
func TestString_SharesAcrossGarbageCollections(t *testing.T) {
	first := intern.String(fresh("shared-across-gc"))
	runtime.GC()
	runtime.GC()
	second := intern.String(fresh("shared-across-gc"))
	if !sameData(first, second) {
		t.Error("a string interned after a GC got a new copy of its bytes")
	}
	runtime.KeepAlive(first)
}

// pod is shaped like a Kubernetes Pod: nested structs, pointers, slices of structs, maps,
// named string types, strings that repeat across objects and strings that do not.
type pod struct {
	Metadata meta      `json:"metadata"`
	Spec     *podSpec  `json:"spec"`
	Status   podStatus `json:"status"`
}

type meta struct {
	Name, Namespace, UID string
	Labels               map[string]string
	Annotations          map[string]string
	Owners               []owner
	Finalizers           []string
}

type owner struct {
	APIVersion, Kind, Name string
	Controller             *bool
}

type phase string

type podSpec struct {
	NodeName   string
	Containers []container
	Priority   *int32
	Selector   map[string]string
}

type container struct {
	Name, Image string
	Args        []string
	Env         []env
	Ports       []port
	Limits      map[string]quantity
}

type env struct{ Name, Value string }

type port struct {
	Name     string
	Port     int32
	Protocol string
}

type quantity struct {
	Value  int64
	Format string
}

type podStatus struct {
	Phase      phase
	Conditions []condition
	PodIP      string
	HostIPs    [2]string
}

type condition struct{ Type, Status, Reason string }

func podJSON(i int) []byte {
	yes := true
	prio := int32(i)
	p := pod{
		Metadata: meta{
			Name: fmt.Sprintf("web-%d", i), Namespace: "shop", UID: fmt.Sprintf("uid-%d", i),
			Labels:      map[string]string{"app": "web", "pod-template-hash": "5d8f9c"},
			Annotations: map[string]string{"team": "payments"},
			Owners:      []owner{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f9c", Controller: &yes}},
			Finalizers:  []string{"example.com/keep"},
		},
		Spec: &podSpec{NodeName: "node-1", Priority: &prio, Selector: map[string]string{"disk": "ssd"}, Containers: []container{{
			Name: "app", Image: "registry.example/web:1.2.3", Args: []string{"--port=8080"},
			Env:    []env{{"MODE", "prod"}},
			Ports:  []port{{"http", 8080, "TCP"}},
			Limits: map[string]quantity{"cpu": {500, "DecimalSI"}},
		}}},
		Status: podStatus{Phase: "Running", PodIP: fmt.Sprintf("10.0.0.%d", i%250), HostIPs: [2]string{"192.168.0.1", ""},
			Conditions: []condition{{"Ready", "True", ""}, {"PodScheduled", "True", "Scheduled"}}},
	}
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

func decode[V any](t testing.TB, b []byte) V {
	t.Helper()
	var v V
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// stringPairs calls f with each pair of corresponding strings of a and b (of one type,
// equal contents), reached as Strings reaches them, with its path.
func stringPairs(a, b reflect.Value, path string, f func(path, x, y string)) {
	switch a.Kind() {
	case reflect.String:
		f(path, a.String(), b.String())
	case reflect.Pointer, reflect.Interface:
		if !a.IsNil() && !b.IsNil() {
			stringPairs(a.Elem(), b.Elem(), path, f)
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				stringPairs(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name, f)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range min(a.Len(), b.Len()) {
			stringPairs(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), f)
		}
	case reflect.Map:
		keys := map[string]reflect.Value{}
		for it := b.MapRange(); it.Next(); {
			keys[fmt.Sprint(it.Key())] = it.Key()
		}
		for it := a.MapRange(); it.Next(); {
			bk, ok := keys[fmt.Sprint(it.Key())]
			if !ok {
				continue
			}
			p := fmt.Sprintf("%s[%v]", path, it.Key())
			stringPairs(it.Key(), bk, p+"(key)", f)
			stringPairs(it.Value(), b.MapIndex(bk), p, f)
		}
	}
}

// Two objects decoded apart, interned, share every string of equal contents (keys of maps
// included), even with garbage collections in between; the objects are otherwise as
// decoded.
func TestStrings_SharesBackingArrays(t *testing.T) {
	tf := intern.Strings[*pod]()
	a, b := decode[*pod](t, podJSON(1)), decode[*pod](t, podJSON(1))
	stringPairs(reflect.ValueOf(a), reflect.ValueOf(b), "pod", func(path, x, y string) {
		if x != "" && sameData(x, y) {
			t.Fatalf("%s: the decoded objects already share %q", path, x)
		}
	})
	before := decode[*pod](t, podJSON(1))

	got, err := tf(a)
	if err != nil || got != a {
		t.Fatalf("Strings()(a) = %p, %v; want a (%p), nil", got, err, a)
	}
	runtime.GC()
	tf(b)
	if !reflect.DeepEqual(a, before) || !reflect.DeepEqual(b, before) {
		t.Fatalf("interning changed the object:\n got %+v\nwant %+v", a, before)
	}
	n := 0
	stringPairs(reflect.ValueOf(a), reflect.ValueOf(b), "pod", func(path, x, y string) {
		if x == "" {
			return
		}
		n++
		if !sameData(x, y) {
			t.Errorf("%s: %q not shared after interning", path, x)
		}
	})
	if n < 25 {
		t.Errorf("compared %d strings; the test pod has more", n)
	}

	// Other objects share the strings that repeat; what differs stays apart.
	c := decode[*pod](t, podJSON(2))
	tf(c)
	if !sameData(c.Spec.Containers[0].Image, a.Spec.Containers[0].Image) || !sameData(string(c.Status.Phase), string(a.Status.Phase)) {
		t.Error("a repeated string of another object is not shared")
	}
	if c.Metadata.Name != "web-2" || a.Metadata.Name != "web-1" {
		t.Errorf("names: %q, %q", c.Metadata.Name, a.Metadata.Name)
	}
}

// A V that is not a pointer is interned in the copy the transform returns.
func TestStrings_ValueTypes(t *testing.T) {
	p := decode[pod](t, podJSON(3))
	got, _ := intern.Strings[pod]()(p)
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("got %+v, want %+v", got, p)
	}
	if want := intern.String(fresh("shop")); !sameData(got.Metadata.Namespace, want) {
		t.Error("the returned copy's namespace is not interned")
	}

	s, _ := intern.Strings[string]()(fresh("plain"))
	if !sameData(s, intern.String(fresh("plain"))) {
		t.Error("a string V is not interned")
	}
	n, err := intern.Strings[int]()(7)
	if n != 7 || err != nil {
		t.Errorf("Strings[int]()(7) = %d, %v", n, err)
	}
	type noStrings struct {
		A int
		B *float64
		C []byte
		D map[int]bool
	}
	v := noStrings{A: 1, D: map[int]bool{1: true}}
	if got, _ := intern.Strings[noStrings]()(v); !reflect.DeepEqual(got, v) {
		t.Errorf("got %+v, want %+v", got, v)
	}
}

type hidden struct {
	Name    string
	private string
	inner   *hidden
	embedded
}

type embedded struct{ Promoted string }

type node struct {
	Name string
	Next *node
	Kids []*node
}

type selfSlice []any

type stringer interface{ String() string }

type label string

func (l label) String() string { return string(l) }

type odd struct {
	Any       any
	AnyStr    any
	AnyLabel  any
	AnyStruct any
	AnyPtr    any
	AnyMap    any
	AnySlice  any
	AnyInt    any
	Nil       any
	Stringer  stringer
	NilPtr    *string
	NilMap    map[string]string
	NilSlice  []string
	Ch        chan string
	Fn        func() string
	Arr       [3]label
	MapAny    map[label]any
	Ptrs      map[string]*string
	Unsafe    unsafe.Pointer
}

// Odd shapes: interfaces of every kind, nil everything, unexported fields (left alone,
// no panic), channels and functions, recursive types whose values form cycles.
func TestStrings_OddTypes(t *testing.T) {
	t.Run("interfaces and nils", func(t *testing.T) {
		s := fresh("boxed")
		mk := func() *odd {
			return &odd{
				Any:    map[string]any{fresh("k"): []any{fresh("v"), 3, map[string]any{fresh("deep"): fresh("er")}}},
				AnyStr: fresh("str"), AnyLabel: label(fresh("lab")), AnyStruct: env{fresh("N"), fresh("V")},
				AnyPtr: &env{fresh("PN"), fresh("PV")}, AnyMap: map[string]string{fresh("mk"): fresh("mv")},
				AnySlice: []string{fresh("s0")}, AnyInt: 4, Stringer: label(fresh("str-er")),
				Arr:    [3]label{label(fresh("a0")), "", label(fresh("a2"))},
				MapAny: map[label]any{label(fresh("lk")): fresh("lv")},
				Ptrs:   map[string]*string{fresh("p"): &s, fresh("nil"): nil},
			}
		}
		a, b, want := mk(), mk(), mk()
		tf := intern.Strings[*odd]()
		tf(a)
		runtime.GC()
		tf(b)
		if !reflect.DeepEqual(a, want) {
			t.Fatalf("interning changed the object:\n got %#v\nwant %#v", a, want)
		}
		stringPairs(reflect.ValueOf(a), reflect.ValueOf(b), "odd", func(path, x, y string) {
			if x != "" && !sameData(x, y) {
				t.Errorf("%s: %q not shared", path, x)
			}
		})
		if got, _ := tf(nil); got != nil {
			t.Errorf("nil pointer: got %p", got)
		}
		if got, _ := tf(&odd{}); !reflect.DeepEqual(got, &odd{}) {
			t.Errorf("zero value changed: %#v", got)
		}
	})

	t.Run("unexported fields are left alone", func(t *testing.T) {
		mk := func() *hidden {
			return &hidden{Name: fresh("name"), private: fresh("private"), inner: &hidden{Name: fresh("inner")}, embedded: embedded{fresh("promoted")}}
		}
		a, b := mk(), mk()
		tf := intern.Strings[*hidden]()
		tf(a)
		tf(b)
		if !sameData(a.Name, b.Name) {
			t.Error("exported field not interned")
		}
		if sameData(a.private, b.private) || sameData(a.inner.Name, b.inner.Name) || sameData(a.Promoted, b.Promoted) {
			t.Error("a string behind an unexported field was interned")
		}
		if !reflect.DeepEqual(a, mk()) {
			t.Errorf("changed: %#v", a)
		}
	})

	t.Run("cycles end", func(t *testing.T) {
		mk := func() *node {
			n := &node{Name: fresh("root")}
			k := &node{Name: fresh("kid"), Next: n}
			n.Next, n.Kids = n, []*node{k, n, k}
			return n
		}
		a, b := mk(), mk()
		tf := intern.Strings[*node]()
		tf(a)
		tf(b)
		if !sameData(a.Name, b.Name) || !sameData(a.Kids[0].Name, b.Kids[0].Name) {
			t.Error("recursive type not interned")
		}

		m := map[string]any{fresh("self"): nil, fresh("x"): fresh("y")}
		m["self"] = m
		sl := selfSlice{fresh("e"), nil}
		sl[1] = sl
		v := any([]any{m, sl, &m})
		tf2 := intern.Strings[any]()
		got, err := tf2(v)
		if err != nil || got.([]any)[0].(map[string]any)["x"] != "y" || sl[0] != "e" {
			t.Errorf("got %v, %v", got, err)
		}
		if !sameData(m["x"].(string), intern.String(fresh("y"))) || !sameData(sl[0].(string), intern.String(fresh("e"))) {
			t.Error("strings inside cyclic values not interned")
		}
	})
}

// Many goroutines intern objects at once (run with -race): every object ends as decoded
// and all share their repeated strings.
func TestStrings_Concurrent(t *testing.T) {
	tf := intern.Strings[*pod]()
	const goroutines, each = 8, 50
	out := make([][]*pod, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				p := decode[*pod](t, podJSON(i))
				tf(p)
				intern.String(fresh(p.Metadata.Name))
				out[g] = append(out[g], p)
			}
		})
	}
	wg.Wait()
	ref := out[0][0]
	for g := range goroutines {
		for i, p := range out[g] {
			if !reflect.DeepEqual(p, decode[*pod](t, podJSON(i))) {
				t.Fatalf("goroutine %d object %d changed", g, i)
			}
			if !sameData(p.Spec.Containers[0].Image, ref.Spec.Containers[0].Image) || !sameData(p.Metadata.Labels["app"], ref.Metadata.Labels["app"]) {
				t.Fatalf("goroutine %d object %d: repeated strings not shared", g, i)
			}
			if !sameData(firstKey(p.Metadata.Labels, "app"), firstKey(ref.Metadata.Labels, "app")) {
				t.Fatalf("goroutine %d object %d: label key not shared", g, i)
			}
		}
	}
}

func firstKey(m map[string]string, want string) string {
	for k := range m {
		if k == want {
			return k
		}
	}
	return ""
}

func BenchmarkString(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fresh(fmt.Sprintf("key-%d-%s", i%100, strings.Repeat("x", 20)))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		intern.String(keys[i%len(keys)])
	}
}

// BenchmarkStrings is the transform on the Pod-shaped test object (about 40 strings);
// source/kubernetes benchmarks it on real Pods.
func BenchmarkStrings(b *testing.B) {
	objs := make([]*pod, 1000)
	for i := range objs {
		objs[i] = decode[*pod](b, podJSON(i))
	}
	tf := intern.Strings[*pod]()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tf(objs[i%len(objs)])
	}
}
