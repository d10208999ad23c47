package postgres

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"
)

// Row is one row of the table as the source read it: its columns by name, each value in
// PostgreSQL's text format, decoded on demand through pgx's type map. A Decoder receives
// it; it is valid only during that call.
//
// A Row from a delete carries only the table's replica identity (its primary key, by
// default): Has reports false for the other columns.
type Row struct {
	cols    []column
	vals    [][]byte // nil: NULL
	present []bool   // false: the column's value was not sent (not in a delete's key)
	types   *pgtype.Map
}

// column is a column of the table: its name, its type and whether it is part of the
// replica identity (the key a delete carries).
type column struct {
	name string
	oid  uint32
	key  bool
}

// Columns returns the names of the row's columns, in the table's order. The slice is new.
func (r *Row) Columns() []string {
	out := make([]string, len(r.cols))
	for i, c := range r.cols {
		out[i] = c.name
	}
	return out
}

// Has reports whether the row carries a value (NULL included) for the column.
func (r *Row) Has(column string) bool {
	i := r.index(column)
	return i >= 0 && r.present[i]
}

// Scan decodes the column's value into dst, a pointer, as pgx's Rows.Scan does: *string,
// *int64, *time.Time, *[]byte, *map[string]any for json, pointers to pointers for NULL, any
// pgtype type or sql.Scanner. It fails for a column the row does not have or does not
// carry (see Has), and for a value dst cannot hold.
func (r *Row) Scan(column string, dst any) error {
	i := r.index(column)
	if i < 0 || !r.present[i] {
		return fmt.Errorf("column %q is not in the row", column)
	}
	return r.scan(i, dst)
}

func (r *Row) scan(i int, dst any) error {
	if err := r.types.Scan(r.cols[i].oid, pgtype.TextFormatCode, r.vals[i], dst); err != nil {
		return fmt.Errorf("column %q: %w", r.cols[i].name, err)
	}
	return nil
}

func (r *Row) index(column string) int {
	for i, c := range r.cols {
		if c.name == column {
			return i
		}
	}
	return -1
}

// key describes the row by its key columns, "id=3" or "a=1, b=x", for error messages.
// A row whose key is not known (a table without a replica identity) is described by all
// its columns.
func (r *Row) key() string { return r.describe(64) }

// fullKey is key without values cut short, to tell rows apart.
func (r *Row) fullKey() string { return r.describe(-1) }

// keyOnly returns a copy of the row that carries only its key columns.
func (r *Row) keyOnly() *Row {
	k := &Row{cols: r.cols, vals: r.vals, present: make([]bool, len(r.cols)), types: r.types}
	for i, c := range r.cols {
		k.present[i] = c.key && r.present[i]
	}
	return k
}

func (r *Row) describe(limit int) string {
	var b strings.Builder
	hasKey := false
	for i, c := range r.cols {
		if c.key && r.present[i] {
			hasKey = true
		}
	}
	for i, c := range r.cols {
		if (hasKey && !c.key) || !r.present[i] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.name)
		b.WriteByte('=')
		if r.vals[i] == nil {
			b.WriteString("NULL")
		} else {
			v := r.vals[i]
			if limit >= 0 && len(v) > limit {
				v = v[:limit]
			}
			b.Write(v)
		}
	}
	return b.String()
}

// Decoder turns a row into the object the informer stores. An error leaves the row out
// of the cache and is reported (see the package documentation).
type Decoder[V any] func(r *Row) (V, error)

// StructDecoder returns the decoder a Source uses when Config.Decode is nil (see there),
// for a Config.Decode that adds to it (a check, a derived field). It fails if V is not a
// struct or a pointer to one.
func StructDecoder[V any]() (Decoder[V], error) {
	d, err := newStructDecoder[V]()
	if err != nil {
		return nil, err
	}
	return d.decode, nil
}

// structDecoder decodes rows into a struct type (or a pointer to one) by column name: a
// field tagged `db:"name"` receives column name, a field tagged `db:"-"` none, an
// untagged exported field the column whose name equals its own, ignoring case. Columns
// without a field are ignored; fields without a column keep their zero value.
//
// A row's columns are matched to fields once per column list (a list, a stream's
// Relation), and the common cases — text into a string, an integer into an integer
// field, a bool, a float — are decoded in place; every other pair goes through pgx's
// type map, as Row.Scan does.
type structDecoder[V any] struct {
	typ    reflect.Type // the struct type
	ptr    bool         // V is *struct
	fields map[string]reflect.StructField
	plans  atomic.Pointer[columnPlans] // the plans of the last column list seen
}

// columnPlans is how each column of one column list is decoded.
type columnPlans struct {
	cols  []column // the list they are for (compared by identity)
	plans []columnPlan
}

// columnPlan is how one column is decoded: into the field at offset, of type typ, by
// set when the pair has a fast path, else through the type map; skip for a column
// without a field.
type columnPlan struct {
	skip   bool
	offset uintptr
	typ    reflect.Type
	set    func(field unsafe.Pointer, val []byte) error
}

func newStructDecoder[V any]() (*structDecoder[V], error) {
	t := reflect.TypeFor[V]()
	d := &structDecoder[V]{typ: t, fields: map[string]reflect.StructField{}}
	if t.Kind() == reflect.Pointer {
		d.ptr, d.typ = true, t.Elem()
	}
	if d.typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%v is not a struct or a pointer to one: give Config.Decode", t)
	}
	for i := range d.typ.NumField() {
		f := d.typ.Field(i)
		if !f.IsExported() {
			continue
		}
		name, tagged := f.Tag.Lookup("db")
		name, _, _ = strings.Cut(name, ",")
		switch {
		case name == "-":
			continue
		case !tagged || name == "":
			name = strings.ToLower(f.Name)
		}
		d.fields[name] = f
	}
	return d, nil
}

// plansFor returns the plans of cols, from the last call's if it was for the same list.
func (d *structDecoder[V]) plansFor(cols []column) []columnPlan {
	if p := d.plans.Load(); p != nil && len(p.cols) == len(cols) && (len(cols) == 0 || &p.cols[0] == &cols[0]) {
		return p.plans
	}
	p := &columnPlans{cols: cols, plans: make([]columnPlan, len(cols))}
	for i, c := range cols {
		f, ok := d.fields[c.name]
		if !ok {
			f, ok = d.fields[strings.ToLower(c.name)]
		}
		if !ok {
			p.plans[i].skip = true
			continue
		}
		p.plans[i] = columnPlan{offset: f.Offset, typ: f.Type, set: fastSetter(c.oid, f.Type)}
	}
	d.plans.Store(p)
	return p.plans
}

func (d *structDecoder[V]) decode(r *Row) (V, error) {
	var zero V
	plans := d.plansFor(r.cols)
	p := reflect.New(d.typ)
	base := p.UnsafePointer()
	for i, pl := range plans {
		if pl.skip || !r.present[i] {
			continue
		}
		field := unsafe.Add(base, pl.offset)
		if pl.set != nil && r.vals[i] != nil {
			err := pl.set(field, r.vals[i])
			if err == nil {
				continue
			}
			if err != errTypeMap {
				return zero, fmt.Errorf("column %q: %w", r.cols[i].name, err)
			}
		}
		if err := r.scan(i, reflect.NewAt(pl.typ, field).Interface()); err != nil {
			return zero, err
		}
	}
	if d.ptr {
		return p.Interface().(V), nil
	}
	return p.Elem().Interface().(V), nil
}

// errTypeMap is a fast path's answer for a value it leaves to the type map.
var errTypeMap = errors.New("decode through the type map")

// fastSetter returns how a non-NULL value of the column type oid, in text format, is
// stored into a field of type t without pgx's type map, or nil when that pair has no
// fast path. Each decodes as the type map would.
func fastSetter(oid uint32, t reflect.Type) func(unsafe.Pointer, []byte) error {
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
		if t.Kind() == reflect.String {
			return func(f unsafe.Pointer, v []byte) error {
				*(*string)(f) = string(v)
				return nil
			}
		}
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			bits := t.Bits()
			return func(f unsafe.Pointer, v []byte) error {
				n, err := strconv.ParseInt(unsafe.String(unsafe.SliceData(v), len(v)), 10, bits)
				if err != nil {
					return fmt.Errorf("cannot scan %q into %v: %w", v, t, err)
				}
				reflect.NewAt(t, f).Elem().SetInt(n)
				return nil
			}
		}
	case pgtype.BoolOID:
		if t.Kind() == reflect.Bool {
			return func(f unsafe.Pointer, v []byte) error {
				switch string(v) {
				case "t":
					reflect.NewAt(t, f).Elem().SetBool(true)
				case "f":
					reflect.NewAt(t, f).Elem().SetBool(false)
				default: // the server sends t or f; anything else as the type map reads it
					return errTypeMap
				}
				return nil
			}
		}
	}
	return nil
}
