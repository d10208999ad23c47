package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// writers makes the streamWriters of a server's responses, with its write timeout and
// send buffer, and counts and reports the clients it disconnects.
type writers struct {
	timeout    time.Duration
	sendBuffer int
	stats      *counters
	rep        *reporter
}

// newWriting applies the defaults of o's WriteTimeout and SendBuffer.
func newWriters(o ServeOptions, stats *counters, rep *reporter) *writers {
	wr := &writers{timeout: cmp.Or(o.WriteTimeout, DefaultWriteTimeout), sendBuffer: o.SendBuffer, stats: stats, rep: rep}
	if wr.sendBuffer == 0 {
		wr.sendBuffer = DefaultSendBuffer
	}
	return wr
}

// Stream returns the writer of the response to r, a list's (list) or a watch's.
func (wr *writers) Stream(w http.ResponseWriter, r *http.Request, list bool) *streamWriter {
	return &streamWriter{w: w, r: r, rc: http.NewResponseController(w), wr: wr, list: list}
}

// Timeout returns the write timeout (negative: none).
func (wr *writers) Timeout() time.Duration { return wr.timeout }

// connKey is the context key under which ConnContext stores a request's connection.
type connKey struct{}

// ConnContext is an http.Server ConnContext function for a server that mounts a Server or
// PassThrough: it records each connection in its context, so that a watch or a list can cap
// the connection's kernel send buffer (ServeOptions.SendBuffer) and a stalled client's
// connection is reset (SO_LINGER 0) rather than closed, which frees its unsent data at
// once. Without it a stalled client's connection is closed gracefully, its unsent data
// held by the kernel until the client reads it or the kernel gives up, and send buffers
// keep the kernel's sizing, which can grow to megabytes per connection and makes a slow
// reader's progress visible only every third of that. If the server has its own
// ConnContext, call this one from it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// tcpConn returns the TCP connection under c (unwrapping TLS), or nil.
func tcpConn(c net.Conn) *net.TCPConn {
	for c != nil {
		switch t := c.(type) {
		case *net.TCPConn:
			return t
		case interface{ NetConn() net.Conn }:
			c = t.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// streamWriter writes a streamed response (a watch, a list). A write may wait up to the
// write timeout without progress: with the connection known (ConnContext, on Linux) a
// write that is still blocked has its deadline moved on whenever the kernel's send queue
// of the connection changes, that is whenever the client's TCP stack accepts data, so a
// client that reads, however slowly, is never cut off for the size of its buffers.
type streamWriter struct {
	w     http.ResponseWriter
	r     *http.Request
	rc    *http.ResponseController
	wr    *writers
	conn  net.Conn     // from ConnContext; nil without it
	tcp   *net.TCPConn // under conn; nil if none
	armed bool         // a write deadline was set
	list  bool         // the response is a list's, not a watch's

	deadline atomic.Int64 // the write deadline set last, in Unix nanoseconds; 0: none

	mu      sync.Mutex  // guards the progress watch against end
	timer   *time.Timer // checks the send queue while a write waits
	writing bool
	queued  int32 // the send queue at the last check (sendQueue's int32)

	cut *staleWatch // cuts the response once its state is stale; nil: none
}

// ResponseWriter returns the writer of the response, to answer with a status before
// Start.
func (sw *streamWriter) ResponseWriter() http.ResponseWriter { return sw.w }

// Request returns the request answered.
func (sw *streamWriter) Request() *http.Request { return sw.r }

// RemoteAddr returns the client's address, for reports.
func (sw *streamWriter) RemoteAddr() string { return sw.r.RemoteAddr }

// Header returns the response's header, to set before Start.
func (sw *streamWriter) Header() http.Header { return sw.w.Header() }

// Start sends the response's header (200).
func (sw *streamWriter) Start() {
	sw.begin(sw.wr.sendBuffer)
	sw.w.WriteHeader(http.StatusOK)
}

// Failed accounts for a response whose write failed: a response cut because its state
// left the history (CutWhenStale), or a client that stalled past the write timeout, is
// counted, reported and disconnected; a client that went away is not news.
func (sw *streamWriter) Failed(err error) {
	if sw.cut != nil && sw.cut.cut.Load() {
		sw.ReportCut()
		sw.Abort()
		return
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) && !sw.expired() {
		return
	}
	sw.wr.stats.Evicted()
	who := "watcher"
	if sw.list {
		who = "list reader"
	}
	sw.wr.rep.Stalled(fmt.Errorf("%s %s stalled: disconnected after %v without a completed write: %w (the client must read faster, or raise WriteTimeout)", who, sw.r.RemoteAddr, sw.wr.timeout, err))
	sw.Abort()
}

// ReportCut accounts for a response cut because its state left the history.
func (sw *streamWriter) ReportCut() {
	sw.wr.stats.Evicted()
	sw.wr.rep.ListCut(fmt.Errorf("list reader %s too slow: the list's revision %s left the server's history while it was sent; cut, so that it does not pin an old state (ask for pages, or raise the history)", sw.r.RemoteAddr, sw.cut.rev))
}

// begin caps the connection's send buffer and arms its reset, when the connection is
// known: until end, any close of it (net/http closes a connection whose write failed) is
// abortive.
func (sw *streamWriter) begin(sendBuffer int) {
	if sw.r.ProtoMajor != 1 {
		return // HTTP/2: the connection carries other streams; a stalled stream is reset alone
	}
	sw.conn, _ = sw.r.Context().Value(connKey{}).(net.Conn)
	if sw.tcp = tcpConn(sw.conn); sw.tcp != nil {
		if sendBuffer > 0 {
			_ = sw.tcp.SetWriteBuffer(sendBuffer)
		}
		_ = sw.tcp.SetLinger(0)
	}
}

// Write writes b and, with flush, flushes the response, within the write timeout.
func (sw *streamWriter) Write(b []byte, flush bool) error {
	if sw.wr.timeout > 0 {
		sw.setDeadline(time.Now().Add(sw.wr.timeout))
		sw.armed = true
		sw.watchProgress(true)
		defer sw.watchProgress(false)
	}
	if len(b) > 0 {
		if _, err := sw.w.Write(b); err != nil {
			return err
		}
	}
	if flush {
		if err := sw.rc.Flush(); err != nil {
			return err
		}
		// A writer that only flushes (http.Flusher) drops the error of a write that timed
		// out; net/http has cancelled the request's context by then.
		if sw.expired() && sw.r.Context().Err() != nil {
			return fmt.Errorf("flush: %w", os.ErrDeadlineExceeded)
		}
	}
	return nil
}

// watchProgress starts or stops the checks of the send queue around one write.
func (sw *streamWriter) watchProgress(on bool) {
	if sw.tcp == nil {
		return
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.writing = on
	if !on {
		sw.timer.Stop()
		return
	}
	sw.queued = -1 // read at the first check, not here: most writes complete at once
	if sw.timer == nil {
		sw.timer = time.AfterFunc(sw.wr.timeout/4, sw.checkProgress)
	} else {
		sw.timer.Reset(sw.wr.timeout / 4)
	}
}

// checkProgress moves the deadline of a waiting write on if the send queue changed.
func (sw *streamWriter) checkProgress() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if !sw.writing {
		return
	}
	q, ok := sendQueue(sw.tcp)
	if !ok {
		return // no way to see progress: the write deadline decides
	}
	if sw.queued >= 0 && int32(q) != sw.queued {
		sw.setDeadline(time.Now().Add(sw.wr.timeout))
	}
	sw.queued = int32(q)
	sw.timer.Reset(sw.wr.timeout / 4)
}

// End clears the write deadline and disarms the reset: the response is complete, and
// the connection may serve other requests or close gracefully.
func (sw *streamWriter) End() {
	if sw.armed {
		sw.setDeadline(time.Time{})
	}
	if sw.tcp != nil {
		_ = sw.tcp.SetLinger(-1)
	}
}

// setDeadline sets the write deadline of the response: through the
// ResponseWriter or, when it cannot set one (a middleware's writer that only flushes),
// on the connection itself when ConnContext has recorded it.
func (sw *streamWriter) setDeadline(t time.Time) {
	var at int64
	if !t.IsZero() {
		at = t.UnixNano()
	}
	sw.deadline.Store(at)
	if err := sw.rc.SetWriteDeadline(t); err != nil && sw.conn != nil {
		_ = sw.conn.SetWriteDeadline(t)
	}
}

// cutNow makes the write in progress, and any later one, fail at once.
func (sw *streamWriter) cutNow() { sw.setDeadline(time.Now()) }

// expired reports whether the write deadline has passed: a write that failed then failed
// for it, whatever error a middleware's writer made of it.
func (sw *streamWriter) expired() bool {
	at := sw.deadline.Load()
	return at != 0 && time.Now().UnixNano() >= at
}

// Abort closes the connection of a stalled client. net/http has already closed it when a
// write failed; with ConnContext, begin made that close a reset (SO_LINGER 0), which
// discards what the kernel still held for the client and sends RST.
func (sw *streamWriter) Abort() {
	if sw.conn != nil {
		_ = sw.conn.Close()
	}
}

// Hijacked points sw at the connection a takeover hijacked: cw writes its chunked body,
// and r, the request, is kept only as what a stalled watcher's report names.
func (sw *streamWriter) Hijacked(cw http.ResponseWriter, conn net.Conn, r *http.Request) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.w, sw.rc = cw, http.NewResponseController(cw)
	sw.r = &http.Request{Method: r.Method, Proto: r.Proto, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor, RemoteAddr: r.RemoteAddr}
	if sw.conn == nil {
		sw.conn = conn
	}
}

// staleCheck is how often a list being sent checks that its revision is still in the
// history, while its writes wait for a slow reader.
const staleCheck = 500 * time.Millisecond

// staleWatch cuts a response whose state (a list's revision) leaves the history while a
// write waits for its reader: the write's deadline is moved to now, so that the write
// fails at once.
type staleWatch struct {
	rev   string // the wire revision of the state, for the report
	mu    sync.Mutex
	timer *time.Timer
	done  bool
	cut   atomic.Bool
}

// CutWhenStale starts checking stale (nil: nothing to check) every staleCheck until
// StopCut: once it reports that the state at rev left the history, the write in
// progress and every later one fail, and Failed reports the cut.
func (sw *streamWriter) CutWhenStale(stale func() bool, rev string) {
	sc := &staleWatch{rev: rev}
	sw.cut = sc
	if stale == nil {
		return
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
}

// StopCut ends the checks of CutWhenStale; none runs after it returns.
func (sw *streamWriter) StopCut() {
	sc := sw.cut
	if sc == nil {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.done = true
	if sc.timer != nil {
		sc.timer.Stop()
	}
}
