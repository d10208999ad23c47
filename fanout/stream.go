package fanout

import (
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

// writeFailed accounts for a response whose connection failed: a client that stalled
// past the write timeout is counted, reported and reset; a client that went away is not
// news.
func (c *core[V]) writeFailed(r *http.Request, sw *streamWriter, who string, err error) {
	if !errors.Is(err, os.ErrDeadlineExceeded) && !sw.expired() {
		return
	}
	c.stats.Evicted.Add(1)
	c.report(kindStalled, fmt.Errorf("%s %s stalled: disconnected after %v without a completed write: %w (the client must read faster, or raise WriteTimeout)", who, r.RemoteAddr, c.writeTimeout, err))
	sw.abort()
}

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
	w       http.ResponseWriter
	r       *http.Request
	rc      *http.ResponseController
	timeout time.Duration
	conn    net.Conn     // from ConnContext; nil without it
	tcp     *net.TCPConn // under conn; nil if none
	armed   bool         // a write deadline was set

	deadline atomic.Int64 // the write deadline set last, in Unix nanoseconds; 0: none

	mu      sync.Mutex  // guards the progress watch against end
	timer   *time.Timer // checks the send queue while a write waits
	writing bool
	queued  int // the send queue at the last check
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

func (sw *streamWriter) write(b []byte, flush bool) error {
	if sw.timeout > 0 {
		sw.setDeadline(time.Now().Add(sw.timeout))
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
		sw.timer = time.AfterFunc(sw.timeout/4, sw.checkProgress)
	} else {
		sw.timer.Reset(sw.timeout / 4)
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
	if sw.queued >= 0 && q != sw.queued {
		sw.setDeadline(time.Now().Add(sw.timeout))
	}
	sw.queued = q
	sw.timer.Reset(sw.timeout / 4)
}

// end clears the write deadline and disarms the reset: the response is complete, and
// the connection may serve other requests or close gracefully.
func (sw *streamWriter) end() {
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

// abort closes the connection of a stalled client. net/http has already closed it when a
// write failed; with ConnContext, begin made that close a reset (SO_LINGER 0), which
// discards what the kernel still held for the client and sends RST.
func (sw *streamWriter) abort() {
	if sw.conn != nil {
		_ = sw.conn.Close()
	}
}
