package persist

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// defaultCodec returns Binary when V is plain, JSON when JSON gives every value of V back
// as it was (or allowLossy), and why it chose it; an error when neither serves V.
func defaultCodec[V any](allowLossy bool) (Codec[V], string, error) {
	t := reflect.TypeFor[V]()
	c, err := Binary[V]()
	if err == nil {
		return c, "the type is plain", nil
	}
	notPlain := errors.Unwrap(err) // what Binary found not plain, without its prefix
	loss := jsonLoss(t, map[reflect.Type]bool{})
	switch {
	case allowLossy && loss != nil:
		return JSON[V](), fmt.Sprintf("Binary cannot store the type (%v); JSON loses data (%v), as Options.AllowLossyJSON allows", notPlain, loss), nil
	case allowLossy:
		return JSON[V](), fmt.Sprintf("Binary cannot store the type (%v); JSON stores strings that are not valid UTF-8 with U+FFFD, as Options.AllowLossyJSON allows", notPlain), nil
	case loss == nil:
		return strictJSON[V](), fmt.Sprintf("Binary cannot store the type (%v)", notPlain), nil
	}
	return nil, "", fmt.Errorf("objects of type %v cannot be saved exactly: Binary cannot store them (%v) and JSON would not give them back as they were (%v); give Options.Codec a codec of your own for the type, or set Options.AllowLossyJSON to accept the loss", t, notPlain, loss)
}

// jsonEncoders are the interfaces by which a type has its own JSON encoding; a map key of
// a textMarshalerType is stored too.
var (
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	jsonEncoders      = []reflect.Type{reflect.TypeFor[json.Marshaler](), textMarshalerType}
)

// jsonLoss returns why encoding/json cannot give back every value of t as it was, or nil
// when it can: a field it does not store (unexported), an interface (its numbers come back
// as float64, its structs as maps), a kind it refuses (channels, functions, complex
// numbers, maps of other keys) and floats, whose NaN and ±Inf it refuses (a save of such
// a value fails). A type with its own encoding (MarshalJSON, MarshalText, time.Time) is
// trusted; time.Time keeps its instant and offset but not its Location's name (a UTC
// time comes back as UTC, a Local one with a fixed zone of the same offset: Equal holds).
// Strings are checked when they are saved (see strictJSON).
func jsonLoss(t reflect.Type, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	for _, m := range jsonEncoders {
		if t.Implements(m) || reflect.PointerTo(t).Implements(m) {
			return nil
		}
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.String:
		return nil
	case reflect.Float32, reflect.Float64:
		return fmt.Errorf("%v can hold NaN or ±Inf, which JSON cannot store (a save of such a value fails)", t)
	case reflect.Interface:
		return fmt.Errorf("%v is an interface: JSON gives its numbers back as float64 and its structs as maps", t)
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return jsonLoss(t.Elem(), seen)
	case reflect.Map:
		switch k := t.Key(); {
		case k.Kind() == reflect.String, k.Kind() >= reflect.Int && k.Kind() <= reflect.Uintptr,
			k.Implements(textMarshalerType) || reflect.PointerTo(k).Implements(textMarshalerType):
		default:
			return fmt.Errorf("%v: JSON cannot store map keys of type %v", t, k)
		}
		return jsonLoss(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == "-" {
				continue
			}
			switch {
			case f.Anonymous && !f.IsExported() && f.Type.Kind() == reflect.Struct:
				// JSON stores the exported fields it promotes.
			case !f.IsExported():
				return fmt.Errorf("%v.%s is not exported: JSON does not store it", t, f.Name)
			}
			if err := jsonLoss(f.Type, seen); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%v is of kind %v, which JSON cannot store", t, t.Kind())
}

// strictJSON is the JSON codec that fails to encode a string that is not valid UTF-8,
// which encoding/json would store as U+FFFD: the save fails, naming the object, rather
// than restore it changed. It is the default codec for a type JSON stores exactly; JSON
// itself stores U+FFFD. (A MarshalJSON method that writes the escape \ufffd itself is
// refused too.)
func strictJSON[V any]() Codec[V] {
	c := JSON[V]().(CodecFuncs[V])
	c.EncodeFunc = func(obj V) ([]byte, error) {
		b, err := json.Marshal(obj)
		if err == nil && replacedInvalidUTF8(b) {
			return nil, errInvalidUTF8
		}
		return b, err
	}
	return c
}

var errInvalidUTF8 = errors.New("a string is not valid UTF-8: JSON would store U+FFFD in place of its bad bytes (give the type a codec of your own, or set Options.AllowLossyJSON)")

// replacedInvalidUTF8 reports whether encoding/json's output b holds the escape \ufffd,
// which it writes for each byte of a string that is not valid UTF-8 (a valid U+FFFD is
// written as itself).
func replacedInvalidUTF8(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\ufffd`))
		if i < 0 {
			return false
		}
		slashes := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			slashes++
		}
		if slashes%2 == 0 {
			return true // the backslash at i starts an escape
		}
		b = b[i+1:]
	}
}
