package persist

import (
	"cmp"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Binary returns a codec, named "binary-1", that writes V's exported fields in a compact
// binary form, several times faster to decode than JSON. It stores what JSON would store,
// so it serves only plain types: booleans, integers, floats, strings, and pointers,
// slices, arrays, maps and structs of them, where every struct field is exported, not
// embedded and not unique only by a json tag, and no type has a MarshalJSON, UnmarshalJSON,
// MarshalText or UnmarshalText method (time.Time, say, or Kubernetes objects). It returns
// an error naming what is not plain otherwise. Fields tagged json:"-" are not stored, as
// with JSON. Map keys are written in order, so equal objects encode to equal bytes.
//
// Fields are written by position: each snapshot records V's shape (kinds and stored
// field names in order, recursively), and a snapshot is read only into a V of a shape
// Binary reads exactly (see the package documentation). The shape is computed once, here.
//
// The default codec of Options is Binary when V is plain, JSON when JSON stores V exactly.
func Binary[V any]() (Codec[V], error) {
	t := reflect.TypeFor[V]()
	if err := plainType(t, map[reflect.Type]bool{}); err != nil {
		return nil, fmt.Errorf("persist: Binary[%v]: %w", t, err)
	}
	s := shapeOf(t)
	return binaryCodec[V]{p: planFor(t), shape: s, shapeText: s.encode()}, nil
}

// binaryName is Binary's codec name.
const binaryName = "binary-1"

// binaryCodec is Binary's codec: a plan and the shape it writes, recorded in the header.
type binaryCodec[V any] struct {
	p         *plan
	shape     *shape
	shapeText string
}

func (binaryCodec[V]) Name() string { return binaryName }

func (c binaryCodec[V]) Encode(obj V) ([]byte, error) {
	return c.p.enc(nil, reflect.ValueOf(&obj).Elem()), nil
}

func (c binaryCodec[V]) Decode(data []byte) (V, error) {
	var obj V
	r := &reader{b: data}
	c.p.dec(r, reflect.ValueOf(&obj).Elem())
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the object", len(r.b))
	}
	return obj, r.err
}

// recordedShape returns the shape Binary writes, recorded in each snapshot's header.
func (c binaryCodec[V]) recordedShape() string { return c.shapeText }

// refuseShape returns why a snapshot recording the shape recorded is not read into
// objects of type typ (V), or nil when Binary reads it exactly.
func (c binaryCodec[V]) refuseShape(recorded, typ string) error {
	return c.shape.refuse(recorded, typ)
}

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// plainType returns an error unless Binary can store t as JSON would; seen holds the
// types being checked (recursive types are checked once).
func plainType(t reflect.Type, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	for _, m := range []reflect.Type{jsonMarshaler, jsonUnmarshaler, textMarshaler, textUnmarshaler} {
		if t.Implements(m) || reflect.PointerTo(t).Implements(m) {
			return fmt.Errorf("%v has its own encoding (%v)", t, m)
		}
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String:
		return nil
	case reflect.Pointer, reflect.Slice:
		return plainType(t.Elem(), seen)
	case reflect.Array:
		if t.Len() == 0 {
			return fmt.Errorf("%v is empty", t)
		}
		return plainType(t.Elem(), seen)
	case reflect.Map:
		switch t.Key().Kind() {
		case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			return fmt.Errorf("%v: map keys of kind %v", t, t.Key().Kind())
		}
		if err := plainType(t.Key(), seen); err != nil {
			return err
		}
		return plainType(t.Elem(), seen)
	case reflect.Struct:
		names := map[string]bool{}
		stored := 0
		for i := range t.NumField() {
			f := t.Field(i)
			switch {
			case !f.IsExported():
				return fmt.Errorf("%v.%s is not exported", t, f.Name)
			case f.Anonymous:
				return fmt.Errorf("%v embeds %s", t, f.Name)
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			name = cmp.Or(name, f.Name)
			if names[strings.ToLower(name)] {
				return fmt.Errorf("%v: two fields named %q for JSON", t, name)
			}
			names[strings.ToLower(name)] = true
			if err := plainType(f.Type, seen); err != nil {
				return err
			}
			stored++
		}
		if stored == 0 {
			return fmt.Errorf("%v stores no field", t)
		}
		return nil
	}
	return fmt.Errorf("%v is of kind %v", t, t.Kind())
}

// plan encodes and decodes values of one type.
type plan struct {
	enc func(b []byte, v reflect.Value) []byte
	dec func(r *reader, v reflect.Value) // v is settable and holds the zero value
}

var plans sync.Map // reflect.Type → *plan

// planFor returns the plan of a plain type.
func planFor(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	p := buildPlan(t, map[reflect.Type]*plan{})
	actual, _ := plans.LoadOrStore(t, p)
	return actual.(*plan)
}

func buildPlan(t reflect.Type, building map[reflect.Type]*plan) *plan {
	if p, ok := building[t]; ok {
		return p // recursive: filled in below before it is used
	}
	p := &plan{}
	building[t] = p
	switch t.Kind() {
	case reflect.Bool:
		p.enc = func(b []byte, v reflect.Value) []byte {
			if v.Bool() {
				return append(b, 1)
			}
			return append(b, 0)
		}
		p.dec = func(r *reader, v reflect.Value) {
			switch r.byte() {
			case 0:
			case 1:
				v.SetBool(true)
			default:
				r.fail("bad bool")
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.enc = func(b []byte, v reflect.Value) []byte { return binary.AppendVarint(b, v.Int()) }
		p.dec = func(r *reader, v reflect.Value) {
			n := r.varint()
			if v.OverflowInt(n) {
				r.fail("integer out of range")
				return
			}
			v.SetInt(n)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		p.enc = func(b []byte, v reflect.Value) []byte { return binary.AppendUvarint(b, v.Uint()) }
		p.dec = func(r *reader, v reflect.Value) {
			n := r.uvarint()
			if v.OverflowUint(n) {
				r.fail("integer out of range")
				return
			}
			v.SetUint(n)
		}
	case reflect.Float32, reflect.Float64:
		p.enc = func(b []byte, v reflect.Value) []byte {
			return binary.LittleEndian.AppendUint64(b, math.Float64bits(v.Float()))
		}
		p.dec = func(r *reader, v reflect.Value) { v.SetFloat(math.Float64frombits(r.uint64())) }
	case reflect.String:
		p.enc = func(b []byte, v reflect.Value) []byte {
			s := v.String()
			return append(binary.AppendUvarint(b, uint64(len(s))), s...)
		}
		p.dec = func(r *reader, v reflect.Value) {
			n := r.uvarint()
			if n > uint64(len(r.b)) {
				r.fail("string past the end of the record")
				return
			}
			v.SetString(string(r.bytes(int(n))))
		}
	case reflect.Pointer:
		elem := buildPlan(t.Elem(), building)
		p.enc = func(b []byte, v reflect.Value) []byte {
			if v.IsNil() {
				return append(b, 0)
			}
			return elem.enc(append(b, 1), v.Elem())
		}
		p.dec = func(r *reader, v reflect.Value) {
			switch r.byte() {
			case 0:
			case 1:
				e := reflect.New(t.Elem())
				elem.dec(r, e.Elem())
				v.Set(e)
			default:
				r.fail("bad pointer flag")
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			p.enc = func(b []byte, v reflect.Value) []byte {
				if v.IsNil() {
					return append(b, 0)
				}
				return append(binary.AppendUvarint(b, uint64(v.Len())+1), v.Bytes()...)
			}
			p.dec = func(r *reader, v reflect.Value) {
				if n := r.length(1); n > 0 {
					s := reflect.MakeSlice(t, n-1, n-1)
					copy(s.Bytes(), r.bytes(n-1))
					v.Set(s)
				}
			}
			break
		}
		elem := buildPlan(t.Elem(), building)
		p.enc = func(b []byte, v reflect.Value) []byte {
			if v.IsNil() {
				return append(b, 0)
			}
			b = binary.AppendUvarint(b, uint64(v.Len())+1)
			for i := range v.Len() {
				b = elem.enc(b, v.Index(i))
			}
			return b
		}
		p.dec = func(r *reader, v reflect.Value) {
			n := r.length(1) // every element takes a byte at least
			if n == 0 {
				return
			}
			s := reflect.MakeSlice(t, n-1, n-1)
			for i := 0; i < n-1 && r.err == nil; i++ {
				elem.dec(r, s.Index(i))
			}
			v.Set(s)
		}
	case reflect.Array:
		elem := buildPlan(t.Elem(), building)
		p.enc = func(b []byte, v reflect.Value) []byte {
			for i := range v.Len() {
				b = elem.enc(b, v.Index(i))
			}
			return b
		}
		p.dec = func(r *reader, v reflect.Value) {
			for i := 0; i < v.Len() && r.err == nil; i++ {
				elem.dec(r, v.Index(i))
			}
		}
	case reflect.Map:
		key, elem := buildPlan(t.Key(), building), buildPlan(t.Elem(), building)
		p.enc = func(b []byte, v reflect.Value) []byte {
			if v.IsNil() {
				return append(b, 0)
			}
			b = binary.AppendUvarint(b, uint64(v.Len())+1)
			keys := v.MapKeys()
			slices.SortFunc(keys, compareKeys)
			for _, k := range keys {
				b = elem.enc(key.enc(b, k), v.MapIndex(k))
			}
			return b
		}
		p.dec = func(r *reader, v reflect.Value) {
			n := r.length(2) // a key and a value take two bytes at least
			if n == 0 {
				return
			}
			m := reflect.MakeMapWithSize(t, n-1)
			for i := 0; i < n-1 && r.err == nil; i++ {
				k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
				key.dec(r, k)
				elem.dec(r, e)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Struct:
		var fields []int
		var plans []*plan
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name == "-" {
				continue
			}
			fields = append(fields, i)
			plans = append(plans, buildPlan(t.Field(i).Type, building))
		}
		p.enc = func(b []byte, v reflect.Value) []byte {
			for j, i := range fields {
				b = plans[j].enc(b, v.Field(i))
			}
			return b
		}
		p.dec = func(r *reader, v reflect.Value) {
			for j, i := range fields {
				if r.err != nil {
					return
				}
				plans[j].dec(r, v.Field(i))
			}
		}
	}
	return p
}

// compareKeys orders map keys of a plain type.
func compareKeys(a, b reflect.Value) int {
	switch a.Kind() {
	case reflect.String:
		return strings.Compare(a.String(), b.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}

// reader reads a Binary record; the first error sticks and later reads return zeros.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("record too short")

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = errors.New(msg)
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail(errShort.Error())
		return 0xff
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	n, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[k:]
	return n
}

// varint reads what binary.AppendVarint wrote: a zig-zag encoded uvarint.
func (r *reader) varint() int64 {
	u := r.uvarint()
	n := int64(u >> 1)
	if u&1 != 0 {
		n = ^n
	}
	return n
}

func (r *reader) uint64() uint64 {
	if len(r.b) < 8 {
		r.fail(errShort.Error())
		return 0
	}
	n := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return n
}

// length reads a length (or a count plus one) whose items take at least per bytes each,
// refusing one the rest of the record cannot hold.
func (r *reader) length(per int) int {
	n := r.uvarint()
	if r.err == nil && n > 0 && (n-1) > uint64(len(r.b)/per) {
		r.fail("length past the end of the record")
		return 0
	}
	return int(n)
}

func (r *reader) bytes(n int) []byte {
	if n > len(r.b) {
		r.fail(errShort.Error())
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}
