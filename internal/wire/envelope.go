package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// List is a list page split into its parts.
type List struct {
	// Revision is the list's revision (metadata.resourceVersion); never empty in a valid
	// page.
	Revision string
	// Continue is the token of the next page (metadata.continue), empty on the last page.
	Continue string
	// Items are the encoded objects. They alias the body passed to DecodeList.
	Items []json.RawMessage
}

// Event is a watch frame split into its parts.
type Event struct {
	// Type is the event type as sent: TypeAdded, TypeModified, TypeDeleted, TypeBookmark,
	// TypeError, or anything else (which a client rejects).
	Type string
	// Object is the encoded object, nil if the frame has none; for an ERROR event, the
	// Status. It aliases the frame.
	Object json.RawMessage
	// Revision is the revision the frame carries, "" if none: the envelope's
	// "resourceVersion" field (sent by this project's servers), else the object's
	// metadata.resourceVersion (sent by Kubernetes API servers).
	Revision string
	// EndOfInitialEvents is set on a BOOKMARK that ends the initial events of a streaming
	// list (the InitialEventsEnd annotation).
	EndOfInitialEvents bool
	// LastStateUnknown is the envelope's "lastStateUnknown" field (false if absent): on a
	// DELETED event, the object carries the key alone, not the object's last state (see
	// AppendEventStart).
	LastStateUnknown bool
}

// The JSON envelopes are the Kubernetes shapes, split by an allocation-free scanner so
// that each object is parsed once, by the client's item decoder. A list is
// {"metadata":{"resourceVersion":…,"continue":…},"items":[…]}; an event is
// {"type":…,"object":…} with an optional "resourceVersion" and, on a DELETED event, an
// optional "lastStateUnknown" (true or false). The envelope is checked
// strictly (RFC 8259); keys match case-sensitively; unknown keys are checked and ignored;
// a duplicate key's last value wins. Inside an object or a list item only quotes and
// brackets are matched, to find its end: the item decoder checks the rest (encoding/json
// does), so a malformed object is still an error, reported by the decoder.

// DecodeList splits a JSON list page; a page with more than maxItems items (if > 0) is
// a TooManyItems error, found before the rest of the items are split.
func DecodeList(body []byte, maxItems int) (List, error) {
	var l List
	s := scanner{b: body}
	haveRV := false
	more, err := s.open('{', '}')
	for err == nil && more {
		var k []byte
		if k, err = s.key(); err != nil {
			break
		}
		switch {
		case string(k) == "metadata" && s.i < len(s.b) && s.b[s.i] == '{':
			haveRV, err = s.listMeta(&l)
		case string(k) == "items" && s.i < len(s.b) && s.b[s.i] == '[':
			l.Items, err = s.items(l.Items[:0], maxItems)
		case string(k) == "items" && s.i < len(s.b) && s.b[s.i] == 'n':
			l.Items, err = nil, s.literal("null")
		case string(k) == "metadata":
			err = fmt.Errorf("invalid list: metadata is not an object")
		case string(k) == "items":
			err = fmt.Errorf("invalid list: items is not an array")
		default:
			err = s.skipValue(1)
		}
		if err == nil {
			more, err = s.next('}')
		}
	}
	if err == nil {
		err = s.end()
	}
	if err == nil && (!haveRV || l.Revision == "") {
		err = fmt.Errorf("invalid list: no metadata.resourceVersion")
	}
	if err != nil {
		return List{}, err
	}
	return l, nil
}

// listMeta reads a list's metadata object into l; it reports whether a resourceVersion
// was present.
func (s *scanner) listMeta(l *List) (bool, error) {
	haveRV := false
	more, err := s.open('{', '}')
	for err == nil && more {
		var k []byte
		if k, err = s.key(); err != nil {
			break
		}
		switch {
		case string(k) == "resourceVersion" && s.i < len(s.b) && s.b[s.i] == '"':
			l.Revision, err = s.stringValue()
			haveRV = true
		case string(k) == "continue" && s.i < len(s.b) && s.b[s.i] == '"':
			l.Continue, err = s.stringValue()
		case string(k) == "resourceVersion" || string(k) == "continue":
			err = fmt.Errorf("invalid list: metadata.%s is not a string", k)
		default:
			err = s.skipValue(2)
		}
		if err == nil {
			more, err = s.next('}')
		}
	}
	return haveRV, err
}

// items reads an array of values and appends each one's bytes; more than maxItems (if
// > 0) is an error.
func (s *scanner) items(dst []json.RawMessage, maxItems int) ([]json.RawMessage, error) {
	more, err := s.open('[', ']')
	if dst == nil {
		dst = make([]json.RawMessage, 0, 16)
	}
	for err == nil && more {
		s.skipWS()
		start := s.i
		if err = s.skipLoose(); err != nil {
			break
		}
		if maxItems > 0 && len(dst) >= maxItems {
			return nil, TooManyItems{maxItems}
		}
		dst = append(dst, s.b[start:s.i:s.i])
		more, err = s.next(']')
	}
	return dst, err
}

// DecodeEvent splits one JSON watch frame.
func DecodeEvent(frame []byte) (Event, error) {
	var ev Event
	s := scanner{b: frame}
	haveType, haveRV := false, false
	more, err := s.open('{', '}')
	for err == nil && more {
		var k []byte
		if k, err = s.key(); err != nil {
			break
		}
		switch string(k) {
		case "type":
			ev.Type, err = s.eventType()
			haveType = err == nil
		case "object":
			start := s.i
			if err = s.skipLoose(); err == nil {
				ev.Object = frame[start:s.i:s.i]
			}
		case "resourceVersion":
			if s.i < len(s.b) && s.b[s.i] == '"' {
				ev.Revision, err = s.stringValue()
				haveRV = true
			} else {
				err = fmt.Errorf("invalid event: resourceVersion is not a string")
			}
		case "lastStateUnknown":
			ev.LastStateUnknown, err = s.boolValue("lastStateUnknown")
		default:
			err = s.skipValue(1)
		}
		if err == nil {
			more, err = s.next('}')
		}
	}
	if err == nil {
		err = s.end()
	}
	if err == nil && !haveType {
		err = fmt.Errorf("invalid event: no type")
	}
	if err != nil {
		return Event{}, err
	}
	if len(ev.Object) == 4 && string(ev.Object) == "null" {
		ev.Object = nil
	}
	switch ev.Type {
	case TypeBookmark:
		if ev.Object != nil {
			rv, end, err := objectMeta(ev.Object, true)
			if err != nil {
				return Event{}, err
			}
			if !haveRV {
				ev.Revision = rv
			}
			ev.EndOfInitialEvents = end
		}
	case TypeError:
	default:
		if !haveRV && ev.Object != nil {
			rv, _, err := objectMeta(ev.Object, false)
			if err != nil {
				return Event{}, err
			}
			ev.Revision = rv
		}
	}
	return ev, nil
}

// boolValue reads true or false, the value of the envelope's field what.
func (s *scanner) boolValue(what string) (bool, error) {
	switch {
	case s.i < len(s.b) && s.b[s.i] == 't':
		return true, s.literal("true")
	case s.i < len(s.b) && s.b[s.i] == 'f':
		return false, s.literal("false")
	}
	return false, fmt.Errorf("invalid event: %s is not true or false", what)
}

// eventType reads the type string, returning the constants for the known types so that
// the common case does not allocate.
func (s *scanner) eventType() (string, error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", fmt.Errorf("invalid event: type is not a string")
	}
	start, end, esc, err := s.str()
	if err != nil {
		return "", err
	}
	if esc {
		return unquote(s.b[start-1 : end+1])
	}
	switch t := s.b[start:end]; string(t) {
	case TypeAdded:
		return TypeAdded, nil
	case TypeModified:
		return TypeModified, nil
	case TypeDeleted:
		return TypeDeleted, nil
	case TypeBookmark:
		return TypeBookmark, nil
	case TypeError:
		return TypeError, nil
	default:
		return string(t), nil
	}
}

// TooManyItems is the error of a list page with more items than the limit.
type TooManyItems struct {
	// Max is the limit the page went over.
	Max int
}

// Error returns "more than <Max> items".
func (e TooManyItems) Error() string { return fmt.Sprintf("more than %d items", e.Max) }

// CompactJSON checks that b is one JSON value and returns it without line breaks, so that
// it fits in one NDJSON line.
func CompactJSON(b []byte) ([]byte, error) {
	s := scanner{b: b}
	s.skipWS()
	if err := s.skipValue(0); err != nil {
		return nil, err
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	if bytes.IndexByte(b, '\n') < 0 && bytes.IndexByte(b, '\r') < 0 {
		return b, nil
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
