package persist

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

type node struct {
	Name string `json:"name"`
	Next *node  `json:"next,omitempty"`
}

type rich struct {
	B      bool              `json:"b"`
	I      int               `json:"i"`
	I8     int8              `json:"i8"`
	I64    int64             `json:"i64"`
	U      uint              `json:"u"`
	U16    uint16            `json:"u16"`
	F32    float32           `json:"f32"`
	F64    float64           `json:"f64"`
	S      string            `json:"s,omitempty"`
	Bytes  []byte            `json:"bytes"`
	Ints   []int             `json:"ints"`
	Arr    [3]string         `json:"arr"`
	M      map[string]int    `json:"m"`
	MI     map[int64]*node   `json:"mi"`
	P      *int              `json:"p"`
	PP     **string          `json:"pp"`
	Nested []map[string]node `json:"nested"`
	List   *node             `json:"list"`
	Skip   string            `json:"-"`
}

func sampleRich(r *rand.Rand) *rich {
	x := &rich{
		B: r.IntN(2) == 1, I: r.Int() - r.Int(), I8: int8(r.IntN(256) - 128), I64: -r.Int64(),
		U: uint(r.Uint64()), U16: uint16(r.Uint32()), F32: r.Float32(), F64: r.NormFloat64(),
		S: strings.Repeat("é", r.IntN(5)), Arr: [3]string{"a", "", "c"},
	}
	if r.IntN(2) == 1 {
		x.Bytes, x.Ints = []byte{}, []int{}
	}
	if r.IntN(2) == 1 {
		x.Bytes, x.Ints = []byte("bytes"), []int{1, -2, 3}
		x.M = map[string]int{}
		for i := range r.IntN(20) {
			x.M[strings.Repeat("k", i)] = i
		}
		x.MI = map[int64]*node{-1: nil, 7: {Name: "n"}}
		n := 5
		x.P = &n
		s := "pp"
		ps := &s
		x.PP = &ps
		x.Nested = []map[string]node{nil, {"a": {Name: "a", Next: &node{Name: "b"}}}}
		x.List = &node{Name: "1", Next: &node{Name: "2", Next: &node{Name: "3"}}}
	}
	return x
}

// Binary stores what JSON stores: an object decoded from Binary equals the object decoded
// from JSON, for objects with every kind, nil and empty slices and maps, and recursion.
func TestBinaryRoundTripLikeJSON(t *testing.T) {
	c, err := Binary[*rich]()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		x := sampleRich(r)
		x.Skip = "not stored"
		b, err := c.Encode(x)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Decode(b)
		if err != nil {
			t.Fatalf("object %d: %v", i, err)
		}
		j, _ := json.Marshal(x)
		var want *rich
		if err := json.Unmarshal(j, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			gj, _ := json.Marshal(got)
			t.Fatalf("object %d: binary gives %s, JSON %s", i, gj, j)
		}
		again, _ := c.Encode(x)
		if string(again) != string(b) {
			t.Fatalf("object %d: two encodings differ (map order?)", i)
		}
	}
	var nilObj *rich
	b, _ := c.Encode(nilObj)
	if got, err := c.Decode(b); err != nil || got != nil {
		t.Fatalf("nil: %v %v", got, err)
	}
}

// Types whose JSON form is not their exported fields are refused, and the default codec
// is then JSON.
func TestBinaryRefusesTypesOfTheirOwnEncoding(t *testing.T) {
	type withTime struct{ T time.Time }
	type withAny struct{ A any }
	type unexported struct {
		A string
		//lint:ignore U1000 an unexported field is what makes the type refused
		b string
	}
	type embeds struct {
		node
		C string
	}
	type sameName struct {
		A string `json:"x"`
		B string `json:"X"`
	}
	type mapOfBool struct{ M map[bool]string }
	type empty struct{}
	for name, err := range map[string]error{
		"time":       plainType(reflect.TypeFor[*withTime](), map[reflect.Type]bool{}),
		"interface":  plainType(reflect.TypeFor[withAny](), map[reflect.Type]bool{}),
		"unexported": plainType(reflect.TypeFor[unexported](), map[reflect.Type]bool{}),
		"embedded":   plainType(reflect.TypeFor[embeds](), map[reflect.Type]bool{}),
		"same name":  plainType(reflect.TypeFor[sameName](), map[reflect.Type]bool{}),
		"bool keys":  plainType(reflect.TypeFor[mapOfBool](), map[reflect.Type]bool{}),
		"empty":      plainType(reflect.TypeFor[[]empty](), map[reflect.Type]bool{}),
		"json.Raw":   plainType(reflect.TypeFor[json.RawMessage](), map[reflect.Type]bool{}),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if c, _, _ := defaultCodec[*withTime](false); c.Name() != "json" {
		t.Errorf("default codec of a type with a time.Time: %s, want json", c.Name())
	}
	if c, _, _ := defaultCodec[*rich](false); c.Name() != "binary-1" {
		t.Errorf("default codec of a plain type: %s, want binary-1", c.Name())
	}
}

// Damaged records are errors, never panics or huge allocations: every truncation, every
// flipped byte, random bytes.
func TestBinaryDecodeDamaged(t *testing.T) {
	c, _ := Binary[*rich]()
	r := rand.New(rand.NewPCG(3, 4))
	x := sampleRich(r)
	for x.M == nil {
		x = sampleRich(r)
	}
	b, _ := c.Encode(x)
	for cut := range len(b) {
		if _, err := c.Decode(b[:cut]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: no error", cut, len(b))
		}
	}
	for i := range b {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			bad := append([]byte(nil), b...)
			bad[i] ^= flip
			c.Decode(bad) // may decode to another object; must not panic
		}
	}
	for range 10000 {
		junk := make([]byte, r.IntN(64))
		for i := range junk {
			junk[i] = byte(r.Uint32())
		}
		c.Decode(junk)
	}
	if _, err := c.Decode(append(b, 0)); err == nil {
		t.Fatal("a byte after the object: no error")
	}
}
