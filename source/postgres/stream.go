package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/informer-go/informer"
)

// stream is a replication connection on the source's slot: created by a list (not yet
// started) or opened by a watch on a named slot, then streaming pgoutput. It outlives a
// Watch: the source parks it between watches, so that a watch that ends (the informer
// asked for a timeout, say) is followed by one that reads on from the same connection
// and slot. A stream is used by one goroutine at a time.
type stream[V any] struct {
	s         *Source[V]
	conn      *pgconn.PgConn
	slot      string
	ident     identity
	types     *pgtype.Map
	started   bool
	pos       pglogrepl.LSN // every change up to pos has been delivered
	confirmed pglogrepl.LSN // the position last reported to the server
	sentAt    time.Time     // when it was reported
	relations map[uint32]*relation
	tx        *txState[V]         // the transaction being received
	pending   []informer.Event[V] // the rest of the transaction being delivered
	pendRev   pglogrepl.LSN
	broken    bool
}

// relation is the table's shape as the last Relation message described it.
type relation struct {
	ours bool // the source's table
	cols []column
}

// txState collects the events of a transaction until its Commit, which gives their
// revision.
type txState[V any] struct {
	events   []informer.Event[V]
	truncate bool
}

func (s *Source[V]) newStream(conn *pgconn.PgConn, slot string, id identity, pos pglogrepl.LSN) *stream[V] {
	return &stream[V]{s: s, conn: conn, slot: slot, ident: id, types: newTypeMap(), pos: pos, confirmed: pos,
		relations: map[uint32]*relation{}}
}

// close ends the stream's connection, first reporting the delivered position so that a
// named slot resumes after it.
func (st *stream[V]) close() {
	if st.started && !st.broken && st.pos > st.confirmed {
		_ = st.status(false)
	}
	_ = st.conn.Close(context.Background())
}

// start starts streaming after from.
func (st *stream[V]) start(ctx context.Context, from pglogrepl.LSN) error {
	err := pglogrepl.StartReplication(ctx, st.conn, st.slot, from, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names " + quoteLiteral(st.s.publication)},
	})
	if err != nil {
		st.broken = true
		return st.s.classify(err, "start replication on slot "+st.slot)
	}
	st.started, st.pos, st.confirmed, st.sentAt = true, from, from, time.Now()
	return nil
}

// next returns the next event. more reports that the events after it, up to the last of
// its transaction, follow at once.
func (st *stream[V]) next(ctx context.Context, bookmarks bool) (ev informer.Event[V], more bool, err error) {
	interval := st.s.cfg.StatusInterval
	for {
		if len(st.pending) > 0 {
			ev, st.pending = st.pending[0], st.pending[1:]
			if len(st.pending) == 0 {
				st.pos, st.pending = st.pendRev, nil
				return ev, false, nil
			}
			return ev, true, nil
		}
		if time.Since(st.sentAt) >= interval {
			// With bookmarks, ask for a keepalive: its WAL position becomes a bookmark.
			if err := st.status(bookmarks); err != nil {
				return ev, false, err
			}
		}
		rctx, cancel := context.WithDeadline(ctx, st.sentAt.Add(interval))
		msg, err := st.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ev, false, ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			st.broken = true
			return ev, false, st.s.streamError(err, "read the replication stream of slot "+st.slot)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			bm, err := st.handle(ctx, m.Data, bookmarks)
			if err != nil {
				st.broken = true
				return ev, false, err
			}
			if bm != 0 {
				st.pos = bm
				return informer.Event[V]{Type: informer.Bookmark, Revision: bm.String()}, false, nil
			}
		case *pgproto3.ErrorResponse:
			st.broken = true
			return ev, false, st.s.streamError(pgconn.ErrorResponseToPgError(m), "replication stream of slot "+st.slot)
		case *pgproto3.CopyDone:
			st.broken = true
			return ev, false, st.s.errorf(informer.ErrExpired, nil, "the server ended the replication stream of slot %s", st.slot)
		}
	}
}

// status reports the delivered position to the server (a standby status update).
func (st *stream[V]) status(reply bool) error {
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), st.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: st.pos, ReplyRequested: reply,
	})
	if err != nil {
		st.broken = true
		return st.s.streamError(err, "report the stream's position")
	}
	st.confirmed, st.sentAt = st.pos, time.Now()
	return nil
}

// handle processes one message of the stream. It returns a bookmark's revision when the
// stream has nothing more to deliver up to a position past st.pos.
func (st *stream[V]) handle(ctx context.Context, data []byte, bookmarks bool) (pglogrepl.LSN, error) {
	if len(data) == 0 {
		return 0, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return 0, st.s.errorf(informer.ErrBadInput, err, "keepalive")
		}
		if k.ReplyRequested {
			if err := st.status(false); err != nil {
				return 0, err
			}
		}
		if bookmarks && st.tx == nil && k.ServerWALEnd > st.pos {
			return k.ServerWALEnd, nil
		}
		return 0, nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return 0, st.s.errorf(informer.ErrBadInput, err, "replication message")
		}
		return st.message(ctx, x.WALData, bookmarks)
	}
	return 0, nil
}

// message processes one pgoutput message.
func (st *stream[V]) message(ctx context.Context, data []byte, bookmarks bool) (pglogrepl.LSN, error) {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return 0, st.s.errorf(informer.ErrBadInput, err, "pgoutput message")
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		r := &relation{ours: m.RelationName == st.s.table && (st.s.schema == "" || m.Namespace == st.s.schema)}
		for _, c := range m.Columns {
			r.cols = append(r.cols, column{name: c.Name, oid: c.DataType, key: c.Flags&1 != 0})
		}
		st.relations[m.RelationID] = r
	case *pglogrepl.BeginMessage:
		st.tx = &txState[V]{}
	case *pglogrepl.InsertMessage:
		if r := st.ours(m.RelationID); r != nil && st.tx != nil {
			st.insert(ctx, r, m.Tuple)
		}
	case *pglogrepl.UpdateMessage:
		if r := st.ours(m.RelationID); r != nil && st.tx != nil {
			st.update(ctx, r, m.OldTupleType, m.OldTuple, m.NewTuple)
		}
	case *pglogrepl.DeleteMessage:
		if r := st.ours(m.RelationID); r != nil && st.tx != nil {
			st.remove(r, m.OldTupleType, m.OldTuple)
		}
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			if st.ours(id) != nil && st.tx != nil {
				st.tx.truncate = true
			}
		}
	case *pglogrepl.CommitMessage:
		tx := st.tx
		st.tx = nil
		rev := m.TransactionEndLSN
		if tx == nil || rev <= st.pos {
			return 0, nil // delivered before this stream started
		}
		if tx.truncate {
			return 0, st.s.errorf(informer.ErrExpired, nil, "the table was truncated at %s: list again", rev)
		}
		if len(tx.events) == 0 {
			if bookmarks {
				return rev, nil
			}
			st.pos = rev
			return 0, nil
		}
		for i := range tx.events {
			tx.events[i].Revision = rev.String()
		}
		st.pending, st.pendRev = tx.events, rev
	}
	return 0, nil
}

// ours returns the relation if it is the source's table.
func (st *stream[V]) ours(id uint32) *relation {
	if r := st.relations[id]; r != nil && r.ours {
		return r
	}
	return nil
}

func (st *stream[V]) add(t informer.EventType, v V) {
	st.tx.events = append(st.tx.events, informer.Event[V]{Type: t, Object: v})
}

// row makes a Row of a tuple; unchanged lists the columns sent as unchanged TOASTed
// values.
func (st *stream[V]) row(r *relation, t *pglogrepl.TupleData) (row *Row, unchanged []int) {
	row = &Row{cols: r.cols, vals: make([][]byte, len(r.cols)), present: make([]bool, len(r.cols)), types: st.types}
	if t == nil {
		return row, nil
	}
	for i, c := range t.Columns {
		if i >= len(r.cols) {
			break
		}
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			row.vals[i], row.present[i] = c.Data, true
		case pglogrepl.TupleDataTypeNull:
			row.present[i] = true
		case pglogrepl.TupleDataTypeToast:
			unchanged = append(unchanged, i)
		}
	}
	return row, unchanged
}

// decodeKept keeps the row's big values for the updates that do not send them again, and
// decodes it.
func (st *stream[V]) decodeKept(row *Row) (V, bool) {
	st.s.big.remember(row)
	return st.s.decodeRow(row)
}

func (st *stream[V]) insert(ctx context.Context, r *relation, t *pglogrepl.TupleData) {
	row, _ := st.row(r, t)
	if v, ok := st.decodeKept(row); ok {
		st.add(informer.Added, v)
	}
}

func (st *stream[V]) update(ctx context.Context, r *relation, oldType uint8, old, t *pglogrepl.TupleData) {
	row, unchanged := st.row(r, t)
	if old != nil {
		// The key changed (or the table's replica identity is FULL): the old key goes.
		oldRow := st.oldRow(r, oldType, old)
		if oldRow.fullKey() != row.fullKey() {
			st.s.big.forget(oldRow.fullKey())
			st.deleted(oldRow)
		}
	}
	if len(unchanged) > 0 {
		st.s.fillUnchanged(ctx, row, unchanged)
	}
	if v, ok := st.decodeKept(row); ok {
		st.add(informer.Modified, v)
		return
	}
	// The row's new state does not decode: its old state must not stay in the cache.
	st.deleted(row.keyOnly())
}

func (st *stream[V]) remove(r *relation, oldType uint8, old *pglogrepl.TupleData) {
	row := st.oldRow(r, oldType, old)
	st.s.big.forget(row.fullKey())
	st.deleted(row)
}

// oldRow makes a Row of an old tuple: with the default replica identity it carries the
// key columns only (the others are sent as NULL), with REPLICA IDENTITY FULL every column.
func (st *stream[V]) oldRow(r *relation, oldType uint8, old *pglogrepl.TupleData) *Row {
	row, _ := st.row(r, old)
	if oldType == pglogrepl.UpdateMessageTupleTypeKey {
		return row.keyOnly()
	}
	return row
}

// deleted adds a Deleted event for the row, which carries at least the key columns. A row
// that lacks a column (the default replica identity sends the key columns alone) is not
// the last state: the event says so, and the informer hands OnDelete its cached state.
func (st *stream[V]) deleted(row *Row) {
	if v, ok := st.s.decodeRow(row); ok {
		st.tx.events = append(st.tx.events, informer.Event[V]{Type: informer.Deleted, Object: v, LastStateUnknown: slices.Contains(row.present, false)})
	}
}

// classify sorts an error of the server or the connection into the informer's classes:
// a slot that is gone, or a stream on a temporary slot whose connection broke (which
// takes the slot with it), means the revision is lost (ErrExpired); a connection that
// failed otherwise is retryable.
func (s *Source[V]) classify(err error, what string) error {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pgErr.Code {
		case "42704", "55000": // undefined_object (no such slot), object_not_in_prerequisite_state (invalidated)
			return s.errorf(informer.ErrExpired, err, "%s", what)
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return s.errorf(informer.ErrUnavailable, err, "%s", what)
		}
		return s.errorf(nil, err, "%s", what)
	}
	return s.errorf(informer.ErrRetryable, err, "%s", what)
}

// streamError classifies an error that broke a stream. On a temporary slot, which goes
// with its connection, the revision is lost whatever the cause; but the error is
// retryable all the same: the informer watches again, and the watch finds out whether the
// server it reaches now is still on the list's history (ErrExpired: list again) or not
// (ErrOtherHistory: a restore, a promotion), which the informer must know before it
// lists (see temporaryGone).
func (s *Source[V]) streamError(err error, what string) error {
	if s.cfg.Slot == "" {
		return s.errorf(informer.ErrRetryable, err, "%s (the temporary slot went with the connection)", what)
	}
	return s.classify(err, what)
}
