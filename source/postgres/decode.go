package postgres

import (
	"fmt"
	"reflect"
	"strings"

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
type structDecoder[V any] struct {
	typ    reflect.Type // the struct type
	ptr    bool         // V is *struct
	fields map[string]int
}

func newStructDecoder[V any]() (*structDecoder[V], error) {
	t := reflect.TypeFor[V]()
	d := &structDecoder[V]{typ: t, fields: map[string]int{}}
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
		d.fields[name] = i
	}
	return d, nil
}

func (d *structDecoder[V]) decode(r *Row) (V, error) {
	var zero V
	p := reflect.New(d.typ)
	s := p.Elem()
	for i, c := range r.cols {
		if !r.present[i] {
			continue
		}
		fi, ok := d.fields[c.name]
		if !ok {
			fi, ok = d.fields[strings.ToLower(c.name)]
		}
		if !ok {
			continue
		}
		if err := r.scan(i, s.Field(fi).Addr().Interface()); err != nil {
			return zero, err
		}
	}
	if d.ptr {
		return p.Interface().(V), nil
	}
	return s.Interface().(V), nil
}
