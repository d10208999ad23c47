package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// watchBufferSize is the size of a watcher's write buffer: frames are assembled there and
// written when it fills or the watcher has caught up with the source. An idle watcher
// holds none: buffers are pooled.
const watchBufferSize = 32 << 10

// serveWatch streams a watch until the source ends it, the client goes away, the watcher
// falls behind, or the server shuts down; then it calls c.requests.Done. An HTTP/1.1 watch
// is taken over from net/http once its header is sent (takeover.go), and goes on in a
// goroutine of its own.
func (c *core[V]) serveWatch(w http.ResponseWriter, r *http.Request, req request, client string) {
	release, ok := c.admit(w, &c.watchers, client, c.maxWatchers, c.maxClientWatchers, &c.stats.Rejected, "watchers")
	if !ok {
		c.requests.Done()
		return
	}
	t := newTakeover(w, r)
	r = t.request(r)
	ctx, done, wat, opts, replay, ok := c.openWatch(w, r, &req)
	if !ok {
		t.finish(0)
		release()
		c.requests.Done()
		return
	}

	ww := &streamWriter{w: w, r: r, rc: http.NewResponseController(w), timeout: c.writeTimeout}
	c.stats.Watches.Add(1)
	c.stats.OpenWatches.Add(1)
	finish := func() {
		c.stats.OpenWatches.Add(-1)
		ww.end()
		wat.Stop()
		done()
		release()
		t.finish(c.writeTimeout)
		c.requests.Done()
	}
	if t != nil {
		// A taken-over watch's connection is closed after it: say so, so that a client
		// neither pipelines a request behind the watch nor reuses the connection.
		w.Header().Set("Connection", "close")
	}
	if err := c.startWatch(ww, req); err != nil {
		c.writeFailed(ww.r, ww, "watcher", err)
		finish()
		return
	}
	ws := &watchStream[V]{
		c: c, wat: wat, sse: req.sse, bookmarks: req.bookmarks, replay: replay,
		inInitial: opts.SendInitialEvents, scratch: make([]byte, 0, 64),
	}
	ws.batched, _ = wat.(informer.BatchedWatch)
	var stale func() bool
	if opts.SendInitialEvents && c.staleState != nil {
		// A streaming list is cut as a list is when its state leaves the history while a
		// write waits for its reader; once the initial events are sent it is a watch.
		stale, ws.initialRev = c.staleState()
	}
	run := func() {
		if stale != nil { // checked from here: a takeover has swapped ww's writer by now
			ws.cut = c.watchStale(ww, stale)
			defer ws.cut.stop()
		}
		ws.run(ctx, ww)
	}
	if t.take(ww) {
		go func() {
			defer finish()
			defer t.recover(c.logger, c.who, c.report)
			run()
		}()
		return
	}
	defer finish()
	run()
}

// startWatch sends the headers of a watch's answer.
func (c *core[V]) startWatch(ww *streamWriter, req request) error {
	h := ww.w.Header()
	if req.sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Cache-Control", "no-cache, no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if req.bookmarks && c.bookmarks > 0 {
		h.Set(wire.HeaderBookmarkInterval, strconv.FormatFloat(c.bookmarks.Seconds(), 'f', -1, 64))
	}
	ww.begin(c.sendBuffer)
	ww.w.WriteHeader(http.StatusOK)
	return ww.write(nil, true)
}

// watchStream is a watch being sent: the frames not sent yet, and where the watch is in
// its initial events and in a batch.
//
// The changes the watch says share a revision (a transaction of the PassThrough's source; the
// initial events of a Server's replay, which share the state's revision) are sent as a
// batch: each but the last with the partial mark. A bookmark inside a batch would end it
// early for a client, and is dropped. A Server over an unordered upstream has its own
// numbering and sends no batches.
type watchStream[V any] struct {
	c          *core[V]
	wat        informer.Watch[V]
	batched    informer.BatchedWatch // nil: the watch has no batches
	sse        bool                  // frames are Server-Sent Events
	bookmarks  bool                  // the client asked for bookmarks
	replay     bool                  // initial events the client did not ask for by name
	inInitial  bool                  // the initial events are being sent
	open       bool                  // the last change sent was partial
	out        []byte                // the frames not sent yet
	scratch    []byte                // the wire revision of the event being encoded
	cut        *staleWatch           // cuts the initial events once stale; nil: none
	initialRev string                // the wire revision of the initial events, for cut's report
}

// run sends the watch's events until it ends. The write buffer is taken from a pool when
// there is something to send and given back once it is sent, so that an idle watcher
// holds none.
func (s *watchStream[V]) run(ctx context.Context, ww *streamWriter) {
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
		if err != nil {
			s.reportEnd(ww.r, ev, err)
			_ = ww.write(s.out, true)
			return
		}
		if flush || len(s.out) >= watchBufferSize {
			if err := ww.write(s.out, flush); err != nil {
				if s.cut != nil && s.cut.cut.Load() {
					s.c.listCut(ww.r, s.initialRev)
					ww.abort()
					return
				}
				s.c.writeFailed(ww.r, ww, "watcher", err)
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
		partial := s.batched != nil && (!s.inInitial || s.c.batchInitial) && s.batched.MoreAtRevision()
		s.open = partial
		start := len(s.out)
		var newest bool
		s.out, newest, err = s.c.appendEvent(s.out, s.scratch, s.sse, ev, partial)
		if err != nil {
			s.c.stats.EncodeErrors.Add(1)
			err = fmt.Errorf("encoding a %v event: %w", ev.Type, err)
			s.out = wire.AppendError(s.out[:start], s.sse, internalError(fmt.Errorf("fanout: watch: %w", err)))
			return false, err
		}
		return (newest || caughtUp(s.wat)) && !s.inInitial && !partial, nil
	case informer.Bookmark:
		switch {
		case ev.EndOfInitialEvents:
			s.inInitial = false
			if s.cut != nil {
				s.cut.stop()
			}
			if !s.replay {
				s.out = s.c.appendBookmark(s.out, s.scratch, s.sse, ev.Revision, true)
			}
			return true, nil
		case s.open:
			return false, nil
		case s.bookmarks:
			s.out = s.c.appendBookmark(s.out, s.scratch, s.sse, ev.Revision, false)
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
func (s *watchStream[V]) reportEnd(r *http.Request, ev informer.Event[V], err error) {
	kind, todo := kindEncode, "fix the object or PassThroughOptions.Encode"
	switch ev.Type {
	case informer.Added, informer.Modified, informer.Deleted:
	default:
		kind, todo = kindUnknownEvent, "a bug of the source: its watch must send Added, Modified, Deleted or Bookmark events"
	}
	s.c.report(kind, fmt.Errorf("watch of %s: %w (the watch is ended with an ERROR event, and its client watches again; %s)", r.RemoteAddr, err, todo))
}

// end sends what was read before the watch ended and, if the source failed, an ERROR
// frame; a client that went away just fails the write.
func (s *watchStream[V]) end(ctx context.Context, ww *streamWriter, err error) {
	if !errors.Is(err, io.EOF) && ctx.Err() == nil {
		se := s.c.statusOf(err)
		if se.Code == http.StatusGone && !errors.Is(err, informer.ErrOtherHistory) {
			s.c.stats.Evicted.Add(1)
			se.Message = "the watcher fell behind the server's history; list again: " + se.Message
		}
		s.out = wire.AppendError(s.out, s.sse, se)
	}
	if len(s.out) > 0 {
		_ = ww.write(s.out, true)
	}
}

// openWatch opens the source's watch for a request, or answers the request with the
// failure. done ends ctx. It is a function of its own so that its locals leave the stack
// of the watch, which stays on it for the watch's life.
//
//go:noinline
func (c *core[V]) openWatch(w http.ResponseWriter, r *http.Request, req *request) (ctx context.Context, done func(), wat informer.Watch[V], opts informer.WatchOptions, replay bool, ok bool) {
	// The source ends the watch at opts.Timeout; the server ends it at its own bound.
	ctx, done = c.requestContext(r, c.watchLifetime())
	opts = informer.WatchOptions{Timeout: req.timeout, AllowBookmarks: req.bookmarks, SendInitialEvents: req.initial}
	// replay: initial events the client did not ask for by name (Kubernetes' watch
	// without resourceVersion)
	switch {
	case req.rv == "" || req.rv == "0":
		if c.replayOnEmpty && !req.initial {
			opts.SendInitialEvents, replay = true, true
		}
	default:
		var err error
		if c.await != nil {
			if err := c.await(ctx, req.rv); err != nil {
				if r.Context().Err() == nil {
					c.answerRequestError(w, err)
				}
				done()
				return
			}
		}
		if opts.Revision, err = c.revs.watchRevision(req.rv); err != nil {
			c.answerRequestError(w, err)
			done()
			return
		}
	}
	wat, err := c.watch(ctx, req.filter, opts)
	if err != nil {
		switch {
		case r.Context().Err() != nil:
			// the client went away
		case c.stopCtx.Err() != nil:
			c.shuttingDown(w)
		default:
			c.sourceError(w, err)
		}
		done()
		return
	}
	return ctx, done, wat, opts, replay, true
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

// watchLifetime draws how long one watch is served: a random duration in
// [MaxWatchDuration/2, MaxWatchDuration], or 0 (no bound).
func (c *core[V]) watchLifetime() time.Duration {
	if c.maxWatchDuration <= 0 {
		return 0
	}
	half := c.maxWatchDuration / 2
	return half + rand.N(c.maxWatchDuration-half+1)
}

// appendEvent appends the frame of an Added, Modified or Deleted event and reports
// whether its revision is the source's newest; partial puts the partial mark after its
// revision (an event of a batch that is not its last). scratch is a buffer of the watch
// for the revision, so that nothing is allocated per event.
func (c *core[V]) appendEvent(dst, scratch []byte, sse bool, ev informer.Event[V], partial bool) ([]byte, bool, error) {
	typ := wire.TypeDeleted
	switch ev.Type {
	case informer.Added:
		typ = wire.TypeAdded
	case informer.Modified:
		typ = wire.TypeModified
	}
	rev, newest := c.revs.appendWire(scratch[:0], ev.Revision)
	if partial && (len(rev) == 0 || rev[len(rev)-1] != wire.PartialMark) {
		rev = append(rev, wire.PartialMark)
	}
	dst = wire.AppendEventStart(dst, sse, typ, rev)
	dst, err := c.appendObject(dst, ev.Object)
	if err != nil {
		return dst, false, err
	}
	return wire.AppendEventEnd(dst, sse), newest, nil
}

// appendBookmark appends a BOOKMARK frame at the wire form of rev.
func (c *core[V]) appendBookmark(dst, scratch []byte, sse bool, rev string, endOfInitial bool) []byte {
	onWire, _ := c.revs.appendWire(scratch[:0], rev)
	return wire.AppendBookmark(dst, sse, onWire, endOfInitial)
}
