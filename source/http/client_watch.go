package httpsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// ErrWatchStopped is returned by a watch's Next after Stop.
var ErrWatchStopped = errors.New("httpsource: watch stopped")

// watch is one open watch response.
type watch[V any] struct {
	c       *Client[V]
	ctx     context.Context // the caller's, to tell its cancellation from ours
	cancel  context.CancelFunc
	body    io.ReadCloser
	frames  FrameReader
	items   itemDecoder[V]
	opts    informer.WatchOptions
	what    string // method and URL, for errors
	target  int    // the Client's URL it was sent to
	stopped atomic.Bool
	release sync.Once
	err     error // once set, Next returns it; Next's goroutine only

	frame *Frame[V] // with ClientOptions.DecodeFrame: the frame being delivered
	pos   int       // the next of frame.events to deliver
	last  string    // the revision of the frame's event delivered last

	held   []informer.Event[V] // the events of a batch whose last event has not come yet
	read   int64               // the bytes of the frames read so far
	frame0 int64               // read before the frame that opened the held batch
	last0  int                 // the length of the frame read last
	ready  []informer.Event[V] // the events of a complete batch, to deliver

	timer    *time.Timer   // ends a watch the server does not end (nil in benchmarks)
	deadline time.Time     // the end of the watch's time (its timeout plus grace); zero: none
	idle     time.Duration // the longest time between two frames; 0: no bound
	told     bool          // idle is twice the interval the server told (wire.HeaderBookmarkInterval)
	expired  atomic.Bool   // the timer fired
}

// expire ends a watch that outlived its limit.
func (w *watch[V]) expire() {
	w.expired.Store(true)
	w.close()
}

// Next implements informer.Watch; see Client.Watch.
//
// A Server over an ordered upstream sends the changes of one upstream revision as a
// batch whose events but the last carry the revision with a '~' after it: Next holds
// them until the last one has come, then delivers the batch, every event at the batch's
// revision, so that the informer never holds part of a batch under its revision. A batch
// the stream ends inside is dropped: the informer watches again from the revision before
// it. A bookmark inside a batch is dropped.
func (w *watch[V]) Next() (informer.Event[V], error) {
	for {
		if len(w.ready) > 0 {
			ev := w.ready[0]
			w.ready[0] = informer.Event[V]{}
			w.ready = w.ready[1:]
			return ev, nil
		}
		if w.err != nil {
			return informer.Event[V]{}, w.err
		}
		var ev informer.Event[V]
		var err error
		if w.frame != nil {
			ev, err = w.nextCustom()
		} else {
			ev, err = w.next()
		}
		if err != nil {
			clear(w.held)
			w.held = w.held[:0]
			w.err = err
			w.close()
			if isRetryableBreak(err) && w.c.failover(w.target, err) {
				err = withoutRetryAfter(err) // the next URL is tried at once
				w.err = err
			}
			return ev, err
		}
		rev, partial := strings.CutSuffix(ev.Revision, string(wire.PartialMark))
		if partial {
			if err := w.holdBatch(); err != nil {
				clear(w.held)
				w.held = w.held[:0]
				w.err = err
				w.close()
				return informer.Event[V]{}, err
			}
		} else {
			w.frame0 = -1
		}
		switch {
		case partial && ev.Type == informer.Bookmark:
			continue
		case partial:
			ev.Revision = rev
			w.held = append(w.held, ev)
			continue
		case len(w.held) == 0:
			return ev, nil
		}
		w.ready = append(w.held, ev)
		w.held = nil
	}
}

// holdBatch checks that one more partial event of the open batch (a bookmark marked
// partial included) keeps it within ClientOptions.MaxBatch and MaxBatchBytes.
func (w *watch[V]) holdBatch() error {
	if len(w.held) == 0 && w.frame0 < 0 {
		w.frame0 = w.read - int64(w.last0)
	}
	switch {
	case len(w.held) >= w.c.maxBatch:
		return badInput("%s: a batch (changes marked as one revision with '~') of more than %d events (ClientOptions.MaxBatch): the server never ends it, or raise the limit; listing again", w.what, w.c.maxBatch)
	case w.read-w.frame0 > w.c.maxBatchBytes:
		return badInput("%s: a batch (changes marked as one revision with '~') of more than %d bytes (ClientOptions.MaxBatchBytes): the server never ends it, or raise the limit; listing again", w.what, w.c.maxBatchBytes)
	}
	return nil
}

// MoreAtRevision implements informer.BatchedWatch: the rest of a batch Next is
// delivering is ready, or the frame DecodeFrame decoded holds another change at the
// revision of the one Next returned last (a transaction in one frame).
func (w *watch[V]) MoreAtRevision() bool {
	if len(w.ready) > 0 {
		return true
	}
	f := w.frame
	if f == nil || w.pos >= len(f.events) || w.pos == 0 {
		return false
	}
	next := &f.events[w.pos]
	return next.Type != informer.Bookmark && next.Revision != "" &&
		strings.TrimSuffix(next.Revision, string(wire.PartialMark)) == w.last
}

// isRetryableBreak reports whether a watch ended with a failure another replica may not
// have (a broken connection, a 5xx ERROR event), not a clean end or the caller's stop.
func isRetryableBreak(err error) bool {
	return err != io.EOF && !errors.Is(err, ErrWatchStopped) && !errors.Is(err, context.Canceled) && errors.Is(err, informer.ErrRetryable)
}

// nextLimit is the time the watch may wait for its next frame: the idle bound, cut to
// the watch's deadline.
func (w *watch[V]) nextLimit() time.Duration {
	d := w.idle
	if !w.deadline.IsZero() {
		if left := time.Until(w.deadline); d <= 0 || left < d {
			d = max(left, 1)
		}
	}
	return d
}

// readFrame reads the next frame and restarts an idle timer.
func (w *watch[V]) readFrame() ([]byte, error) {
	frame, err := w.frames.ReadFrame()
	if err != nil {
		return nil, w.readError(err)
	}
	w.last0 = len(frame)
	w.read += int64(len(frame))
	if w.idle > 0 && !w.timer.Reset(w.nextLimit()) {
		// The timer fired while the frame was read: the watch is being closed.
		w.expired.Store(true)
		return nil, w.readError(io.ErrUnexpectedEOF)
	}
	return frame, nil
}

func (w *watch[V]) next() (informer.Event[V], error) {
	frame, err := w.readFrame()
	if err != nil {
		return informer.Event[V]{}, err
	}
	raw, err := w.c.codec.DecodeEvent(frame)
	if err != nil {
		return informer.Event[V]{}, fmt.Errorf("%w: %w", badInput("malformed watch frame %s", excerpt(frame)), err)
	}
	var typ informer.EventType
	switch raw.Type {
	case wire.TypeAdded:
		typ = informer.Added
	case wire.TypeModified:
		typ = informer.Modified
	case wire.TypeDeleted:
		typ = informer.Deleted
	case wire.TypeBookmark:
		if raw.Revision == "" {
			return informer.Event[V]{}, badInput("BOOKMARK event without a resourceVersion")
		}
		return informer.Event[V]{Type: informer.Bookmark, Revision: raw.Revision, EndOfInitialEvents: raw.EndOfInitialEvents}, nil
	case wire.TypeError:
		return informer.Event[V]{}, w.streamError(raw.Status)
	default:
		return informer.Event[V]{}, badInput("unknown watch event type %q", raw.Type)
	}
	if raw.Object == nil {
		return informer.Event[V]{}, badInput("%s event without an object", raw.Type)
	}
	obj, err := w.items.decode(raw.Object)
	if err != nil {
		return informer.Event[V]{}, fmt.Errorf("httpsource: %w: the object of a %s event: %w", informer.ErrDecode, raw.Type, err)
	}
	rev := raw.Revision
	if rev == "" && w.c.revision != nil {
		rev = w.c.revision(obj)
	}
	return informer.Event[V]{Type: typ, Object: obj, Revision: rev, LastStateUnknown: typ == informer.Deleted && raw.LastStateUnknown}, nil
}

// nextCustom delivers the events of frames decoded by ClientOptions.DecodeFrame.
func (w *watch[V]) nextCustom() (informer.Event[V], error) {
	f := w.frame
	for w.pos >= len(f.events) {
		clear(f.events)
		f.events, f.skipped, w.pos = f.events[:0], f.skipped[:0], 0
		data, err := w.readFrame()
		if err != nil {
			return informer.Event[V]{}, err
		}
		f.Data = data
		err = w.c.decodeFrame(f)
		f.Data = nil
		if err != nil {
			var se *StatusError
			switch {
			case errors.As(err, &se):
				return informer.Event[V]{}, w.streamError(se)
			case isClassified(err):
				return informer.Event[V]{}, fmt.Errorf("httpsource %s: %w", w.what, err)
			}
			return informer.Event[V]{}, fmt.Errorf("%w: %w", badInput("%s: watch frame %s", w.what, excerpt(data)), err)
		}
		for i := range f.events {
			if err := w.check(&f.events[i]); err != nil {
				return informer.Event[V]{}, err
			}
		}
		for _, err := range f.skipped {
			de := err.(*DecodeError)
			de.Request = w.what
			w.c.reportDecode(de)
		}
	}
	ev := f.events[w.pos]
	f.events[w.pos] = informer.Event[V]{} // the cache owns it now
	w.pos++
	w.last = strings.TrimSuffix(ev.Revision, string(wire.PartialMark))
	return ev, nil
}

// check validates an event added by DecodeFrame and fills in its revision.
func (w *watch[V]) check(ev *informer.Event[V]) error {
	switch ev.Type {
	case informer.Bookmark:
		if ev.Revision == "" {
			return badInput("%s: DecodeFrame added a Bookmark without a revision", w.what)
		}
	case informer.Added, informer.Modified, informer.Deleted:
		if ev.Revision == "" && w.c.revision != nil {
			ev.Revision = w.c.revision(ev.Object)
		}
	default:
		return badInput("%s: DecodeFrame added an event of type %v", w.what, ev.Type)
	}
	return nil
}

// streamError is the error of an in-stream failure: an ERROR event, or a *StatusError
// returned by DecodeFrame.
func (w *watch[V]) streamError(se *StatusError) error {
	err := statusEventError(se, w.c.maxRetryAfter)
	if se != nil {
		se.Request = w.what
		w.c.applyClass(se)
	}
	w.c.noteRetryAfter(w.target, err)
	return err
}

// readError classifies an error from reading the stream.
func (w *watch[V]) readError(err error) error {
	switch {
	case w.stopped.Load():
		return ErrWatchStopped
	case w.ctx.Err() != nil:
		return w.ctx.Err()
	case w.expired.Load() && w.idle > 0 && (w.deadline.IsZero() || time.Now().Before(w.deadline)):
		if w.told {
			return fmt.Errorf("httpsource %s: %w: no complete watch frame for %v, twice the bookmark interval the server told: the server went silent; watching again", w.what, informer.ErrRetryable, w.idle)
		}
		return fmt.Errorf("httpsource %s: %w: no complete watch frame for %v (ClientOptions.WatchIdleTimeout): the server went silent; watching again", w.what, informer.ErrRetryable, w.idle)
	case w.expired.Load() && w.c.endAtTimeout:
		return io.EOF // the watch's time is up (ClientOptions.EndWatchAtTimeout)
	case w.expired.Load():
		return fmt.Errorf("httpsource %s: %w: the server did not end the watch within its timeout plus %v (ClientOptions.WatchGrace); watching again", w.what, informer.ErrRetryable, w.c.watchGrace)
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, informer.ErrBadInput):
		return err
	}
	return fmt.Errorf("httpsource %s: %w: watch connection lost: %w", w.what, informer.ErrRetryable, err)
}

// statusEventError is the error of an ERROR event.
func statusEventError(se *StatusError, maxRetryAfter time.Duration) error {
	if se == nil {
		se = &StatusError{}
	}
	if se.Code == 0 && se.Reason == "" && se.Message == "" {
		se.Message = "ERROR event without a status"
	}
	var d time.Duration
	if se.Details != nil && se.Details.RetryAfterSeconds > 0 {
		d = secondsUpTo(se.Details.RetryAfterSeconds, maxRetryAfter)
	}
	return withRetryAfter(se, d)
}

// excerpt quotes the start of a frame for an error message.
func excerpt(frame []byte) string {
	const n = 120
	if len(frame) > n {
		return strconv.Quote(string(frame[:n])) + "…"
	}
	return strconv.Quote(string(frame))
}

// Stop implements informer.Watch: it cancels the request and closes the connection, so
// that a Next blocked in a read returns at once with ErrWatchStopped.
func (w *watch[V]) Stop() {
	w.stopped.Store(true)
	w.close()
}

func (w *watch[V]) close() {
	w.release.Do(func() {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.cancel()
		w.body.Close()
	})
}
