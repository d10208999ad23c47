package httpsource

import (
	"encoding/json"
	"fmt"
)

// Codec splits the envelopes of the protocol — a list page and a watch event — into their
// parts. It never decodes the objects themselves: those go, as raw bytes, to the client's
// item decoder (ClientOptions.Decode), which is where the type V is known.
//
// JSON is the default and what Server and Handler speak. A Codec for another encoding
// must accept what the server sends and must not keep the slices it is given: the bytes
// are reused once the call returns, except where RawList and RawEvent say otherwise.
type Codec interface {
	// ContentType is the media type the client asks for in its Accept header, as in
	// "application/json".
	ContentType() string
	// DecodeList splits a list response body.
	DecodeList(body []byte) (RawList, error)
	// DecodeEvent splits one watch frame.
	DecodeEvent(frame []byte) (RawEvent, error)
}

// RawList is a list page split by a Codec.
type RawList struct {
	// Revision is the list's revision (metadata.resourceVersion); never empty in a valid
	// page.
	Revision string
	// Continue is the token of the next page (metadata.continue), empty on the last page.
	Continue string
	// Items are the encoded objects. They may alias the body passed to DecodeList, which
	// the client does not reuse.
	Items []json.RawMessage
}

// RawEvent is one watch frame split by a Codec.
type RawEvent struct {
	// Type is the event type as sent: "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR",
	// or anything else (which the client rejects).
	Type string
	// Object is the encoded object, nil if the frame has none. It may alias the frame,
	// which is valid only until the next frame is read.
	Object json.RawMessage
	// Revision is the revision the frame carries, "" if none: the JSON codec takes the
	// envelope's "resourceVersion" field (sent by this package's servers), else the
	// object's metadata.resourceVersion (sent by Kubernetes API servers).
	Revision string
	// EndOfInitialEvents is set on a BOOKMARK that ends the initial events of a streaming
	// list (the k8s.io/initial-events-end annotation).
	EndOfInitialEvents bool
	// Status is the decoded object of an ERROR event, nil otherwise.
	Status *StatusError
}

// JSON is the default Codec: the Kubernetes JSON shapes, with the envelope split by an
// allocation-free scanner so that each object is parsed once, by the item decoder. A list
// is {"metadata":{"resourceVersion":…,"continue":…},"items":[…]}; an event is
// {"type":…,"object":…} with an optional "resourceVersion". The envelope is checked
// strictly (RFC 8259); keys match case-sensitively; unknown keys are checked and ignored;
// a duplicate key's last value wins. Inside an object or a list item only quotes and
// brackets are matched, to find its end: the item decoder checks the rest (encoding/json
// does), so a malformed object is still an error, reported by the decoder.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) ContentType() string { return "application/json" }

// DecodeList implements Codec.
func (jsonCodec) DecodeList(body []byte) (RawList, error) { return decodeJSONList(body, 0) }

// decodeJSONList splits a JSON list; a page with more than maxItems items (if > 0) is an
// error, found before the rest of the items are split.
func decodeJSONList(body []byte, maxItems int) (RawList, error) {
	var l RawList
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
		return RawList{}, err
	}
	return l, nil
}

// listMeta reads a list's metadata object into l; it reports whether a resourceVersion
// was present.
func (s *scanner) listMeta(l *RawList) (bool, error) {
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
			return nil, errTooManyItems(maxItems)
		}
		dst = append(dst, s.b[start:s.i:s.i])
		more, err = s.next(']')
	}
	return dst, err
}

// DecodeEvent implements Codec.
func (jsonCodec) DecodeEvent(frame []byte) (RawEvent, error) {
	var ev RawEvent
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
		return RawEvent{}, err
	}
	if len(ev.Object) == 4 && string(ev.Object) == "null" {
		ev.Object = nil
	}
	switch ev.Type {
	case typeBookmark:
		if ev.Object != nil {
			rv, end, err := objectMeta(ev.Object, true)
			if err != nil {
				return RawEvent{}, err
			}
			if !haveRV {
				ev.Revision = rv
			}
			ev.EndOfInitialEvents = end
		}
	case typeError:
		ev.Status = &StatusError{}
		if ev.Object != nil {
			if err := json.Unmarshal(ev.Object, ev.Status); err != nil {
				return RawEvent{}, fmt.Errorf("invalid ERROR event: the object is not a Status: %v", err)
			}
		}
	default:
		if !haveRV && ev.Object != nil {
			rv, _, err := objectMeta(ev.Object, false)
			if err != nil {
				return RawEvent{}, err
			}
			ev.Revision = rv
		}
	}
	return ev, nil
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
	case typeAdded:
		return typeAdded, nil
	case typeModified:
		return typeModified, nil
	case typeDeleted:
		return typeDeleted, nil
	case typeBookmark:
		return typeBookmark, nil
	case typeError:
		return typeError, nil
	default:
		return string(t), nil
	}
}

// tooManyItems is the error of a list page with more items than the limit.
type tooManyItems struct{ max int }

func (e tooManyItems) Error() string { return fmt.Sprintf("more than %d items", e.max) }

func errTooManyItems(max int) error { return tooManyItems{max} }
