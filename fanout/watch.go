package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// watchBufferSize is the size of a watcher's write buffer: frames are assembled there and
// written when it fills or the watcher has caught up with the source. An idle watcher
// holds none: buffers are pooled.
const watchBufferSize = 32 << 10

// watchStream is a watch being sent: the frames not sent yet, and where the watch is in
// its initial events and in a batch.
//
// The changes the watch says share a revision (a transaction of the PassThrough's source; the
// initial events of a Server's replay, which share the state's revision) are sent as a
// batch: each but the last with the partial mark. A bookmark inside a batch would end it
// early for a client, and is dropped. A Server over an unordered upstream has its own
// numbering and sends no batches.
type watchStream[V any] struct {
	h          *handler[V]
	wat        informer.Watch[V]
	batched    informer.BatchedWatch // nil: the watch has no batches
	sse        bool                  // frames are Server-Sent Events
	bookmarks  bool                  // the client asked for bookmarks
	replay     bool                  // initial events the client did not ask for by name
	inInitial  bool                  // the initial events are being sent
	open       bool                  // the last change sent was partial
	plain      bool                  // the client did not ask for history tags: revisions go without
	out        []byte                // the frames not sent yet
	scratch    []byte                // the wire revision of the event being encoded
	stale      func() bool           // reports that the initial events' state left the history; nil: not checked
	initialRev string                // the wire revision of that state
}

// newWatchStream returns the stream of wat to the client of req; replay: the initial
// events are a replay the client did not ask for by name; initial: wat begins with
// initial events.
func newWatchStream[V any](h *handler[V], wat informer.Watch[V], req request, replay, initial bool) *watchStream[V] {
	ws := &watchStream[V]{h: h, wat: wat, replay: replay, inInitial: initial, scratch: make([]byte, 0, 64)}
	ws.sse, ws.bookmarks = req.Stream()
	ws.plain = !req.Tagged()
	ws.batched, _ = wat.(informer.BatchedWatch)
	return ws
}

// CutWhenStale has the initial events cut as a list is once stale reports that their
// state, at the wire revision rev, left the history (nil: never).
func (s *watchStream[V]) CutWhenStale(stale func() bool, rev string) {
	s.stale, s.initialRev = stale, rev
}

// Stop stops the watch.
func (s *watchStream[V]) Stop() { s.wat.Stop() }

// Run sends the watch's events until it ends. The write buffer is taken from a pool when
// there is something to send and given back once it is sent, so that an idle watcher
// holds none.
func (s *watchStream[V]) Run(ctx context.Context, ww *streamWriter) {
	if s.stale != nil { // set here: a takeover has swapped ww's writer by now
		ww.CutWhenStale(s.stale, s.initialRev)
		defer ww.StopCut()
	}
	var buf watchBuffer
	defer func() { buf.put(s.out) }()
	for {
		ev, err := s.wat.Next()
		if s.out == nil {
			s.out = buf.get()
		}
		if err != nil {
			s.end(ctx, ww, err)
			return
		}
		flush, err := s.add(ev)
		if s.stale != nil && !s.inInitial { // the initial events are sent: it is a watch now
			ww.StopCut()
			s.stale = nil
		}
		if err != nil {
			s.reportEnd(ww.RemoteAddr(), ev, err)
			_ = ww.Write(s.out, true)
			return
		}
		if flush || len(s.out) >= watchBufferSize {
			if err := ww.Write(s.out, flush); err != nil {
				ww.Failed(err)
				return
			}
			s.out = s.out[:0]
			if flush {
				buf.put(s.out)
				s.out = nil
			}
		}
	}
}

// add appends the frame of ev, and reports whether the frames should be sent now. An
// error ends the watch, with an ERROR frame that says why appended.
func (s *watchStream[V]) add(ev informer.Event[V]) (flush bool, err error) {
	switch ev.Type {
	case informer.Added, informer.Modified, informer.Deleted:
		partial := s.batched != nil && (!s.inInitial || s.h.BatchInitial()) && s.batched.MoreAtRevision()
		s.open = partial
		start := len(s.out)
		var newest bool
		s.out, newest, err = s.appendEvent(ev, partial)
		if err != nil {
			s.h.Stats().EncodeError()
			err = fmt.Errorf("encoding a %v event: %w", ev.Type, err)
			s.out = wire.AppendError(s.out[:start], s.sse, internalError(fmt.Errorf("fanout: watch: %w", err)))
			return false, err
		}
		return (newest || caughtUp(s.wat)) && !s.inInitial && !partial, nil
	case informer.Bookmark:
		switch {
		case ev.EndOfInitialEvents:
			s.inInitial = false
			if !s.replay {
				s.out = s.appendBookmark(ev.Revision, true)
			}
			return true, nil
		case s.open:
			return false, nil
		case s.bookmarks:
			s.out = s.appendBookmark(ev.Revision, false)
			return true, nil
		}
		return false, nil
	}
	err = fmt.Errorf("the source sent an event of unknown type %v", ev.Type)
	s.out = wire.AppendError(s.out, s.sse, internalError(fmt.Errorf("fanout: watch: %w", err)))
	return false, err
}

// caughtUp reports whether a filtered watch has delivered every event it has so far, so
// that the frames buffered for its client are sent now rather than with a later event
// (an unfiltered watch flushes at the source's newest revision instead).
func caughtUp[V any](w informer.Watch[V]) bool {
	fw, ok := w.(interface{ caughtUp() bool })
	return ok && fw.caughtUp()
}

// reportEnd reports err, the failure of add that ended the watch of r's client at ev.
func (s *watchStream[V]) reportEnd(remote string, ev informer.Event[V], err error) {
	const said = "watch of %s: %w (the watch is ended with an ERROR event, and its client watches again; %s)"
	switch ev.Type {
	case informer.Added, informer.Modified, informer.Deleted:
		s.h.Reporter().Encode(fmt.Errorf(said, remote, err, "fix the object or PassThroughOptions.Encode"))
	default:
		s.h.Reporter().UnknownEvent(fmt.Errorf(said, remote, err, "a bug of the source: its watch must send Added, Modified, Deleted or Bookmark events"))
	}
}

// end sends what was read before the watch ended and, if the source failed, an ERROR
// frame; a client that went away just fails the write.
func (s *watchStream[V]) end(ctx context.Context, ww *streamWriter, err error) {
	if !errors.Is(err, io.EOF) && ctx.Err() == nil {
		se := s.h.StatusOf(err)
		if se.Code == http.StatusGone && !errors.Is(err, informer.ErrOtherHistory) {
			s.h.Stats().Evicted()
			se.Message = "the watcher fell behind the server's history; list again: " + se.Message
		}
		s.out = wire.AppendError(s.out, s.sse, se)
	}
	if len(s.out) > 0 {
		_ = ww.Write(s.out, true)
	}
}

// watchBuffers holds the write buffers of watchers that have nothing to send.
var watchBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, watchBufferSize)
	return &b
}}

// watchBuffer is a watcher's write buffer, taken from watchBuffers while it is used.
type watchBuffer struct {
	held *[]byte
}

// get returns an empty buffer.
func (w *watchBuffer) get() []byte {
	if w.held == nil {
		w.held = watchBuffers.Get().(*[]byte)
	}
	return (*w.held)[:0]
}

// put gives the buffer back; out is what it became (it may have grown for a large
// object, and is then dropped).
func (w *watchBuffer) put(out []byte) {
	if w.held == nil {
		return
	}
	if cap(out) <= 2*watchBufferSize {
		*w.held = out[:0]
	}
	watchBuffers.Put(w.held)
	w.held = nil
}

// appendEvent appends the frame of an Added, Modified or Deleted event to s.out and
// reports whether its revision is the backend's newest; partial puts the partial mark
// after its revision (an event of a batch that is not its last). The revision is put
// together in s.scratch, so that nothing is allocated per event.
func (s *watchStream[V]) appendEvent(ev informer.Event[V], partial bool) ([]byte, bool, error) {
	dst := s.out
	typ := wire.TypeDeleted
	switch ev.Type {
	case informer.Added:
		typ = wire.TypeAdded
	case informer.Modified:
		typ = wire.TypeModified
	}
	rev, newest := s.h.Backend().AppendRevision(s.scratch[:0], ev.Revision)
	if s.plain {
		rev = wire.StripHistory(rev)
	}
	if partial && (len(rev) == 0 || rev[len(rev)-1] != wire.PartialMark) {
		rev = append(rev, wire.PartialMark)
	}
	dst = wire.AppendEventStart(dst, s.sse, typ, rev, ev.Type == informer.Deleted && ev.LastStateUnknown)
	dst, err := s.h.Backend().AppendObject(dst, ev.Object)
	if err != nil {
		return dst, false, err
	}
	return wire.AppendEventEnd(dst, s.sse), newest, nil
}

// appendBookmark appends a BOOKMARK frame at the wire form of rev to s.out.
func (s *watchStream[V]) appendBookmark(rev string, endOfInitial bool) []byte {
	onWire, _ := s.h.Backend().AppendRevision(s.scratch[:0], rev)
	if s.plain {
		onWire = wire.StripHistory(onWire)
	}
	return wire.AppendBookmark(s.out, s.sse, onWire, endOfInitial)
}
