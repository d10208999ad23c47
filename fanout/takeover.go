package fanout

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// An HTTP/1.1 watch is taken over from net/http once its response header is sent: the
// connection is hijacked, net/http's connection goroutine returns and frees its buffers
// (the connection's reader and writer, the response's buffer) and its background reader
// ends, and the watch goes on in a goroutine of its own whose stack holds the watch loop
// alone, writing the same chunked body net/http would (one chunk per write, the last
// chunk when the watch ends), then closing the connection, which its response announces
// (Connection: close) so that no request is pipelined or sent behind it. A chunk goes out in one
// system call: a writev on TCP, one Write (one record) of a copy over TLS. A client's
// going away is noticed without a goroutine per watcher (watchHangup). HTTP/2 watches,
// and writers that do not implement http.Hijacker themselves (middleware that wraps
// net/http's), stay on net/http's path. net/http forgets a hijacked connection:
// http.Server.Close and Shutdown do not end it; the Server's Shutdown does.

// maxIdleInput is how much a watcher's client may send after its request (net/http would
// have left it unread until the watch ended) before its watch is ended.
const maxIdleInput = 64 << 10

// takeover is the takeover of one watch; nil when the watch stays on net/http's path.
type takeover struct {
	w       http.ResponseWriter // until take
	r       *http.Request       // the request, with a context of the watch's own
	cancel  context.CancelFunc  // ends that context: the client went away, or the watch ended
	unlink  func() bool         // stops the request's context from ending it
	conn    net.Conn            // once taken
	unwatch func()              // stops watching conn for its client's going away
	broken  bool                // the watch panicked: its connection is cut, not ended
	remote  string              // the client's address, for a panic's report
}

// newTakeover prepares the takeover of a watch of an HTTP/1.1 request, or returns nil. The
// watch is to be served with request(r), whose context ends with r's until take, and then
// only when the client goes away or the watch ends.
func newTakeover(w http.ResponseWriter, r *http.Request) *takeover {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return nil // HTTP/2 multiplexes the connection; HTTP/1.0 has no chunked body
	}
	if _, ok := w.(http.Hijacker); !ok {
		// A wrapper of net/http's writer (middleware) sees every write unless it passes
		// hijacking on itself: it is not bypassed through its Unwrap.
		return nil
	}
	// The request's context ends when the handler returns: after the takeover the watch
	// keeps only its deadline (a middleware's bound on the request's duration).
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	if d, ok := r.Context().Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.WithoutCancel(r.Context()), d)
	}
	return &takeover{w: w, r: r.WithContext(ctx), cancel: cancel, unlink: context.AfterFunc(r.Context(), cancel)}
}

// Request returns the request to serve the watch with.
func (t *takeover) Request(r *http.Request) *http.Request {
	if t == nil {
		return r
	}
	return t.r
}

// Take hijacks the connection once the response's header is flushed and points sw at it;
// false if it cannot be (the watch then goes on in the handler, as before).
func (t *takeover) Take(sw *streamWriter) bool {
	if t == nil {
		return false
	}
	w := t.w
	t.w = nil
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return false
	}
	t.unlink()
	// Bytes the client sent after its request are dropped with net/http's reader.
	_, _ = brw.Reader.Discard(brw.Reader.Buffered())
	t.conn = conn
	cw := newChunkedConn(conn)
	r := t.r
	// What a stalled watcher's report names; the request itself (its header) is let go.
	sw.Hijacked(cw, conn, r)
	t.remote = r.RemoteAddr
	t.r = nil
	t.unwatch = watchHangup(conn, t.cancel)
	return true
}

// Recover, deferred by a taken-over watch's goroutine, does with a panic of the watch (a
// source's or an Encode's) what net/http does with a handler's: it is logged with its
// stack and the server's name and reported, and the connection cut without the last
// chunk, so that the client sees a broken stream, not an end; the process goes on.
func (t *takeover) Recover(rep *reporter) {
	p := recover()
	if p == nil {
		return
	}
	t.broken = true
	if p == http.ErrAbortHandler {
		return
	}
	stack := make([]byte, 64<<10)
	stack = stack[:runtime.Stack(stack, false)]
	err := fmt.Errorf("panic serving the watch of %s: %v (the watch is cut and its client watches again; a bug of the source or of Encode: see the stack logged with it)", t.remote, p)
	rep.Panic(err, stack)
}

// Finish ends the watch's context and, for a watch taken over, writes the last chunk
// (within timeout) and closes the connection.
func (t *takeover) Finish(timeout time.Duration) {
	if t == nil {
		return
	}
	t.unlink()
	t.cancel()
	if t.conn == nil {
		return
	}
	if timeout > 0 {
		_ = t.conn.SetWriteDeadline(time.Now().Add(timeout))
	}
	if !t.broken {
		_, _ = io.WriteString(t.conn, "0\r\n\r\n")
	}
	t.unwatch()
	_ = t.conn.Close()
}

// readUntilHangup watches conn for its client's going away with a goroutine that reads
// it: gone is called when the read fails (the client closed or reset the connection, or
// the connection was closed) or the client sent more than maxIdleInput. Closing conn ends
// the goroutine.
func readUntilHangup(conn net.Conn, gone func()) (stop func()) {
	go func() {
		b := make([]byte, 512)
		for read := 0; read <= maxIdleInput; {
			n, err := conn.Read(b)
			if err != nil {
				break
			}
			read += n
		}
		gone()
	}()
	return func() {}
}

// chunkedConn writes a chunked body on a hijacked connection, as net/http's response
// writer would: each Write is one chunk, sent at once. On a TCP or Unix connection the
// chunk's size line, data and CRLF go out in one writev. A connection that cannot write
// several buffers at once (TLS: a *tls.Conn seals each Write as a record of its own) has
// a chunk of up to maxCopiedChunk bytes assembled in a pooled buffer and written once, one
// TLS record as with net/http's buffered writer, not three; a larger chunk, several
// records anyway, is written as three. It is the ResponseWriter a streamWriter uses once
// its watch is taken over.
type chunkedConn struct {
	conn     net.Conn
	vectored bool // conn writes net.Buffers in one system call
	size     [18]byte
	bufs     [3][]byte
}

// newChunkedConn returns the chunked writer of conn.
func newChunkedConn(conn net.Conn) *chunkedConn {
	switch conn.(type) {
	case *net.TCPConn, *net.UnixConn:
		return &chunkedConn{conn: conn, vectored: true}
	}
	return &chunkedConn{conn: conn}
}

// maxCopiedChunk bounds a chunk (size line and CRLF included) that chunkedConn copies to
// write it once: a TLS record's most data, so that what a stalled write holds beside the
// watch's own buffer stays small.
const maxCopiedChunk = 16 << 10

// chunkBuffers holds the buffers chunks are assembled in, each taken for one write: an
// idle watcher holds none.
var chunkBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, maxCopiedChunk)
	return &b
}}

var crlf = []byte("\r\n")

// Header is never used once the header is sent.
func (c *chunkedConn) Header() http.Header { return http.Header{} }

// WriteHeader is never used once the header is sent.
func (c *chunkedConn) WriteHeader(int) {}

// Write sends p as one chunk.
func (c *chunkedConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // as net/http: an empty chunk would end the body
	}
	size := strconv.AppendUint(c.size[:0], uint64(len(p)), 16)
	size = append(size, crlf...)
	var err error
	if !c.vectored && len(size)+len(p)+len(crlf) <= maxCopiedChunk {
		buf := chunkBuffers.Get().(*[]byte)
		b := append(append(append((*buf)[:0], size...), p...), crlf...)
		_, err = c.conn.Write(b)
		chunkBuffers.Put(buf)
	} else {
		c.bufs = [3][]byte{size, p, crlf}
		bufs := net.Buffers(c.bufs[:])
		_, err = bufs.WriteTo(c.conn)
		c.bufs = [3][]byte{} // p is the watch's pooled buffer: not kept
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// FlushError has nothing to do: Write sends at once.
func (c *chunkedConn) FlushError() error { return nil }

// SetWriteDeadline sets the connection's write deadline.
func (c *chunkedConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }
