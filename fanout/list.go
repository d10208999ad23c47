package fanout

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"strconv"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// page is one list response: the wire revision and continue token, and the items.
type page[V any] struct {
	rev   string
	cont  string // "" on the last page
	items iter.Seq[V]
	// stale, when set, reports that the page's revision has left the history: the list
	// is cut, so that a slow reader does not pin an old state.
	stale func() bool
}

// newPage returns the page of items at the wire revision rev; cont is the continue token
// of the next page ("" on the last), stale (nil: never) reports that rev has left the
// history.
func newPage[V any](rev, cont string, items iter.Seq[V], stale func() bool) page[V] {
	return page[V]{rev: rev, cont: cont, items: items, stale: stale}
}

// sendList sends pg on sw, the answer to a list request of h; tagged: the client asks
// for the history tags of revisions (left out otherwise).
func sendList[V any](ctx context.Context, h *handler[V], sw *streamWriter, pg page[V], tagged bool) {
	if !tagged {
		pg.rev = string(wire.StripHistory([]byte(pg.rev)))
	}
	ls := listSender[V]{h: h, ctx: ctx, pg: pg, sw: sw}
	sw.CutWhenStale(pg.stale, pg.rev)
	defer sw.StopCut()
	ls.send()
}

// listSender sends one page: the envelope and the items in chunks, the headers with the
// first chunk. A failure once the headers are sent cuts the body short (the handler
// panics with http.ErrAbortHandler), so that a client never takes a partial list for a
// whole one.
type listSender[V any] struct {
	h       *handler[V]
	ctx     context.Context
	pg      page[V]
	sw      *streamWriter
	started bool // the headers are sent
}

// send encodes and sends the page.
func (ls *listSender[V]) send() {
	b := ls.h.Backend()
	out := wire.AppendListStart(make([]byte, 0, watchBufferSize+4096), ls.pg.rev, ls.pg.cont)
	i := 0
	for item := range ls.pg.items {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = b.AppendObject(out, item); err != nil {
			ls.h.Stats().EncodeError()
			ls.h.Reporter().Encode(fmt.Errorf("list for %s: encoding item %d: %w (answered 500, or cut if it was begun; fix the object or PassThroughOptions.Encode)", ls.sw.RemoteAddr(), i, err))
			err = fmt.Errorf("fanout: list: encoding item %d: %w", i, err)
			if !ls.started {
				writeStatus(ls.sw.ResponseWriter(), internalError(err), 0)
				return
			}
			// Part of the body is sent: cut it short, so that the client sees a broken list.
			panic(http.ErrAbortHandler)
		}
		i++
		if len(out) >= watchBufferSize {
			if !ls.sendChunk(out) {
				return
			}
			out = out[:0]
		}
	}
	out = wire.AppendListEnd(out)
	if !ls.started {
		ls.sw.Header().Set("Content-Length", strconv.Itoa(len(out)))
		ls.start()
	}
	if err := ls.sw.Write(out, false); err != nil {
		ls.sw.Failed(err)
		return
	}
	ls.sw.End()
}

// start sends the headers.
func (ls *listSender[V]) start() {
	ls.sw.Header().Set("Content-Type", "application/json")
	ls.h.Stats().List()
	ls.sw.Start()
	ls.started = true
}

// sendChunk sends a full chunk of the page, unless the request is over (the client went
// away, timeoutSeconds passed, shutdown) or the page's revision left the history; it
// reports whether the list goes on.
func (ls *listSender[V]) sendChunk(out []byte) bool {
	if err := ls.ctx.Err(); err != nil {
		if ls.started {
			panic(http.ErrAbortHandler) // cut the body short: never end a partial list cleanly
		}
		ls.h.Fail(ls.sw.ResponseWriter(), ls.sw.Request(), err)
		return false
	}
	if ls.pg.stale != nil && ls.pg.stale() {
		ls.sw.ReportCut()
		if ls.started {
			panic(http.ErrAbortHandler)
		}
		ls.h.Fail(ls.sw.ResponseWriter(), ls.sw.Request(), &requestError{fmt.Errorf("the list's revision %s left the server's history: %w", ls.pg.rev, informer.ErrExpired)})
		return false
	}
	if !ls.started {
		ls.start()
	}
	if err := ls.sw.Write(out, false); err != nil {
		ls.sw.Failed(err)
		return false
	}
	return true
}
