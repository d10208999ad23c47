package persist

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// shape is an object type as Binary stores it: the kinds, the stored fields' names in
// order, recursively. A snapshot written by Binary records its type's shape in the
// header, and is read only into a type of the same shape, or of one Binary reads exactly
// (see readsExactly): Binary writes fields by position, so a renamed, moved, added or
// removed field, or a changed kind, would otherwise read values into the wrong fields.
//
// Types[0] is the object type; Key, Elem and a field's Type index Types, so a recursive
// type is a cycle in the table. Struct and named types' names are kept for messages
// only: a type renamed reads the same.
type shape struct {
	Types []shapeType `json:"types"`
}

type shapeType struct {
	Kind   string       `json:"k"`              // a reflect.Kind's name, or "bytes" for a slice of bytes
	Name   string       `json:"n,omitempty"`    // the Go type's name, "" for an unnamed type
	Len    int          `json:"len,omitempty"`  // an array's length
	Key    int          `json:"key,omitempty"`  // a map's key type
	Elem   int          `json:"elem,omitempty"` // the element type of a pointer, slice, array or map
	Fields []shapeField `json:"f,omitempty"`    // a struct's stored fields, in order
}

type shapeField struct {
	Name string `json:"n"`
	Type int    `json:"t"`
}

// shapeOf returns the shape of a plain type (see plainType).
func shapeOf(t reflect.Type) *shape {
	s := &shape{}
	index := map[reflect.Type]int{}
	var add func(t reflect.Type) int
	add = func(t reflect.Type) int {
		if i, ok := index[t]; ok {
			return i
		}
		i := len(s.Types)
		index[t] = i
		s.Types = append(s.Types, shapeType{}) // filled in below, once its elements have indexes
		st := shapeType{Kind: t.Kind().String(), Name: t.Name()}
		switch t.Kind() {
		case reflect.Pointer:
			st.Elem = add(t.Elem())
		case reflect.Slice:
			if t.Elem().Kind() == reflect.Uint8 {
				st.Kind = "bytes"
				break
			}
			st.Elem = add(t.Elem())
		case reflect.Array:
			st.Len = t.Len()
			st.Elem = add(t.Elem())
		case reflect.Map:
			st.Key = add(t.Key())
			st.Elem = add(t.Elem())
		case reflect.Struct:
			for j := range t.NumField() {
				f := t.Field(j)
				if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == "-" {
					continue
				}
				st.Fields = append(st.Fields, shapeField{Name: f.Name, Type: add(f.Type)})
			}
		}
		s.Types[i] = st
		return i
	}
	add(t)
	return s
}

// encode returns the shape as it is recorded in a snapshot's header.
func (s *shape) encode() string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a shape holds strings and integers only
	}
	return string(b)
}

// decodeShape reads a shape recorded in a snapshot's header.
func decodeShape(text string) (*shape, error) {
	s := &shape{}
	if err := json.Unmarshal([]byte(text), s); err != nil {
		return nil, err
	}
	valid := func(i int) bool { return i >= 0 && i < len(s.Types) }
	if len(s.Types) == 0 {
		return nil, fmt.Errorf("no type")
	}
	for _, t := range s.Types {
		ok := valid(t.Key) && valid(t.Elem)
		for _, f := range t.Fields {
			ok = ok && valid(f.Type)
		}
		if !ok {
			return nil, fmt.Errorf("a type index out of range")
		}
	}
	return s, nil
}

// refuse returns why a snapshot whose header records the shape recorded (text, "" for a
// snapshot of the previous format) is not read into a value of shape s, or nil when
// Binary reads it exactly. typ names the object type.
func (s *shape) refuse(recorded, typ string) error {
	if recorded == "" {
		return fmt.Errorf("%w: written by an earlier version of this package, which did not record the shape of %s: a snapshot of a type that changed shape since cannot be told from one that did not, so it is not read (the informer lists instead; the next snapshot records the shape)", ErrIncompatible, typ)
	}
	old, err := decodeShape(recorded)
	if err != nil {
		return fmt.Errorf("%w: malformed type shape in the header: %v", ErrCorrupt, err)
	}
	if diff := readsExactly(old, s); diff != "" {
		return fmt.Errorf("%w: %s changed shape since the snapshot was saved: %s; Binary cannot read the snapshot into the new shape exactly, so it is not used (the informer lists instead)", ErrIncompatible, typ, diff)
	}
	return nil
}

// readsExactly returns "" when Binary reads what it wrote from a value of shape old into
// a value of shape now, every value to the field it came from and unchanged, and the
// first difference otherwise ("field Config.Port: was int, now uint"). Besides equal
// shapes it accepts the changes that do not change what is written: json tags (other
// than "-"), type names, fields Binary does not store (json:"-"), and integers made
// wider of the same signedness (int32 to int64, uint8 to uint).
func readsExactly(old, now *shape) string {
	seen := map[[2]int]bool{}
	var walk func(path string, o, n int) string
	walk = func(path string, o, n int) string {
		if seen[[2]int{o, n}] {
			return ""
		}
		seen[[2]int{o, n}] = true
		ot, nt := old.Types[o], now.Types[n]
		differ := func(what string) string {
			if path == "" || path[0] == '[' {
				return "the object" + path + ": " + what
			}
			return "field " + path + ": " + what
		}
		was := func() string {
			return differ(fmt.Sprintf("was %s, now %s", old.describe(o, 3), now.describe(n, 3)))
		}
		if ob, nb := intBits(ot.Kind), intBits(nt.Kind); ob != 0 && nb != 0 {
			switch {
			case (ob > 0) != (nb > 0):
				return was()
			case abs(nb) < abs(ob):
				return differ(fmt.Sprintf("was %s, now %s, narrower", old.describe(o, 1), now.describe(n, 1)))
			}
			return ""
		}
		if ot.Kind != nt.Kind || ot.Len != nt.Len {
			return was()
		}
		switch nt.Kind {
		case "ptr":
			return walk(path, ot.Elem, nt.Elem)
		case "slice", "array":
			return walk(path+"[]", ot.Elem, nt.Elem)
		case "map":
			if d := walk(path+"[key]", ot.Key, nt.Key); d != "" {
				return d
			}
			return walk(path+"[value]", ot.Elem, nt.Elem)
		case "struct":
			base := path
			if base == "" {
				base = cmp.Or(nt.Name, "struct")
			}
			for i := range max(len(ot.Fields), len(nt.Fields)) {
				switch {
				case i >= len(ot.Fields):
					path = base + "." + nt.Fields[i].Name
					return differ("not in the snapshot (a field added)")
				case i >= len(nt.Fields):
					path = base + "." + ot.Fields[i].Name
					return differ("in the snapshot, no longer in the type (a field removed)")
				case ot.Fields[i].Name != nt.Fields[i].Name:
					path = base + "." + nt.Fields[i].Name
					return differ(fmt.Sprintf("was %s in its place (field %d)", ot.Fields[i].Name, i+1))
				}
				if d := walk(base+"."+nt.Fields[i].Name, ot.Fields[i].Type, nt.Fields[i].Type); d != "" {
					return d
				}
			}
		}
		return ""
	}
	return walk("", 0, 0)
}

// intBits returns the width of an integer kind, negative for an unsigned one, 0 for
// another kind.
func intBits(kind string) int {
	switch kind {
	case "int8":
		return 8
	case "int16":
		return 16
	case "int32":
		return 32
	case "int64":
		return 64
	case "int":
		return strconv.IntSize
	case "uint8":
		return -8
	case "uint16":
		return -16
	case "uint32":
		return -32
	case "uint64":
		return -64
	case "uint":
		return -strconv.IntSize
	}
	return 0
}

func abs(n int) int { return max(n, -n) }

// describe returns type i as Go spells it: its kind for a boolean, number or string, its
// name for another named type, its elements down to depth levels otherwise.
func (s *shape) describe(i, depth int) string {
	t := s.Types[i]
	switch {
	case t.Kind == "struct":
		return cmp.Or(t.Name, "struct{…}")
	case t.Name != "" && (t.Kind == "ptr" || t.Kind == "slice" || t.Kind == "bytes" || t.Kind == "array" || t.Kind == "map"):
		return t.Name
	case depth == 0:
		return "…"
	}
	switch t.Kind {
	case "ptr":
		return "*" + s.describe(t.Elem, depth-1)
	case "slice":
		return "[]" + s.describe(t.Elem, depth-1)
	case "bytes":
		return "[]byte"
	case "array":
		return "[" + strconv.Itoa(t.Len) + "]" + s.describe(t.Elem, depth-1)
	case "map":
		return "map[" + s.describe(t.Key, depth-1) + "]" + s.describe(t.Elem, depth-1)
	}
	return t.Kind
}
