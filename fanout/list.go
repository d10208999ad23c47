package fanout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// serveList answers one page, streamed in chunks of watchBufferSize: a list holds its
// page (a Server: its snapshot) and one chunk, never the whole encoded body, however
// slowly the client reads.
func (c *core[V]) serveList(w http.ResponseWriter, r *http.Request, req request, client string) {
	release, ok := c.admit(w, &c.lists, client, c.maxLists, c.maxClientLists, &c.stats.ListsRejected, "lists in progress")
	if !ok {
		return
	}
	defer release()
	ctx, done := c.requestContext(r, req.timeout)
	defer done()
	pg, ok := c.openPage(ctx, w, r, req, client)
	if !ok {
		return
	}
	ls := listSender[V]{c: c, ctx: ctx, pg: pg, sw: streamWriter{w: w, r: r, rc: http.NewResponseController(w), timeout: c.writeTimeout}}
	ls.cut = c.watchStale(&ls.sw, pg.stale)
	defer ls.cut.stop()
	ls.send()
}

// openPage reads the page a list request asks for — from the Server's snapshots, or one
// List call on the source — or answers the request with the failure.
func (c *core[V]) openPage(ctx context.Context, w http.ResponseWriter, r *http.Request, req request, client string) (page[V], bool) {
	if c.await != nil && req.cont == "" && req.rv != "" && req.rv != "0" {
		if err := c.await(ctx, req.rv); err != nil {
			if r.Context().Err() == nil {
				c.answerRequestError(w, err)
			}
			return page[V]{}, false
		}
	}
	var pg page[V]
	var err error
	if c.list != nil {
		pg, err = c.list(client, req)
	} else {
		pg, err = c.sourceList(ctx, req)
	}
	if err == nil {
		return pg, true
	}
	var re *requestError
	switch {
	case errors.As(err, &re):
		c.answerRequestError(w, re.err)
	case r.Context().Err() != nil:
		// the client went away
	case c.stopCtx.Err() != nil:
		c.shuttingDown(w)
	default:
		c.sourceError(w, err)
	}
	return page[V]{}, false
}

// listSender sends one page: the envelope and the items in chunks, the headers with the
// first chunk. A failure once the headers are sent cuts the body short (the handler
// panics with http.ErrAbortHandler), so that a client never takes a partial list for a
// whole one.
type listSender[V any] struct {
	c       *core[V]
	ctx     context.Context
	pg      page[V]
	sw      streamWriter
	cut     *staleWatch
	started bool // the headers are sent
}

// send encodes and sends the page.
func (ls *listSender[V]) send() {
	c := ls.c
	out := wire.AppendListStart(make([]byte, 0, watchBufferSize+4096), ls.pg.rev, ls.pg.cont)
	i := 0
	for item := range ls.pg.items {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = c.appendObject(out, item); err != nil {
			c.stats.EncodeErrors.Add(1)
			c.report(kindEncode, fmt.Errorf("list for %s: encoding item %d: %w (answered 500, or cut if it was begun; fix the object or PassThroughOptions.Encode)", ls.sw.r.RemoteAddr, i, err))
			err = fmt.Errorf("fanout: list: encoding item %d: %w", i, err)
			if !ls.started {
				writeStatus(ls.sw.w, internalError(err), 0)
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
		ls.sw.w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		ls.start()
	}
	if err := ls.sw.write(out, false); err != nil {
		c.writeFailed(ls.sw.r, &ls.sw, "list reader", err)
		return
	}
	ls.sw.end()
}

// start sends the headers.
func (ls *listSender[V]) start() {
	ls.sw.w.Header().Set("Content-Type", "application/json")
	ls.c.stats.Lists.Add(1)
	ls.sw.begin(ls.c.sendBuffer)
	ls.sw.w.WriteHeader(http.StatusOK)
	ls.started = true
}

// sendChunk sends a full chunk of the page, unless the request is over (the client went
// away, timeoutSeconds passed, shutdown) or the page's revision left the history; it
// reports whether the list goes on.
func (ls *listSender[V]) sendChunk(out []byte) bool {
	c, r, w := ls.c, ls.sw.r, ls.sw.w
	if err := ls.ctx.Err(); err != nil {
		if ls.started {
			panic(http.ErrAbortHandler) // cut the body short: never end a partial list cleanly
		}
		switch {
		case r.Context().Err() != nil: // the client went away
		case c.stopCtx.Err() != nil:
			c.shuttingDown(w)
		default:
			c.sourceError(w, err)
		}
		return false
	}
	if ls.pg.stale != nil && ls.pg.stale() {
		c.listCut(r, ls.pg.rev)
		if ls.started {
			panic(http.ErrAbortHandler)
		}
		c.answerRequestError(w, fmt.Errorf("the list's revision %s left the server's history: %w", ls.pg.rev, informer.ErrExpired))
		return false
	}
	if !ls.started {
		ls.start()
	}
	if err := ls.sw.write(out, false); err != nil {
		if ls.cut.cut.Load() {
			c.listCut(r, ls.pg.rev)
			ls.sw.abort()
			return false
		}
		c.writeFailed(r, &ls.sw, "list reader", err)
		return false
	}
	return true
}

// staleCheck is how often a list being sent checks that its revision is still in the
// history, while its writes wait for a slow reader.
const staleCheck = 500 * time.Millisecond

// staleWatch cuts a list whose revision leaves the history while a write waits for its
// reader: the write's deadline is moved to now, so that the write fails at once.
type staleWatch struct {
	mu    sync.Mutex
	timer *time.Timer
	done  bool
	cut   atomic.Bool
}

// watchStale starts checking stale (nil: nothing to check) every staleCheck while the
// list is sent.
func (c *core[V]) watchStale(sw *streamWriter, stale func() bool) *staleWatch {
	sc := &staleWatch{}
	if stale == nil {
		return sc
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.timer = time.AfterFunc(staleCheck, func() {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if sc.done {
			return
		}
		if stale() {
			sc.cut.Store(true)
			sw.cutNow()
		}
		sc.timer.Reset(staleCheck) // a write may have moved the deadline on since
	})
	return sc
}

// stop ends the checks; none runs after it returns.
func (sc *staleWatch) stop() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.done = true
	if sc.timer != nil {
		sc.timer.Stop()
	}
}

// listCut accounts for a list cut because its revision left the history.
func (c *core[V]) listCut(r *http.Request, rev string) {
	c.stats.Evicted.Add(1)
	c.report(kindListCut, fmt.Errorf("list reader %s too slow: the list's revision %s left the server's history while it was sent; cut, so that it does not pin an old state (ask for pages, or raise the history)", r.RemoteAddr, rev))
}

// sourceList reads one page from the source (PassThrough).
func (c *core[V]) sourceList(ctx context.Context, req request) (page[V], error) {
	opts := informer.ListOptions{Limit: req.limit}
	var err error
	switch {
	case req.cont != "":
		opts.Continue, err = c.revs.continueToken(req.cont)
	case req.rv == "":
		opts.Consistent = true
	case req.rv != "0":
		opts.Revision, err = c.revs.listRevision(req.rv)
	}
	if err != nil {
		return page[V]{}, &requestError{err}
	}
	l, err := c.lw.List(ctx, opts)
	if err != nil {
		return page[V]{}, err
	}
	rev, _ := c.revs.appendWire(nil, l.Revision)
	pg := page[V]{rev: string(rev), items: slices.Values(l.Items)}
	if l.Continue != "" {
		pg.cont = string(c.revs.appendContinue(nil, l.Continue))
	}
	return pg, nil
}
