package wire

// The writing side of the envelopes: a server appends each frame to a buffer it reuses,
// so that nothing is allocated per event. A frame is one NDJSON line, or with sse one
// Server-Sent Event ("data: " and a blank line).

// AppendListStart appends the envelope of a list page up to its first item: rev is the
// page's revision and cont its continue token ("" on the last page). The items follow,
// separated by commas, then AppendListEnd.
func AppendListStart(dst []byte, rev, cont string) []byte {
	dst = append(dst, `{"metadata":{"resourceVersion":`...)
	dst = AppendQuoted(dst, []byte(rev))
	if cont != "" {
		dst = append(dst, `,"continue":`...)
		dst = AppendQuoted(dst, []byte(cont))
	}
	return append(dst, `},"items":[`...)
}

// AppendListEnd appends the end of a list page after its last item.
func AppendListEnd(dst []byte) []byte { return append(dst, "]}\n"...) }

// AppendEventStart appends an event frame of type typ (TypeAdded, TypeModified or
// TypeDeleted) at revision rev up to its object, which follows, then AppendEventEnd.
// lastStateUnknown, on a delete whose object carries the key alone (its source did not
// know the last state: informer.Event.LastStateUnknown), adds "lastStateUnknown":true,
// which a Client passes on to its informer; a reader that does not know the field
// ignores it, as the envelope's unknown fields are, and takes the object for the last
// state, as before the field.
func AppendEventStart(dst []byte, sse bool, typ string, rev []byte, lastStateUnknown bool) []byte {
	if sse {
		dst = append(dst, "data: "...)
	}
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","resourceVersion":`...)
	dst = AppendQuoted(dst, rev)
	if lastStateUnknown {
		dst = append(dst, `,"lastStateUnknown":true`...)
	}
	return append(dst, `,"object":`...)
}

// AppendEventEnd appends the end of an event frame after its object.
func AppendEventEnd(dst []byte, sse bool) []byte {
	return appendFrameEnd(append(dst, '}'), sse)
}

// AppendBookmark appends a BOOKMARK frame in the Kubernetes shape: the object carries only
// metadata.resourceVersion and, at the end of the initial events, the InitialEventsEnd
// annotation.
func AppendBookmark(dst []byte, sse bool, rev []byte, endOfInitial bool) []byte {
	if sse {
		dst = append(dst, "data: "...)
	}
	dst = append(dst, `{"type":"BOOKMARK","resourceVersion":`...)
	dst = AppendQuoted(dst, rev)
	dst = append(dst, `,"object":{"metadata":{"resourceVersion":`...)
	dst = AppendQuoted(dst, rev)
	if endOfInitial {
		dst = append(dst, `,"annotations":{"`+InitialEventsEnd+`":"true"}`...)
	}
	dst = append(dst, "}}}"...)
	return appendFrameEnd(dst, sse)
}

// AppendError appends an ERROR frame carrying a Status.
func AppendError(dst []byte, sse bool, st *Status) []byte {
	if sse {
		dst = append(dst, "data: "...)
	}
	dst = append(dst, `{"type":"ERROR","object":`...)
	dst = AppendStatus(dst, st.Code, st.Reason, st.Message, 0)
	dst = append(dst, '}')
	return appendFrameEnd(dst, sse)
}

func appendFrameEnd(dst []byte, sse bool) []byte {
	if sse {
		return append(dst, "\n\n"...)
	}
	return append(dst, '\n')
}
