package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/informer-go/informer"
)

// listState is a list in progress: a REPEATABLE READ transaction on the snapshot a new
// slot exported, with a cursor over the table.
type listState struct {
	token string // the Continue token of the next page
	conn  *pgconn.PgConn
	cols  []column
	keys  map[string]bool
	rev   pglogrepl.LSN
	types *pgtype.Map
}

func (l *listState) close() { _ = l.conn.Close(context.Background()) }

// cursorName is the list's cursor.
const cursorName = "informer_list"

// List implements informer.ListerWatcher. The first page creates a replication slot
// (temporary unless Config.Slot names one), reads the table in a REPEATABLE READ
// transaction on the snapshot the slot exported, through a cursor, and reports the slot's
// consistent point as the revision: the state of the table at that LSN, which is where
// the watch that follows starts. Later pages read on from the cursor. The list's
// ListOptions.Revision is not used: every list is of the newest state.
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
			return informer.List[V]{}, s.errorf(informer.ErrExpired, nil, "the list's cursor %q is gone (a newer list started, or the connection failed): list again", opts.Continue)
		}
		s.mu.Unlock()
	}
	items, more, err := s.fetch(ctx, l, opts.Limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || !more {
		if s.list == l {
			s.list = nil
		}
		l.close()
		if err != nil {
			return informer.List[V]{}, err
		}
		return informer.List[V]{Items: items, Revision: l.rev.String()}, nil
	}
	s.listSeq++
	l.token = fmt.Sprintf("%s/%d", l.rev, s.listSeq)
	return informer.List[V]{Items: items, Revision: l.rev.String(), Continue: l.token}, nil
}

// fetch reads one page from the list's cursor; more reports whether rows may remain.
func (s *Source[V]) fetch(ctx context.Context, l *listState, limit int64) (items []V, more bool, err error) {
	sql := "FETCH ALL FROM " + cursorName
	if limit > 0 {
		sql = fmt.Sprintf("FETCH %d FROM %s", limit, cursorName)
	}
	rr := l.conn.ExecParams(ctx, sql, nil, nil, nil, nil)
	if l.cols == nil {
		for _, fd := range rr.FieldDescriptions() {
			l.cols = append(l.cols, column{name: fd.Name, oid: fd.DataTypeOID, key: l.keys[fd.Name]})
		}
	}
	row := Row{cols: l.cols, present: make([]bool, len(l.cols)), types: l.types}
	for i := range row.present {
		row.present[i] = true
	}
	n := int64(0)
	for rr.NextRow() {
		n++
		row.vals = rr.Values()
		s.big.remember(&row)
		if v, ok := s.decodeRow(&row); ok {
			items = append(items, v)
		}
	}
	if _, err := rr.Close(); err != nil {
		return nil, false, s.errorf(informer.ErrRetryable, err, "list: read the cursor")
	}
	if limit <= 0 || n < limit {
		if _, err := l.conn.Exec(ctx, "COMMIT").ReadAll(); err != nil {
			return nil, false, s.errorf(informer.ErrRetryable, err, "list: end the transaction")
		}
		return items, false, nil
	}
	return items, true, nil
}

// startList checks the server's configuration, creates the slot and opens the cursor on
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

	conn, err := s.connect(ctx, false)
	if err != nil {
		return nil, err
	}
	l := &listState{conn: conn, types: newTypeMap()}
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	filter, err := s.check(ctx, l)
	if err != nil {
		return nil, err
	}
	repl, err := s.connect(ctx, true)
	if err != nil {
		return nil, err
	}
	st, snapshot, err := s.createSlot(ctx, repl)
	if err != nil {
		_ = repl.Close(context.Background())
		return nil, err
	}
	l.rev = st.pos
	sql := "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT " + quoteLiteral(snapshot) +
		"; DECLARE " + cursorName + " NO SCROLL CURSOR FOR SELECT * FROM " + s.qualified()
	if filter != "" {
		sql += " WHERE " + filter
	}
	if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
		st.close()
		return nil, s.errorf(informer.ErrRetryable, err, "list: open a cursor on the slot's snapshot")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		st.close()
		return nil, s.errorf(nil, nil, "the source is closed")
	}
	s.big.reset()
	s.parked, s.list, s.ident = st, l, st.ident
	ok = true
	return l, nil
}

// check verifies what the source needs of the server, with an error that says what to
// run for each miss, and reads the table's key columns and the publication's row filter.
func (s *Source[V]) check(ctx context.Context, l *listState) (filter string, err error) {
	table := quoteLiteral(s.qualified())
	pub := quoteLiteral(s.publication)
	res, err := l.conn.Exec(ctx, `SELECT current_setting('wal_level'),
  to_regclass(`+table+`) IS NOT NULL,
  EXISTS (SELECT 1 FROM pg_publication WHERE pubname = `+pub+`),
  current_setting('server_version_num')::int >= 150000`).ReadAll()
	if err != nil {
		return "", s.errorf(informer.ErrRetryable, err, "read the server's settings")
	}
	v := res[0].Rows[0]
	switch {
	case string(v[0]) != "logical":
		return "", s.errorf(nil, nil, "wal_level is %s, logical replication needs logical: run ALTER SYSTEM SET wal_level = logical; then restart the server", v[0])
	case string(v[1]) != "t":
		return "", s.errorf(nil, nil, "table %s does not exist (or the role may not see it)", s.qualified())
	case string(v[2]) != "t":
		return "", s.errorf(nil, nil, "publication %s does not exist: run CREATE PUBLICATION %s FOR TABLE %s; as the table's owner", s.publication, quoteIdent(s.publication), s.qualified())
	}
	filterCol := "NULL::text"
	if string(v[3]) == "t" {
		filterCol = "max(p.rowfilter)"
	}
	res, err = l.conn.Exec(ctx, `SELECT count(*), `+filterCol+` FROM pg_publication_tables p
  JOIN pg_class c ON c.oid = to_regclass(`+table+`) JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE p.pubname = `+pub+` AND p.schemaname = n.nspname AND p.tablename = c.relname;
SELECT a.attname FROM pg_class c JOIN pg_index i ON i.indrelid = c.oid
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey)
  WHERE c.oid = to_regclass(`+table+`)
    AND (i.indisreplident OR (i.indisprimary AND c.relreplident = 'd'))`).ReadAll()
	if err != nil {
		return "", s.errorf(informer.ErrRetryable, err, "read the publication and the table's key")
	}
	if string(res[0].Rows[0][0]) == "0" {
		return "", s.errorf(nil, nil, "publication %s does not publish table %s: run ALTER PUBLICATION %s ADD TABLE %s; as the table's owner", s.publication, s.qualified(), quoteIdent(s.publication), s.qualified())
	}
	filter = string(res[0].Rows[0][1])
	l.keys = map[string]bool{}
	for _, r := range res[1].Rows {
		l.keys[string(r[0])] = true
	}
	return strings.TrimSpace(filter), nil
}

// createSlot creates the source's slot on a new replication connection, exporting its
// snapshot, and returns the stream parked on it (not yet started) and the snapshot's name.
func (s *Source[V]) createSlot(ctx context.Context, repl *pgconn.PgConn) (*stream[V], string, error) {
	id, err := identify(ctx, repl)
	if err != nil {
		return nil, "", s.errorf(informer.ErrRetryable, err, "identify the server")
	}
	name, temporary := s.cfg.Slot, s.cfg.Slot == ""
	if temporary {
		name = newSlotName()
	} else {
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
	return s.newStream(repl, name, id, pos), res.SnapshotName, nil
}
