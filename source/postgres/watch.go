package postgres

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/jackc/pglogrepl"

	"github.com/informer-go/informer"
)

// Watch implements informer.ListerWatcher: it streams the table's changes committed after
// opts.Revision, each transaction's events at its commit's end LSN, in commit order.
//
// A watch after a list reads from the slot that list created, on the list's connection;
// one that starts before the list's last page was read ends the list (its query holds
// the connection) and fails with informer.ErrExpired. A watch that follows
// another (the informer re-watches after a timeout, say) reads on from the same
// connection if the revision is where the last one stopped. Otherwise, with a temporary
// slot, the revision is lost: Watch identifies the server and fails with an error that
// matches informer.ErrExpired, or informer.ErrOtherHistory if the server is now on another
// system or timeline (see below): the informer lists again, and its handlers receive only
// what changed. With a named slot (Config.Slot), Watch reconnects to the slot if it still
// holds the revision (a warm restart) and fails with ErrExpired if it does not: the slot
// is gone or was dropped, or its confirmed position is past the revision; and with
// informer.ErrOtherHistory (which matches ErrExpired) if the server is another system or
// timeline than the list's (restored from a backup, or a promoted standby), or has not
// reached the revision.
//
// A watch with opts.Timeout ends with io.EOF once it has passed, never inside a
// transaction; the next watch reads on from the same connection.
func (s *Source[V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	if opts.SendInitialEvents {
		return nil, s.errorf(informer.ErrNotSupported, nil, "streaming lists are not supported")
	}
	from, err := parseRevision(opts.Revision)
	if err != nil {
		return nil, s.errorf(informer.ErrExpired, err, "watch")
	}
	s.mu.Lock()
	s.endList()
	st := s.parked
	s.parked = nil
	closed := s.closed
	s.mu.Unlock()
	if closed {
		if st != nil {
			st.close()
		}
		return nil, s.errorf(nil, nil, "the source is closed")
	}
	// A stream that delivered part of a transaction is not resumed: the informer's
	// revision does not say where in it it stopped. Nor one whose connection a list
	// closed, having ended before its query did.
	if st != nil && (st.broken || st.conn.IsClosed() || st.pos != from || len(st.pending) > 0) {
		st.close()
		st = nil
	}
	if st == nil {
		if st, err = s.reopen(ctx, from); err != nil {
			return nil, err
		}
	}
	if !st.started {
		if err := st.start(ctx, from); err != nil {
			st.close()
			return nil, err
		}
	}
	var wctx context.Context
	var cancel context.CancelFunc
	if opts.Timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, opts.Timeout)
	} else {
		wctx, cancel = context.WithCancel(ctx)
	}
	return &watch[V]{s: s, st: st, ctx: wctx, cancel: cancel, bookmarks: opts.AllowBookmarks}, nil
}

// reopen connects to the named slot for a watch from the revision from. It first
// identifies the server: one on another history than the list's fails with
// informer.ErrOtherHistory, with a named slot or a temporary one (whose revision is lost
// anyway: ErrExpired otherwise); one in recovery short of from, with
// informer.ErrUnavailable, until it has replayed that far or promoted.
func (s *Source[V]) reopen(ctx context.Context, from pglogrepl.LSN) (*stream[V], error) {
	repl, err := s.connect(ctx, true)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = repl.Close(context.WithoutCancel(ctx))
		}
	}()
	id, reached, err := identify(ctx, repl)
	if err != nil {
		return nil, s.classify(err, "identify the server")
	}
	s.mu.Lock()
	known := s.ident
	s.mu.Unlock()
	if known != (identity{}) && known != id {
		return nil, s.errorf(informer.ErrOtherHistory, nil, "watch from %s: the server is now %s, not %s (restored or promoted): list again", from, id, known)
	}
	if from > reached {
		// A server in recovery may yet replay up to from (a standby that lags, a restore
		// still replaying): wait for it. Should it promote short of from, it does so
		// onto a new timeline, which the check above then finds.
		res, err := repl.Exec(ctx, "SELECT pg_is_in_recovery()").ReadAll()
		if err != nil {
			return nil, s.classify(err, "ask the server whether it is in recovery")
		}
		if len(res) == 1 && len(res[0].Rows) == 1 && string(res[0].Rows[0][0]) == "t" {
			return nil, s.errorf(informer.ErrUnavailable, nil, "watch from %s: the server is in recovery and has replayed up to %s only: waiting for it to replay further or be promoted", from, reached)
		}
		return nil, s.errorf(informer.ErrOtherHistory, nil, "watch from %s: the server has only reached %s: the revision is of another history: list again", from, reached)
	}
	if s.cfg.Slot == "" {
		// The same history, but the temporary slot of that revision went with its
		// connection.
		return nil, s.errorf(informer.ErrExpired, nil, "watch from %s: the temporary slot of that revision is gone: list again", from)
	}
	res, err := repl.Exec(ctx, "SELECT confirmed_flush_lsn, wal_status FROM pg_replication_slots WHERE slot_name = "+quoteLiteral(s.cfg.Slot)).ReadAll()
	if err != nil {
		return nil, s.classify(err, "read slot "+s.cfg.Slot)
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		return nil, s.errorf(informer.ErrExpired, nil, "watch from %s: slot %s is gone: list again", from, s.cfg.Slot)
	}
	row := res[0].Rows[0]
	confirmed, err := pglogrepl.ParseLSN(string(row[0]))
	if err != nil || string(row[1]) == "lost" {
		return nil, s.errorf(informer.ErrExpired, nil, "watch from %s: slot %s has lost its WAL (max_slot_wal_keep_size): list again", from, s.cfg.Slot)
	}
	if confirmed > from {
		return nil, s.errorf(informer.ErrExpired, nil, "watch from %s: slot %s has confirmed up to %s, past it: list again", from, s.cfg.Slot, confirmed)
	}
	s.mu.Lock()
	s.ident = id
	s.mu.Unlock()
	ok = true
	return s.newStream(repl, s.cfg.Slot, id, from), nil
}

// watch is a Watch over a stream. When it stops, a stream still usable goes back to the
// source for the next watch.
type watch[V any] struct {
	s         *Source[V]
	ctx       context.Context
	cancel    context.CancelFunc
	bookmarks bool

	mu      sync.Mutex
	st      *stream[V] // nil while Next uses it, and once released
	stopped bool
	more    bool
}

// Next returns the next event; see informer.Watch.
func (w *watch[V]) Next() (informer.Event[V], error) {
	w.mu.Lock()
	st := w.st
	w.st = nil
	w.mu.Unlock()
	if st == nil {
		return informer.Event[V]{}, io.EOF
	}
	ev, more, err := st.next(w.ctx, w.bookmarks)
	w.mu.Lock()
	w.more = more
	if w.stopped {
		w.mu.Unlock()
		w.release(st)
		if err == nil {
			err = context.Canceled
		}
		return informer.Event[V]{}, err
	}
	if err != nil {
		// The watch ends: a stream still usable goes back to the source.
		w.mu.Unlock()
		w.release(st)
		if errors.Is(err, context.DeadlineExceeded) && errors.Is(w.ctx.Err(), context.DeadlineExceeded) {
			err = io.EOF // the timeout the informer asked for
		}
		return ev, err
	}
	w.st = st
	w.mu.Unlock()
	return ev, nil
}

// MoreAtRevision implements informer.BatchedWatch: the events of one transaction share
// its revision, and the last of them is the one after which MoreAtRevision is false.
func (w *watch[V]) MoreAtRevision() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.more
}

// Stop ends the watch; see informer.Watch.
func (w *watch[V]) Stop() {
	w.cancel()
	w.mu.Lock()
	w.stopped = true
	st := w.st
	w.st = nil
	w.mu.Unlock()
	if st != nil {
		w.release(st)
	}
}

// release parks the stream in the source for the next watch, or closes it if it broke
// or the source already parked another.
func (w *watch[V]) release(st *stream[V]) {
	if st.broken {
		st.close()
		return
	}
	w.s.mu.Lock()
	if w.s.closed || w.s.parked != nil {
		w.s.mu.Unlock()
		st.close()
		return
	}
	w.s.parked = st
	w.s.mu.Unlock()
}
