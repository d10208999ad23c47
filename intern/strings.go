package intern

import (
	"reflect"
	"sync"
	"unsafe"
)

// Strings returns a transform that interns, in place, every string reachable from a V
// through exported fields: strings and named string types in struct fields, array and
// slice elements, map keys and values, behind pointers and in interfaces. Use it as
// informer.Options.Transform (or call it from one), where objects arrive freshly decoded
// and nothing else holds them yet; do not use it on an object other goroutines read.
//
// What it does, by kind of value:
//
//   - A pointer's target, a slice's elements and a map's entries are changed in place: the
//     object V points to is the one interned. A V that is not a pointer is interned in the
//     copy the transform receives, which it returns.
//   - Unexported struct fields are left as they are: reflection may not set them, and the
//     package does not reach past that with unsafe writes. No panic, no error.
//   - An interface holding a string, a struct or an array gets a new interned copy of that
//     value (one allocation); one holding a pointer, a map or a slice is interned through
//     it. Nil pointers, maps, slices and interfaces are skipped.
//   - The walk ends on any object graph: for types that can form cycles (a recursive
//     type, or one with an interface) the transform remembers the pointers, maps and
//     slices it has visited and visits each once, so a map holding itself is no
//     trouble. Other types cannot form a cycle; a value they reach twice (two pointers
//     to one struct) is interned twice, which changes nothing.
//   - Channels, functions and unsafe pointers are not followed.
//
// The plan of which fields to visit is computed by reflection once per type, when Strings
// is called, and cached for the process: fields and types that cannot hold a string are
// never visited, and the walk itself reads fields by offset, without reflect.Value, except
// for maps other than map[string]string and for interfaces. Per object it costs, for each
// string, what String costs (a map lookup for a string seen recently; unique.Make and a
// copy for a new one), plus a few ns per pointer, slice or struct on the way and an
// allocation per map entry of a map that is not a map[string]string; the lock that guards
// the held handles is taken once per object. A Kubernetes Pod of 3 containers (about 150
// strings) costs 10 to 15 µs on a shared 2-vCPU machine (BenchmarkStripAndIntern in
// source/kubernetes), against about 100 µs to decode it from JSON.
//
// The transform never fails; it returns its argument and a nil error. It is safe for
// concurrent use.
func Strings[V any]() func(V) (V, error) {
	t := reflect.TypeFor[V]()
	p := planOf(t)
	if p.op == nil {
		return func(v V) (V, error) { return v, nil }
	}
	if t.Kind() == reflect.Pointer && !p.cyclic {
		// The common case, a pointer to a struct: walk the target directly, with no
		// walker (nothing to track) and nothing allocated.
		elem := planOf(t.Elem()).op
		return func(v V) (V, error) {
			q := *(*unsafe.Pointer)(unsafe.Pointer(&v))
			if q == nil {
				return v, nil
			}
			held.mu.Lock()
			defer held.mu.Unlock()
			elem(q, nil)
			return v, nil
		}
	}
	return func(v V) (V, error) {
		w := &walker{track: p.cyclic}
		held.mu.Lock()
		defer held.mu.Unlock()
		p.op(unsafe.Pointer(&v), w)
		return v, nil
	}
}

// walker is the state of one object's walk.
type walker struct {
	// track: remember what was visited (the root type can form cycles).
	track bool
	seen  map[visit]struct{}
}

// visit identifies a pointer target, map or slice backing array of a given type.
type visit struct {
	p   unsafe.Pointer
	typ reflect.Type
	n   int // a slice's length
}

// first reports whether v is seen for the first time in this walk (always, when not
// tracking; a nil walker does not track).
func (w *walker) first(v visit) bool {
	if w == nil || !w.track {
		return true
	}
	if _, ok := w.seen[v]; ok {
		return false
	}
	if w.seen == nil {
		w.seen = make(map[visit]struct{})
	}
	w.seen[v] = struct{}{}
	return true
}

// plan is what to do with a value of one type, at address p. A nil op: the type holds no
// string reachable through exported fields.
type plan struct {
	op func(p unsafe.Pointer, w *walker)
	// cyclic: values of this type can form cycles (its type graph has a cycle or an
	// interface), so a walk from it tracks what it visited.
	cyclic bool
}

// plans caches one *plan per reflect.Type, complete.
var plans sync.Map

// planOf returns the plan for t, building it (and the plans of the types it reaches) on
// first use.
func planOf(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	b := builder{building: map[reflect.Type]*plan{}, built: map[reflect.Type]*plan{}, strings: map[reflect.Type]bool{}}
	p := b.plan(t)
	for t, q := range b.built {
		plans.LoadOrStore(t, q)
	}
	got, _ := plans.LoadOrStore(t, p)
	return got.(*plan)
}

// builder builds the plans of one type and the types it reaches.
type builder struct {
	building map[reflect.Type]*plan // on the current path: a type met again here is recursive
	built    map[reflect.Type]*plan
	strings  map[reflect.Type]bool // memo of holdsStrings
}

// holdsStrings reports whether a value of type t can hold a string reachable through
// exported fields (an interface can hold anything).
func (b *builder) holdsStrings(t reflect.Type) bool {
	if v, ok := b.strings[t]; ok {
		return v
	}
	v := b.reaches(t, map[reflect.Type]bool{})
	b.strings[t] = v
	return v
}

// reaches walks the types reachable from t, each once (seen), and reports whether one of
// them is a string or an interface.
func (b *builder) reaches(t reflect.Type, seen map[reflect.Type]bool) bool {
	if v, ok := b.strings[t]; ok {
		return v
	}
	if seen[t] {
		return false // already on the way: what it reaches is being looked at
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return b.reaches(t.Elem(), seen)
	case reflect.Map:
		return b.reaches(t.Key(), seen) || b.reaches(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && b.reaches(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

func (b *builder) plan(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	if p, ok := b.built[t]; ok {
		return p
	}
	if p, ok := b.building[t]; ok {
		// A recursive type: every type on the path down to here contains the cycle.
		for _, q := range b.building {
			q.cyclic = true
		}
		return p
	}
	p := &plan{}
	if !b.holdsStrings(t) {
		b.built[t] = p
		return p
	}
	b.building[t] = p
	p.op = b.op(t, p)
	delete(b.building, t)
	b.built[t] = p
	return p
}

// call returns a function that runs q's op: directly when q is complete, through q when q
// is still being built (a recursive type), as its op is set later.
func call(q *plan, complete bool) func(unsafe.Pointer, *walker) {
	if complete {
		return q.op
	}
	return func(p unsafe.Pointer, w *walker) { q.op(p, w) }
}

// elem returns the plan of t and a function running it, nil when t holds no strings.
func (b *builder) elem(t reflect.Type, parent *plan) func(unsafe.Pointer, *walker) {
	_, pending := b.building[t]
	q := b.plan(t)
	if q.cyclic {
		parent.cyclic = true
	}
	if !pending && q.op == nil {
		return nil
	}
	return call(q, !pending)
}

var (
	stringType    = reflect.TypeFor[string]()
	stringMapType = reflect.TypeFor[map[string]string]()
)

func (b *builder) op(t reflect.Type, self *plan) func(unsafe.Pointer, *walker) {
	switch t.Kind() {
	case reflect.String:
		return func(p unsafe.Pointer, _ *walker) {
			s := (*string)(p)
			*s = held.intern(*s)
		}

	case reflect.Struct:
		type field struct {
			off uintptr
			op  func(unsafe.Pointer, *walker)
		}
		var fields []field
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			if op := b.elem(f.Type, self); op != nil {
				fields = append(fields, field{f.Offset, op})
			}
		}
		if len(fields) == 1 {
			off, op := fields[0].off, fields[0].op
			return func(p unsafe.Pointer, w *walker) { op(unsafe.Add(p, off), w) }
		}
		return func(p unsafe.Pointer, w *walker) {
			for _, f := range fields {
				f.op(unsafe.Add(p, f.off), w)
			}
		}

	case reflect.Pointer:
		op := b.elem(t.Elem(), self)
		return func(p unsafe.Pointer, w *walker) {
			q := *(*unsafe.Pointer)(p)
			if q != nil && w.first(visit{p: q, typ: t}) {
				op(q, w)
			}
		}

	case reflect.Array:
		op, size, n := b.elem(t.Elem(), self), t.Elem().Size(), t.Len()
		return func(p unsafe.Pointer, w *walker) {
			for i := range n {
				op(unsafe.Add(p, uintptr(i)*size), w)
			}
		}

	case reflect.Slice:
		op, size := b.elem(t.Elem(), self), t.Elem().Size()
		return func(p unsafe.Pointer, w *walker) {
			s := (*sliceHeader)(p)
			if s.data == nil || s.len == 0 || !w.first(visit{p: s.data, typ: t, n: s.len}) {
				return
			}
			for i := range s.len {
				op(unsafe.Add(s.data, uintptr(i)*size), w)
			}
		}

	case reflect.Map:
		if t == stringMapType {
			return func(p unsafe.Pointer, w *walker) {
				m := *(*map[string]string)(p)
				if m == nil || !w.first(visit{p: *(*unsafe.Pointer)(p), typ: t}) {
					return
				}
				for k, v := range m {
					m[held.intern(k)] = held.intern(v) // an existing key: the map takes the new key string
				}
			}
		}
		kop, vop := b.elem(t.Key(), self), b.elem(t.Elem(), self)
		return func(p unsafe.Pointer, w *walker) {
			mp := *(*unsafe.Pointer)(p)
			if mp == nil || !w.first(visit{p: mp, typ: t}) {
				return
			}
			internMap(reflect.NewAt(t, p).Elem(), kop, vop, w)
		}

	case reflect.Interface:
		self.cyclic = true
		return func(p unsafe.Pointer, w *walker) {
			internInterface(reflect.NewAt(t, p).Elem(), w)
		}
	}
	return nil
}

// sliceHeader is the layout of a slice value.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// internMap interns the entries of the map m (non-nil): each key and value is copied out,
// interned, and stored back under the same key, which makes the map keep the interned key
// string.
func internMap(m reflect.Value, kop, vop func(unsafe.Pointer, *walker), w *walker) {
	t := m.Type()
	k, v := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
	for it := m.MapRange(); it.Next(); {
		k.SetIterKey(it)
		v.SetIterValue(it)
		if kop != nil {
			kop(k.Addr().UnsafePointer(), w)
		}
		if vop != nil {
			vop(v.Addr().UnsafePointer(), w)
		}
		m.SetMapIndex(k, v)
	}
}

// internInterface interns the dynamic value of the interface value v (settable).
func internInterface(v reflect.Value, w *walker) {
	if v.IsNil() {
		return
	}
	d := v.Elem()
	t := d.Type()
	q := planOf(t)
	if q.op == nil {
		return
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice:
		// The value is a reference: intern through a copy of it.
		c := reflect.New(t)
		c.Elem().Set(d)
		q.op(c.UnsafePointer(), w)
	case reflect.String:
		if s := d.String(); s != "" {
			if i := held.intern(s); t == stringType {
				v.Set(reflect.ValueOf(i))
			} else {
				v.Set(reflect.ValueOf(i).Convert(t))
			}
		}
	default:
		// A struct or array boxed in the interface may be shared with other interface
		// values: intern a copy and store that.
		c := reflect.New(t)
		c.Elem().Set(d)
		q.op(c.UnsafePointer(), w)
		v.Set(c.Elem())
	}
}
