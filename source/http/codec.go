package httpsource

import (
	"encoding/json"
	"fmt"

	"github.com/informer-go/informer/internal/wire"
)

// EnvelopeCodec splits the envelopes of the protocol — a list page and a watch event —
// into their parts. It never decodes the objects themselves: those go, as raw bytes, to
// the client's item decoder (ClientOptions.Decode), which is where the type V is known.
//
// JSON is the default and what package fanout speaks. An EnvelopeCodec for another
// encoding must accept what the server sends and must not keep the slices it is given:
// the bytes are reused once the call returns, except where RawList and RawEvent say
// otherwise.
type EnvelopeCodec interface {
	// ContentType is the media type the client asks for in its Accept header, as in
	// "application/json".
	ContentType() string
	// DecodeList splits a list response body.
	DecodeList(body []byte) (RawList, error)
	// DecodeEvent splits one watch frame.
	DecodeEvent(frame []byte) (RawEvent, error)
}

// RawList is a list page split by an EnvelopeCodec.
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

// RawEvent is one watch frame split by an EnvelopeCodec.
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
	// LastStateUnknown is set on a DELETED event whose object carries the key alone, not
	// the object's last state (the JSON codec: the envelope's "lastStateUnknown": true,
	// sent by a fanout PassThrough whose source did not know it). The client passes it on
	// as informer.Event.LastStateUnknown, so that OnDelete receives the informer's cached
	// state; on other event types it is ignored.
	LastStateUnknown bool
	// Status is the decoded object of an ERROR event, nil otherwise.
	Status *StatusError
}

// JSON is the default EnvelopeCodec: the Kubernetes JSON shapes, with the envelope split by an
// allocation-free scanner so that each object is parsed once, by the item decoder. A list
// is {"metadata":{"resourceVersion":…,"continue":…},"items":[…]}; an event is
// {"type":…,"object":…} with an optional "resourceVersion" and, on a DELETED event, an
// optional "lastStateUnknown" (true or false). The envelope is checked
// strictly (RFC 8259); keys match case-sensitively; unknown keys are checked and ignored;
// a duplicate key's last value wins. Inside an object or a list item only quotes and
// brackets are matched, to find its end: the item decoder checks the rest (encoding/json
// does), so a malformed object is still an error, reported by the decoder.
var JSON EnvelopeCodec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) ContentType() string { return "application/json" }

// DecodeList implements EnvelopeCodec.
func (jsonCodec) DecodeList(body []byte) (RawList, error) {
	l, err := wire.DecodeList(body, 0)
	return RawList(l), err
}

// DecodeEvent implements EnvelopeCodec.
func (jsonCodec) DecodeEvent(frame []byte) (RawEvent, error) {
	ev, err := wire.DecodeEvent(frame)
	if err != nil {
		return RawEvent{}, err
	}
	raw := RawEvent{Type: ev.Type, Object: ev.Object, Revision: ev.Revision, EndOfInitialEvents: ev.EndOfInitialEvents, LastStateUnknown: ev.LastStateUnknown}
	if ev.Type == wire.TypeError {
		raw.Status = &StatusError{}
		if ev.Object != nil {
			if err := json.Unmarshal(ev.Object, raw.Status); err != nil {
				return RawEvent{}, fmt.Errorf("invalid ERROR event: the object is not a Status: %v", err)
			}
		}
	}
	return raw, nil
}
