package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/informer-go/informer"
)

// listState is a list in progress: one query, on the replication connection of the
// stream the list parks for the watch, that reads the table in the REPEATABLE READ
// transaction whose snapshot is the new slot's, and commits. A reader goroutine reads
// and decodes its rows a page ahead of the calls: the server sends the table and the
// source decodes the next page while the informer takes in the page before, and a page
// costs no round trip.
type listState[V any] struct {
	token  string             // the Continue token of the next page; guarded by the Source's mu
	conn   *pgconn.PgConn     // the connection of the stream the list parks for the watch
	cancel context.CancelFunc // cancels the query
	query  *pgconn.MultiResultReader
	rows   *pgconn.ResultReader // the SELECT's
	row    Row                  // the row being decoded, its values those of rows
	rev    pglogrepl.LSN

	limit    int64         // the rows of a page the reader reads: the first call's Limit
	pages    chan page[V]  // the reader's pages, one ahead; the last one has more false or an error
	stop     chan struct{} // closed by close: the reader sends no more
	closing  sync.Once
	done     chan struct{} // closed when the reader has returned
	finished bool          // the query ended and committed; set by the reader before done
	pending  page[V]       // what the last call left of a page longer than its Limit
}

// page is what the reader read: the decoded rows, the size of the values of each, and
// whether rows may remain; or the error that ended the list.
type page[V any] struct {
	items []V
	sizes []int32
	more  bool
	err   error
}

// bytes is the size of the page's values as the server sent them.
func (p *page[V]) bytes() int64 {
	var n int64
	for _, s := range p.sizes {
		n += int64(s)
	}
	return n
}

// cut returns the page's first n rows as a page that has more, and leaves the rest in p.
func (p *page[V]) cut(n int64) page[V] {
	head := page[V]{items: p.items[:n:n], sizes: p.sizes[:n:n], more: true}
	p.items, p.sizes = p.items[n:], p.sizes[n:]
	return head
}

// close ends the list: it cancels the query and waits for the reader to return. A list
// that ends before its query did leaves the connection in the middle of the query: close
// closes it, and the watch that follows opens another.
func (l *listState[V]) close() {
	l.closing.Do(func() {
		l.cancel()
		close(l.stop)
		<-l.done
		if !l.finished {
			_ = l.conn.Close(context.Background())
		}
	})
}

// List implements informer.ListerWatcher. The first page opens a replication connection,
// creates a replication slot on it (temporary unless Config.Slot names one) in a
// REPEATABLE READ transaction that takes the slot's snapshot, starts reading the table in
// that transaction, and reports the slot's consistent point as the revision: the state of
// the table at that LSN, which is where the watch that follows starts. Later pages read on from the same query: the source reads and decodes
// each page while the one before is taken in, with the first page's ListOptions.Limit
// (a later call with a smaller Limit receives that many rows). The list's
// ListOptions.Revision is not used: every list is of the newest state. List.Bytes is the
// size of the page's values as the server sent them (text).
func (s *Source[V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	var l *listState[V]
	if opts.Continue == "" {
		var err error
		if l, err = s.startList(ctx, opts.Limit); err != nil {
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
	p, err := l.next(ctx, opts.Limit)
	if err != nil {
		err = s.errorf(informer.ErrRetryable, err, "list")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || !p.more {
		if s.list == l {
			s.endList()
		}
		if err != nil {
			return informer.List[V]{}, err
		}
		return informer.List[V]{Items: p.items, Revision: l.rev.String(), Bytes: p.bytes()}, nil
	}
	s.listSeq++
	l.token = fmt.Sprintf("%s/%d", l.rev, s.listSeq)
	return informer.List[V]{Items: p.items, Revision: l.rev.String(), Continue: l.token, Bytes: p.bytes()}, nil
}

// next returns the list's next page of at most limit rows (any number if limit is 0),
// from what the last call left or from the reader. If ctx ends first, the list ends.
func (l *listState[V]) next(ctx context.Context, limit int64) (page[V], error) {
	if ctx.Err() != nil {
		return page[V]{}, context.Cause(ctx)
	}
	p := l.pending
	l.pending = page[V]{}
	if p.items == nil && p.err == nil {
		select {
		case p = <-l.pages:
		case <-ctx.Done():
			return page[V]{}, context.Cause(ctx)
		}
	}
	if p.err != nil {
		return page[V]{}, p.err
	}
	if limit > 0 && int64(len(p.items)) > limit {
		head := p.cut(limit)
		l.pending = p
		return head, nil
	}
	return p, nil
}

// read is the list's reader: it reads pages of l.limit rows until the query ends or fails,
// or close stops it, and hands each to next.
func (s *Source[V]) read(l *listState[V]) {
	defer close(l.done)
	for {
		p := s.fetch(l)
		select {
		case l.pages <- p:
		case <-l.stop:
			return
		}
		if p.err != nil || !p.more {
			return
		}
	}
}

// fetch reads up to l.limit rows (all if it is 0) of the list's query; at its end, it
// reads the commit too.
func (s *Source[V]) fetch(l *listState[V]) page[V] {
	var p page[V]
	if l.limit > 0 {
		p.items = make([]V, 0, l.limit)
		p.sizes = make([]int32, 0, l.limit)
	}
	for n := int64(0); l.limit <= 0 || n < l.limit; n++ {
		if !l.rows.NextRow() {
			if _, err := l.rows.Close(); err != nil {
				p.err = fmt.Errorf("read the table: %w", err)
			} else if err := l.query.Close(); err != nil {
				p.err = fmt.Errorf("end the transaction: %w", err)
			} else {
				l.finished = true
			}
			return p
		}
		l.row.vals = l.rows.Values()
		size := 0
		for _, v := range l.row.vals {
			size += len(v)
		}
		s.big.remember(&l.row)
		if v, ok := s.decodeRow(&l.row); ok {
			p.items = append(p.items, v)
			p.sizes = append(p.sizes, int32(size))
		}
	}
	p.more = true
	return p
}

// startList checks the server's configuration, creates the slot and starts the query on
// its snapshot. The slot's connection is parked for the watch that follows.
func (s *Source[V]) startList(ctx context.Context, limit int64) (*listState[V], error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, s.errorf(nil, nil, "the source is closed")
	}
	old, oldList := s.parked, s.list
	s.parked, s.list = nil, nil
	s.mu.Unlock()
	if oldList != nil {
		oldList.close()
	}
	if old != nil {
		old.close()
	}

	st, conn, filter, keys, err := s.prepare(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &listState[V]{conn: conn, cancel: cancel, rev: st.pos, limit: limit,
		pages: make(chan page[V], 1), stop: make(chan struct{}), done: make(chan struct{})}
	sql := "SELECT * FROM " + s.qualified()
	if filter != "" {
		sql += " WHERE " + filter
	}
	err = l.start(ctx, lctx, sql+"; COMMIT", keys)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || s.closed {
		close(l.done) // no reader started
		l.close()
		st.close()
		if err == nil {
			return nil, s.errorf(nil, nil, "the source is closed")
		}
		return nil, s.errorf(informer.ErrRetryable, err, "list: read the table on the slot's snapshot")
	}
	s.big.reset()
	s.parked, s.list, s.ident = st, l, st.ident
	go s.read(l)
	return l, nil
}

// endList ends the list in progress, if any (see listState.close); s.mu is held.
func (s *Source[V]) endList() {
	if s.list != nil {
		s.list.close()
		s.list = nil
	}
}

// whileReading makes ctx, the context of a call, cancel the list's query while the call
// reads it (the query's own context outlives the call); the function returned ends that.
func (l *listState[V]) whileReading(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, l.cancel)
}

// start sends the list's query (the SELECT and the commit of the transaction the slot
// was created in) and waits for the SELECT's columns. The query runs under lctx, which
// outlives ctx (the first page's).
func (l *listState[V]) start(ctx, lctx context.Context, sql string, keys map[string]bool) error {
	defer l.whileReading(ctx)()
	l.query = l.conn.Exec(lctx, sql)
	if !l.query.NextResult() { // the SELECT's
		if err := l.query.Close(); err != nil {
			return err
		}
		return errors.New("the server answered no result")
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

// prepare opens the replication connection of the list and of the watch that follows,
// identifies the server, checks what the source needs of it, and creates the slot in a
// REPEATABLE READ transaction that takes the slot's snapshot (see createSlot). It returns
// the stream parked on the connection (not started), the connection, inside that
// transaction, and the publication's row filter and the table's key columns.
func (s *Source[V]) prepare(ctx context.Context) (*stream[V], *pgconn.PgConn, string, map[string]bool, error) {
	repl, err := s.connect(ctx, true)
	if err != nil {
		return nil, nil, "", nil, err
	}
	filter, keys, err := s.check(ctx, repl)
	var st *stream[V]
	if err == nil {
		st, err = s.createSlot(ctx, repl)
	}
	if err != nil {
		_ = repl.Close(context.WithoutCancel(ctx))
		return nil, nil, "", nil, err
	}
	return st, repl, filter, keys, nil
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

// createSlot creates the source's slot on repl, a replication connection, in a REPEATABLE
// READ transaction it begins, whose snapshot is the slot's: the list reads the table in
// it, after it identified the server. A named slot is dropped first: a list starts it
// afresh. It returns the stream parked on repl, not yet started.
func (s *Source[V]) createSlot(ctx context.Context, repl *pgconn.PgConn) (*stream[V], error) {
	id, _, err := identify(ctx, repl)
	if err != nil {
		return nil, s.errorf(informer.ErrRetryable, err, "identify the server")
	}
	name, temporary := s.cfg.Slot, s.cfg.Slot == ""
	if temporary {
		name = newSlotName()
	} else {
		_, err := repl.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = "+quoteLiteral(name)).ReadAll()
		if err != nil {
			return nil, s.errorf(informer.ErrRetryable, err, "drop slot %s to create it afresh (is another informer using it?)", name)
		}
	}
	if _, err := repl.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY").ReadAll(); err != nil {
		return nil, s.errorf(informer.ErrRetryable, err, "begin the list's transaction")
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: temporary, SnapshotAction: "USE_SNAPSHOT", Mode: pglogrepl.LogicalReplication,
	})
	if err != nil {
		return nil, s.errorf(informer.ErrRetryable, err, "create replication slot %s", name)
	}
	pos, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, s.errorf(informer.ErrBadInput, err, "slot %s's consistent point", name)
	}
	return s.newStream(repl, name, id, pos), nil
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
