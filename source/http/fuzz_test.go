package httpsource

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"unicode/utf8"

	"github.com/informer-go/informer/internal/wire"

	"github.com/informer-go/informer"
)

// FuzzFrameDecoder feeds arbitrary bytes to both framings and the JSON codec, as a watch
// body (and to the list decoder, as a list body). Nothing may panic; every error is
// io.EOF or matches informer.ErrBadInput; no frame exceeds the limit; and whatever the
// codec accepts, encoding/json reads the same way (differential check), while whatever
// encoding/json reads as a well-formed event the codec accepts; and a list page is split
// the same way under an item limit, or refused above it.
//
// The seed corpus is in testdata/fuzz/FuzzFrameDecoder and runs with every go test; run
// go test -fuzz=FuzzFrameDecoder ./source/http/ to search further.
func FuzzFrameDecoder(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 4096
		for _, framing := range []Framing{NDJSON, ServerSentEvents} {
			r := framing.NewReader(bytes.NewReader(data), limit)
			for range len(data) + 1 {
				frame, err := r.ReadFrame()
				if err != nil {
					if err != io.EOF && !errors.Is(err, informer.ErrBadInput) {
						t.Fatalf("ReadFrame: %v", err)
					}
					break
				}
				if len(frame) > limit {
					t.Fatalf("frame of %d bytes over the limit %d", len(frame), limit)
				}
				checkEvent(t, frame)
			}
		}
		checkEvent(t, data)
		checkList(t, data)
	})
}

// checkEvent compares the codec with encoding/json on one frame.
func checkEvent(t *testing.T, frame []byte) {
	ev, err := JSON.DecodeEvent(frame)
	var m map[string]json.RawMessage
	stdErr := json.Unmarshal(frame, &m)
	if stdErr == nil && m == nil {
		stdErr = errors.New("null")
	}
	if err == nil {
		if stdErr != nil {
			// Only the object may be invalid: the codec leaves that to the item decoder.
			if json.Valid(ev.Object) {
				t.Fatalf("the codec accepted %q, which encoding/json rejects (%v), and its object %q is valid", frame, stdErr, ev.Object)
			}
			return
		}
		var typ string
		if json.Unmarshal(m["type"], &typ) != nil || (utf8.Valid(m["type"]) && typ != ev.Type) {
			t.Fatalf("%q: type %q, encoding/json says %s", frame, ev.Type, m["type"])
		}
		if raw, ok := m["object"]; ok && string(raw) != "null" {
			if !bytes.Equal(raw, ev.Object) {
				t.Fatalf("%q: object %q, encoding/json says %q", frame, ev.Object, raw)
			}
		} else if ev.Object != nil {
			t.Fatalf("%q: object %q, encoding/json finds none", frame, ev.Object)
		}
		if raw, ok := m["resourceVersion"]; ok && utf8.Valid(raw) {
			var rv string
			if json.Unmarshal(raw, &rv) != nil || rv != ev.Revision {
				t.Fatalf("%q: revision %q, encoding/json says %s", frame, ev.Revision, raw)
			}
		}
		var unknown bool
		if raw, ok := m["lastStateUnknown"]; (ok && (json.Unmarshal(raw, &unknown) != nil || unknown != ev.LastStateUnknown)) || (!ok && ev.LastStateUnknown) {
			t.Fatalf("%q: lastStateUnknown %v, encoding/json says %s", frame, ev.LastStateUnknown, raw)
		}
		return
	}
	if stdErr != nil {
		return
	}
	// encoding/json reads an object: the codec must accept it if it is a well-formed event.
	var typ, rv string
	if json.Unmarshal(m["type"], &typ) != nil || m["type"][0] != '"' {
		return // no type, or not a string
	}
	if raw, ok := m["resourceVersion"]; ok && (json.Unmarshal(raw, &rv) != nil || raw[0] != '"') {
		return
	}
	if raw, ok := m["lastStateUnknown"]; ok && string(raw) != "true" && string(raw) != "false" {
		return // not a boolean
	}
	if typ == wire.TypeError {
		var se StatusError
		if obj, ok := m["object"]; ok && json.Unmarshal(obj, &se) != nil {
			return // an ERROR event whose object is not a Status
		}
	}
	t.Fatalf("the codec rejected the well-formed event %q: %v", frame, err)
}

// checkList compares the list decoder with encoding/json.
func checkList(t *testing.T, body []byte) {
	l, err := JSON.DecodeList(body)
	// The item limit: the same page below it, an error above it.
	const maxItems = 3
	capped, cerr := wire.DecodeList(body, maxItems)
	switch {
	case err == nil && len(l.Items) > maxItems:
		if tm := (wire.TooManyItems{}); !errors.As(cerr, &tm) {
			t.Fatalf("%q: %d items over a limit of %d: %v", body, len(l.Items), maxItems, cerr)
		}
	case (err == nil) != (cerr == nil) || len(capped.Items) != len(l.Items) || capped.Revision != l.Revision:
		t.Fatalf("%q: with an item limit %+v, %v; without %+v, %v", body, capped, cerr, l, err)
	}
	if err != nil {
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		// Only an item may be invalid: the codec leaves that to the item decoder.
		for _, it := range l.Items {
			if !json.Valid(it) {
				return
			}
		}
		t.Fatalf("the codec accepted the list %q, which encoding/json rejects (%v), and its items are valid", body, err)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(m["items"], &items); m["items"] != nil && err != nil {
		t.Fatalf("items of %q: %v", body, err)
	}
	if len(items) != len(l.Items) {
		t.Fatalf("%q: %d items, encoding/json finds %d", body, len(l.Items), len(items))
	}
	for i := range items {
		if !bytes.Equal(items[i], l.Items[i]) {
			t.Fatalf("%q: item %d is %q, encoding/json says %q", body, i, l.Items[i], items[i])
		}
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(m["metadata"], &meta); err != nil {
		t.Fatalf("metadata of %q: %v", body, err)
	}
	var rv string
	if err := json.Unmarshal(meta["resourceVersion"], &rv); err != nil || (utf8.Valid(meta["resourceVersion"]) && rv != l.Revision) {
		t.Fatalf("%q: revision %q, encoding/json says %s", body, l.Revision, meta["resourceVersion"])
	}
}
