package persist

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

type (
	stamped struct {
		Name string
		At   time.Time
	}
	withSecret struct {
		Name   string
		At     time.Time
		secret string
	}
	withAnyField struct {
		Name  string
		At    time.Time
		Extra any
	}
	withFloat struct {
		Name  string
		At    time.Time
		Ratio float64
	}
	withChan struct {
		At time.Time
		C  chan int
	}
	withFloatKeys struct {
		At time.Time
		M  map[float64]string
	}
	base       struct{ Name string }
	embedsBase struct {
		base
		At time.Time
	}
)

// codecOf calls New for V with the default codec and returns the name of the codec it
// chose.
func codecOf[V any](t *testing.T, allowLossy bool) (string, error) {
	f, err := New[string, V](t.TempDir(), Options[V]{AllowLossyJSON: allowLossy, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", err
	}
	return f.opts.Codec.Name(), nil
}

// A type Binary cannot store falls back to JSON only when JSON gives every value back
// as it was; otherwise New refuses it, saying why and what to do, unless
// Options.AllowLossyJSON accepts the loss.
func TestNewRefusesTypesJSONLoses(t *testing.T) {
	for _, tc := range []struct {
		name, why string
		codec     func(t *testing.T, allowLossy bool) (string, error)
	}{
		{"unexported field", "withSecret.secret is not exported", codecOf[withSecret]},
		{"interface field", "interface {} is an interface", codecOf[withAnyField]},
		{"float field", "float64 can hold NaN or ±Inf", codecOf[withFloat]},
		{"channel", "chan int is of kind chan", codecOf[withChan]},
		{"float map keys", "map keys of type float64", codecOf[withFloatKeys]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, err := tc.codec(t, false)
			if err == nil {
				t.Fatalf("New accepted the type, codec %s", name)
			}
			for _, want := range []string{tc.why, "Binary cannot store", "give Options.Codec", "AllowLossyJSON"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if name, err := tc.codec(t, true); err != nil || name != "json" {
				t.Fatalf("with AllowLossyJSON: codec %q, %v; want json", name, err)
			}
		})
	}
	for name, codec := range map[string]func(*testing.T, bool) (string, error){
		"time.Time":       codecOf[stamped],
		"embedded struct": codecOf[embedsBase],
	} {
		if got, err := codec(t, false); err != nil || got != "json" {
			t.Errorf("%s: codec %q, %v; want json", name, got, err)
		}
	}
}

// records is a slog.Handler that keeps what it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// New logs the codec it chose once, with why Binary was refused.
func TestCodecChoiceLogged(t *testing.T) {
	var h records
	if _, err := New[string, *stamped](t.TempDir(), Options[*stamped]{Logger: slog.New(&h)}); err != nil {
		t.Fatal(err)
	}
	if len(h.recs) != 1 || h.recs[0].Level != slog.LevelInfo {
		t.Fatalf("logged %v, want one Info record", h.recs)
	}
	attrs := map[string]string{}
	h.recs[0].Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	if attrs["codec"] != "json" || attrs["type"] != "*persist.stamped" || !strings.Contains(attrs["why"], "time.Time has its own encoding") {
		t.Fatalf("logged %v, want codec json, the type and why Binary was refused", attrs)
	}
	h.recs = nil
	if _, err := New[string, *rec](t.TempDir(), Options[*rec]{Logger: slog.New(&h)}); err != nil {
		t.Fatal(err)
	}
	if len(h.recs) != 1 || h.recs[0].Level != slog.LevelDebug {
		t.Fatalf("logged %v for a plain type, want one Debug record", h.recs)
	}
}

type named struct {
	Name string
	At   time.Time
	Note string
}

// saveAndLoad saves objs with the default codec, JSON for these types, and returns what
// a load gives back, or the save's error.
func saveAndLoad[V any](t *testing.T, objs []V, key func(V) string, allowLossy bool) ([]V, error) {
	t.Helper()
	f, err := New[string, V](t.TempDir(), Options[V]{Interval: -1, AllowLossyJSON: allowLossy, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(context.Background(), oneIdentity, snapshotOf(t, objs, key)); err != nil {
		return nil, err
	}
	var got []V
	if _, err = f.Load(context.Background(), oneIdentity, func(v V) { got = append(got, v) }); err != nil {
		t.Fatal(err)
	}
	return got, nil
}

// A value JSON cannot store fails the save, naming the object and why; with the default
// codec, a string that is not valid UTF-8, which JSON would store as U+FFFD, too.
func TestSaveFailureNamesObject(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	floats := []withFloat{{Name: "a", At: at}, {Name: "b", At: at, Ratio: math.Inf(1)}}
	_, err := saveAndLoad(t, floats, func(v withFloat) string { return v.Name }, true)
	if err == nil || !strings.Contains(err.Error(), "key b") || !strings.Contains(err.Error(), "+Inf") {
		t.Fatalf("saving +Inf: %v, want an error naming key b and +Inf", err)
	}
	bad := []named{{Name: "a", At: at, Note: "ok \ufffd"}, {Name: "b", At: at, Note: "bad \xff"}}
	key := func(v named) string { return v.Name }
	_, err = saveAndLoad(t, bad, key, false)
	if err == nil || !strings.Contains(err.Error(), "key b") || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("saving invalid UTF-8: %v, want an error naming key b and the string", err)
	}
	got, err := saveAndLoad(t, bad, key, true)
	if err != nil || len(got) != 2 || got[0] != bad[0] || got[1].Note != "bad \ufffd" {
		t.Fatalf("with AllowLossyJSON: %+v, %v; want U+FFFD in b's note", got, err)
	}
}

// Only the escape encoding/json writes for invalid UTF-8 counts, not an escaped
// backslash followed by "ufffd" nor a valid U+FFFD.
func TestReplacedInvalidUTF8(t *testing.T) {
	for s, want := range map[string]bool{
		`"a\ufffd"`:      true,
		`"\\\ufffd"`:     true,
		`"\\ufffd"`:      false,
		`"\\\\ufffd"`:    false,
		"\"\ufffd\"":     false,
		`"\\u" "\ufffd"`: true,
	} {
		if got := replacedInvalidUTF8([]byte(s)); got != want {
			t.Errorf("%s: %v, want %v", s, got, want)
		}
	}
}

// BenchmarkEncodeJSON encodes an object of about 1 KiB with JSON and with the default
// JSON codec, which also looks for the escape of invalid UTF-8 in the output.
func BenchmarkEncodeJSON(b *testing.B) {
	obj := named{Name: "obj", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Note: strings.Repeat("0123456789abcdef", 60)}
	for name, c := range map[string]Codec[named]{"json": JSON[named](), "default": strictJSON[named]()} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Encode(obj); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNew is the cost of New for a plain type, the shape computed once per File,
// never per object.
func BenchmarkNew(b *testing.B) {
	dir := b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New[string, *rich](dir, Options[*rich]{Logger: slog.New(slog.DiscardHandler)}); err != nil {
			b.Fatal(err)
		}
	}
}
