package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/informer-go/informer"
)

// listState is a list in progress: one query on a normal connection that opens a
// REPEATABLE READ transaction on the snapshot a new slot exported, reads the table and
// commits. Its rows stream in as the pages ask for them: the server sends the table
// while the informer takes in the page before, and a page costs no round trip.
type listState struct {
	token  string // the Continue token of the next page
	conn   *pgconn.PgConn
	cancel context.CancelFunc // cancels the query
	query  *pgconn.MultiResultReader
	rows   *pgconn.ResultReader // the SELECT's
	row    Row                  // the row being decoded, its values those of rows
	rev    pglogrepl.LSN
}

func (l *listState) close() {
	_ = l.conn.Close(context.Background())
	l.cancel()
}

// whileReading makes ctx, the context of a call, cancel the list's query while the call
// reads it (the query's own context outlives the call); the function returned ends that.
func (l *listState) whileReading(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, l.cancel)
}

// List implements informer.ListerWatcher. The first page creates a replication slot
// (temporary unless Config.Slot names one), starts reading the table in a REPEATABLE READ
// transaction on the snapshot the slot exported, and reports the slot's consistent point
// as the revision: the state of the table at that LSN, which is where the watch that
// follows starts. Later pages read on from the same query. The list's
// ListOptions.Revision is not used: every list is of the newest state. List.Bytes is the
// size of the page's values as the server sent them (text).
func (s *Source[V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	var l *listState
	if opts.Continue == "" {
		var err error
		if l, err = s.startList(ctx); err != nil {
			return informer.List[V]{}, err
		}
	} else {
		s.mu.Lock()
		l = s.list
		if l == nil || l.token != opts.Continue {
			s.mu.Unlock()
			return informer.List[V]{}, s.errorf(informer.ErrExpired, nil, "the list's query %q is gone (a newer list started, or the connection failed): list again", opts.Continue)
		}
		s.mu.Unlock()
	}
	p, err := s.fetch(ctx, l, opts.Limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || !p.more {
		if s.list == l {
			s.list = nil
		}
		l.close()
		if err != nil {
			return informer.List[V]{}, err
		}
		return informer.List[V]{Items: p.items, Revision: l.rev.String(), Bytes: p.bytes}, nil
	}
	s.listSeq++
	l.token = fmt.Sprintf("%s/%d", l.rev, s.listSeq)
	return informer.List[V]{Items: p.items, Revision: l.rev.String(), Continue: l.token, Bytes: p.bytes}, nil
}

// page is what fetch read: the decoded rows, the size of their values, and whether rows
// may remain.
type page[V any] struct {
	items []V
	bytes int64
	more  bool
}

// fetch reads up to limit rows (all if limit is 0) of the list's query; at its end, it
// reads the commit too.
func (s *Source[V]) fetch(ctx context.Context, l *listState, limit int64) (page[V], error) {
	defer l.whileReading(ctx)()
	var p page[V]
	if limit > 0 {
		p.items = make([]V, 0, limit)
	}
	for n := int64(0); limit <= 0 || n < limit; n++ {
		if !l.rows.NextRow() {
			if _, err := l.rows.Close(); err != nil {
				return p, s.errorf(informer.ErrRetryable, err, "list: read the table")
			}
			if err := l.query.Close(); err != nil {
				return p, s.errorf(informer.ErrRetryable, err, "list: end the transaction")
			}
			return p, nil
		}
		l.row.vals = l.rows.Values()
		for _, v := range l.row.vals {
			p.bytes += int64(len(v))
		}
		s.big.remember(&l.row)
		if v, ok := s.decodeRow(&l.row); ok {
			p.items = append(p.items, v)
		}
	}
	p.more = true
	return p, nil
}

// startList checks the server's configuration, creates the slot and starts the query on
// its snapshot. The slot's connection is parked for the watch that follows.
func (s *Source[V]) startList(ctx context.Context) (*listState, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, s.errorf(nil, nil, "the source is closed")
	}
	old, oldList := s.parked, s.list
	s.parked, s.list = nil, nil
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	if oldList != nil {
		oldList.close()
	}

	conn, st, snapshot, filter, keys, err := s.prepare(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &listState{conn: conn, cancel: cancel, rev: st.pos}
	sql := "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT " + quoteLiteral(snapshot) +
		"; SELECT * FROM " + s.qualified()
	if filter != "" {
		sql += " WHERE " + filter
	}
	err = l.start(ctx, lctx, sql+"; COMMIT", keys)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || s.closed {
		l.close()
		st.close()
		if err == nil {
			return nil, s.errorf(nil, nil, "the source is closed")
		}
		return nil, s.errorf(informer.ErrRetryable, err, "list: read the table on the slot's snapshot")
	}
	s.big.reset()
	s.parked, s.list, s.ident = st, l, st.ident
	return l, nil
}

// start sends the list's query, in one round trip (the transaction on the slot's
// snapshot, the SELECT and the commit), and waits for the SELECT's columns. The query
// runs under lctx, which outlives ctx (the first page's).
func (l *listState) start(ctx, lctx context.Context, sql string, keys map[string]bool) error {
	defer l.whileReading(ctx)()
	l.query = l.conn.Exec(lctx, sql)
	for range 3 { // BEGIN, SET TRANSACTION, SELECT
		if !l.query.NextResult() {
			if err := l.query.Close(); err != nil {
				return err
			}
			return errors.New("the server answered no result")
		}
	}
	l.rows = l.query.ResultReader()
	cols := make([]column, 0, len(l.rows.FieldDescriptions()))
	for _, fd := range l.rows.FieldDescriptions() {
		cols = append(cols, column{name: fd.Name, oid: fd.DataTypeOID, key: keys[fd.Name]})
	}
	l.row = Row{cols: cols, present: make([]bool, len(cols)), types: newTypeMap()}
	for i := range l.row.present {
		l.row.present[i] = true
	}
	return nil
}

// prepare opens the list's connection and checks the server on it, and at once opens a
// replication connection and creates the slot on it (see createSlot). It returns the
// slot's stream (not started), the name of the snapshot it exported, and the
// publication's row filter and the table's key columns.
func (s *Source[V]) prepare(ctx context.Context) (conn *pgconn.PgConn, st *stream[V], snapshot, filter string, keys map[string]bool, err error) {
	type slotted struct {
		st       *stream[V]
		snapshot string
		err      error
	}
	checked := make(chan error, 1)
	slotc := make(chan slotted, 1)
	go func() {
		var r slotted
		repl, err := s.connect(ctx, true)
		if err == nil {
			r.st, r.snapshot, err = s.createSlot(ctx, repl, checked)
		}
		r.err = err
		slotc <- r
	}()
	conn, err = s.connect(ctx, false)
	if err == nil {
		filter, keys, err = s.check(ctx, conn)
	}
	checked <- err
	r := <-slotc
	if err == nil {
		err = r.err
	}
	if err != nil {
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		return nil, nil, "", "", nil, err
	}
	return conn, r.st, r.snapshot, filter, keys, nil
}

// check verifies what the source needs of the server, with an error that says what to
// run for each miss, and reads the table's key columns and the publication's row filter,
// in one round trip.
func (s *Source[V]) check(ctx context.Context, conn *pgconn.PgConn) (filter string, keys map[string]bool, err error) {
	table := quoteLiteral(s.qualified())
	pub := quoteLiteral(s.publication)
	filterCol := "NULL::text"
	if serverMajor(conn) >= 15 {
		filterCol = "max(p.rowfilter)" // row filters came with PostgreSQL 15
	}
	res, err := conn.Exec(ctx, `SELECT current_setting('wal_level'),
  to_regclass(`+table+`) IS NOT NULL,
  EXISTS (SELECT 1 FROM pg_publication WHERE pubname = `+pub+`);
SELECT count(*), `+filterCol+` FROM pg_publication_tables p
  JOIN pg_class c ON c.oid = to_regclass(`+table+`) JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE p.pubname = `+pub+` AND p.schemaname = n.nspname AND p.tablename = c.relname;
SELECT a.attname FROM pg_class c JOIN pg_index i ON i.indrelid = c.oid
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey)
  WHERE c.oid = to_regclass(`+table+`)
    AND (i.indisreplident OR (i.indisprimary AND c.relreplident = 'd'))`).ReadAll()
	if err != nil {
		return "", nil, s.errorf(informer.ErrRetryable, err, "read the server's settings, the publication and the table's key")
	}
	v := res[0].Rows[0]
	switch {
	case string(v[0]) != "logical":
		return "", nil, s.errorf(nil, nil, "wal_level is %s, logical replication needs logical: run ALTER SYSTEM SET wal_level = logical; then restart the server", v[0])
	case string(v[1]) != "t":
		return "", nil, s.errorf(nil, nil, "table %s does not exist (or the role may not see it)", s.qualified())
	case string(v[2]) != "t":
		return "", nil, s.errorf(nil, nil, "publication %s does not exist: run CREATE PUBLICATION %s FOR TABLE %s; as the table's owner", s.publication, quoteIdent(s.publication), s.qualified())
	case string(res[1].Rows[0][0]) == "0":
		return "", nil, s.errorf(nil, nil, "publication %s does not publish table %s: run ALTER PUBLICATION %s ADD TABLE %s; as the table's owner", s.publication, s.qualified(), quoteIdent(s.publication), s.qualified())
	}
	keys = map[string]bool{}
	for _, r := range res[2].Rows {
		keys[string(r[0])] = true
	}
	return strings.TrimSpace(string(res[1].Rows[0][1])), keys, nil
}

// createSlot identifies the server on repl, a new replication connection, and creates
// the source's slot on it, exporting its snapshot; it returns the stream parked on it
// (not yet started) and the snapshot's name. checked gives the outcome of the list's
// checks of the server, which run meanwhile: a named slot is created only once they
// passed, a temporary one at once (it goes with its connection should they fail). On
// an error, repl is closed.
func (s *Source[V]) createSlot(ctx context.Context, repl *pgconn.PgConn, checked <-chan error) (_ *stream[V], snapshot string, err error) {
	defer func() {
		if err != nil {
			_ = repl.Close(context.WithoutCancel(ctx))
		}
	}()
	id, err := identify(ctx, repl)
	if err != nil {
		return nil, "", s.errorf(informer.ErrRetryable, err, "identify the server")
	}
	name, temporary := s.cfg.Slot, s.cfg.Slot == ""
	if temporary {
		name = newSlotName()
	} else {
		if err := <-checked; err != nil {
			return nil, "", err // the caller reports it
		}
		// A list starts the slot afresh: its snapshot is the list's state.
		_, err := repl.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = "+quoteLiteral(name)).ReadAll()
		if err != nil {
			return nil, "", s.errorf(informer.ErrRetryable, err, "drop slot %s to create it afresh (is another informer using it?)", name)
		}
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: temporary, SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication,
	})
	if err != nil {
		return nil, "", s.errorf(informer.ErrRetryable, err, "create replication slot %s", name)
	}
	pos, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, "", s.errorf(informer.ErrBadInput, err, "slot %s's consistent point", name)
	}
	if temporary {
		if err := <-checked; err != nil {
			return nil, "", err // the caller reports it
		}
	}
	return s.newStream(repl, name, id, pos), res.SnapshotName, nil
}

// serverMajor is the server's major version, from the server_version it reported on
// connecting ("15.8 (Debian 15.8-0+deb12u1)", "17devel"); 0 if it does not say.
func serverMajor(conn *pgconn.PgConn) int {
	v := conn.ParameterStatus("server_version")
	n := 0
	for i := 0; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		n = n*10 + int(v[i]-'0')
	}
	return n
}
