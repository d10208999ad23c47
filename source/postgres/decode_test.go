package postgres

import (
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

type label string

// decoded has a field for each pair of column type and Go type the struct decoder
// decodes in place, and two that go through pgx's type map.
type decoded struct {
	Text    string  `db:"text"`
	Varchar string  `db:"varchar"`
	Label   label   `db:"label"`
	Int8    int64   `db:"int8"`
	Int4    int32   `db:"int4"`
	Int2    int16   `db:"int2"`
	Int     int     `db:"int"`
	Bool    bool    `db:"bool"`
	Ptr     *string `db:"ptr"`
	Float   float64 `db:"float"`
}

var decodedColumns = []column{
	{name: "text", oid: pgtype.TextOID}, {name: "varchar", oid: pgtype.VarcharOID},
	{name: "label", oid: pgtype.BPCharOID}, {name: "int8", oid: pgtype.Int8OID},
	{name: "int4", oid: pgtype.Int4OID}, {name: "int2", oid: pgtype.Int2OID},
	{name: "int", oid: pgtype.Int8OID}, {name: "bool", oid: pgtype.BoolOID},
	{name: "ptr", oid: pgtype.TextOID}, {name: "float", oid: pgtype.Float8OID},
}

// The struct decoder decodes each column in place as pgx's type map would, into the same
// value or to an error: each column of each row is checked against the type map's Scan.
func TestStructDecoderDecodesAsTheTypeMap(t *testing.T) {
	d, err := newStructDecoder[*decoded]()
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]string{
		{"a", "b", "c  ", "9223372036854775807", "-2147483648", "32767", "-1", "t", "p", "1.5"},
		{"", "", "", "0", "0", "0", "0", "f", "", "-0"},
		{"x", "y", "z", "1", "2", "32768", "3", "t", "q", "2"},       // int2 out of range
		{"x", "y", "z", "1", "2147483648", "3", "4", "f", "q", "2"},  // int4 out of range
		{"x", "y", "z", "1x", "2", "3", "4", "f", "q", "2"},          // not a number
		{"x", "y", "z", "1", "2", "3", "4", "yes", "q", "2"},         // not t or f
		{"héllo ☃", "y", "z", "+5", "2", "3", "4", "f", "\x00", "2"}, // a sign, UTF-8
	}
	types := newTypeMap()
	for n, vals := range rows {
		r := &Row{cols: decodedColumns, present: make([]bool, len(vals)), types: types}
		for _, v := range vals {
			r.vals = append(r.vals, []byte(v))
		}
		for i := range r.present {
			r.present[i] = true
		}
		got, gotErr := d.decode(r)
		// What the type map makes of each column, one by one.
		want := new(decoded)
		var wantErr error
		s := reflect.ValueOf(want).Elem()
		for i := range decodedColumns {
			if err := r.scan(i, s.Field(i).Addr().Interface()); err != nil && wantErr == nil {
				wantErr = err
			}
		}
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("row %d: decoder error %v, type map error %v", n, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("row %d: decoded %+v, the type map %+v", n, *got, *want)
		}
	}
}

// A NULL goes through the type map: into a pointer it is nil, into a string an error.
func TestStructDecoderNull(t *testing.T) {
	d, err := newStructDecoder[decoded]()
	if err != nil {
		t.Fatal(err)
	}
	cols := []column{{name: "ptr", oid: pgtype.TextOID}, {name: "int8", oid: pgtype.Int8OID}}
	r := &Row{cols: cols, vals: [][]byte{nil, []byte("7")}, present: []bool{true, true}, types: newTypeMap()}
	got, err := d.decode(r)
	if err != nil || got.Ptr != nil || got.Int8 != 7 {
		t.Fatalf("decoded %+v, %v; want a nil Ptr and Int8 7", got, err)
	}
	r = &Row{cols: []column{{name: "text", oid: pgtype.TextOID}}, vals: [][]byte{nil}, present: []bool{true}, types: newTypeMap()}
	if _, err := d.decode(r); err == nil {
		t.Fatal("a NULL decoded into a string field without an error")
	}
}

// BenchmarkStructDecoder decodes rows of the figures' table (a bigint, two short texts
// and one of 960 bytes).
func BenchmarkStructDecoder(b *testing.B) {
	type item struct {
		ID    int64   `db:"id"`
		Name  string  `db:"name"`
		Value string  `db:"value"`
		Extra *string `db:"extra"`
	}
	d, err := newStructDecoder[*item]()
	if err != nil {
		b.Fatal(err)
	}
	cols := []column{{name: "id", oid: pgtype.Int8OID}, {name: "name", oid: pgtype.TextOID}, {name: "value", oid: pgtype.TextOID}, {name: "extra", oid: pgtype.TextOID}}
	r := &Row{cols: cols, vals: [][]byte{[]byte("12345"), []byte("name-12345"), make([]byte, 960), nil}, present: []bool{true, true, true, true}, types: newTypeMap()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.decode(r); err != nil {
			b.Fatal(err)
		}
	}
}
