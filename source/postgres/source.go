package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/errsink"
)

// Config configures a Source. ConnString and Table are required.
type Config[V any] struct {
	// ConnString is a pgx connection string (a postgres:// URL or key=value pairs) for a
	// role with the REPLICATION attribute (or a superuser) that may read the table. The
	// source opens a replication connection with it (replication=database is added) and,
	// for each list, a normal one.
	ConnString string

	// Table is the table to mirror: "name" (in the search path's first schema, public by
	// default) or "schema.name". Names are taken as written, case included.
	Table string

	// Publication is the publication the watch reads; it must publish Table. Empty means
	// "informer_" followed by the table's name. Create it once, as the table's owner:
	// CREATE PUBLICATION informer_config FOR TABLE config. A row filter on the publication
	// (PostgreSQL 15: FOR TABLE config WHERE (…)) is the source's row filter: lists read
	// the same rows.
	Publication string

	// Slot names a replication slot that outlives the process, for a warm restart
	// (informer.Options.Persist): a later Source with the same Slot watches from the saved
	// revision instead of listing the table. Empty means a temporary slot, which
	// PostgreSQL drops with its connection: nothing is left in the database, and every
	// new process lists. A named slot keeps the WAL it has not confirmed while no
	// informer reads it: bound that with the server's max_slot_wal_keep_size, past which
	// PostgreSQL invalidates the slot (the source then lists again), and drop a slot no
	// longer used with DropSlot.
	Slot string

	// Decode turns a row into V. Nil means by column name into V's fields, V being a
	// struct or a pointer to one: a field tagged `db:"column"` receives that column, one
	// tagged `db:"-"` none, an untagged exported field the column of its name, ignoring
	// case; columns without a field are ignored.
	Decode Decoder[V]

	// OnDecodeError, if set, also receives every row that could not be decoded (a
	// *DecodeError); the informers built over the source receive them anyway.
	OnDecodeError func(error)

	// StatusInterval is how often the watch reports to the server what it has delivered
	// (a standby status update), which lets the server recycle the WAL before it. Zero
	// means 10 seconds.
	StatusInterval time.Duration
}

// DefaultPageSize is the page size the Source reports to informers whose
// Options.PageSize is 0: rows decoded per page of a list (the rows stream from one query
// whatever the page size; a page bounds what the informer holds at once).
const DefaultPageSize = 10_000

// Source is an informer.ListerWatcher[V] over one PostgreSQL table: lists read the
// snapshot of a new logical replication slot, watches stream the table's changes
// from that slot (pgoutput). Revisions are LSNs ("0/16B3748"). Source also implements
// informer.RevisionComparer, informer.SourceIdentifier, informer.PageSizer and
// informer.ErrorReporting.
//
// A Source serves one informer at a time; it holds a replication connection between a
// list and the watch that follows it, and between watches. Close it once the informer has
// stopped.
type Source[V any] struct {
	cfg         Config[V]
	schema      string // as the user wrote it; empty: the search path's
	table       string
	publication string
	decode      Decoder[V]
	reports     errsink.List

	mu      sync.Mutex
	parked  *stream[V]    // the replication connection kept between calls
	list    *listState[V] // the list in progress
	ident   identity      // of the server, from the last list or watch
	big     bigValues     // large values of the rows, for unchanged TOASTed columns
	closed  bool
	listSeq int
}

// identity is who the server is: its system identifier, timeline and database.
type identity struct {
	system   string
	timeline int32
	database string
}

// New returns a Source for cfg. It checks cfg only; the first List talks to the server.
func New[V any](cfg Config[V]) (*Source[V], error) {
	if cfg.ConnString == "" || cfg.Table == "" {
		return nil, errors.New("postgres source: Config.ConnString and Config.Table are required")
	}
	if _, err := pgconn.ParseConfig(cfg.ConnString); err != nil {
		return nil, fmt.Errorf("postgres source: Config.ConnString: %w", err)
	}
	s := &Source[V]{cfg: cfg, decode: cfg.Decode}
	s.schema, s.table, _ = strings.Cut(cfg.Table, ".")
	if s.table == "" {
		s.schema, s.table = "", s.schema
	}
	s.publication = cfg.Publication
	if s.publication == "" {
		s.publication = "informer_" + s.table
	}
	if s.cfg.StatusInterval <= 0 {
		s.cfg.StatusInterval = 10 * time.Second
	}
	if s.decode == nil {
		d, err := StructDecoder[V]()
		if err != nil {
			return nil, fmt.Errorf("postgres source %s: %w", cfg.Table, err)
		}
		s.decode = d
	}
	if cfg.OnDecodeError != nil {
		s.reports.Add(cfg.OnDecodeError)
	}
	return s, nil
}

// qualified is the table's name quoted for SQL.
func (s *Source[V]) qualified() string {
	if s.schema == "" {
		return quoteIdent(s.table)
	}
	return quoteIdent(s.schema) + "." + quoteIdent(s.table)
}

func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// ReportErrorsTo implements informer.ErrorReporting: rows that cannot be decoded are
// reported to report.
func (s *Source[V]) ReportErrorsTo(report func(error)) { s.reports.Add(report) }

// DefaultPageSize implements informer.PageSizer.
func (s *Source[V]) DefaultPageSize() int64 { return DefaultPageSize }

// CompareRevisions implements informer.RevisionComparer: revisions are LSNs.
func (s *Source[V]) CompareRevisions(a, b string) (int, error) {
	la, err := parseRevision(a)
	if err != nil {
		return 0, err
	}
	lb, err := parseRevision(b)
	if err != nil {
		return 0, err
	}
	switch {
	case la < lb:
		return -1, nil
	case la > lb:
		return 1, nil
	}
	return 0, nil
}

func parseRevision(r string) (pglogrepl.LSN, error) {
	l, err := pglogrepl.ParseLSN(r)
	if err != nil {
		return 0, fmt.Errorf("%q is not a revision of a postgres source (an LSN such as 0/16B3748)", r)
	}
	return l, nil
}

// SourceID implements informer.SourceIdentifier: the server's system identifier and
// timeline, the database and the table. A server restored from a backup or promoted from
// a standby has another timeline, so a saved cache is not restored into it.
func (s *Source[V]) SourceID(ctx context.Context) (string, error) {
	conn, err := s.connect(ctx, true)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	id, _, err := identify(ctx, conn)
	if err != nil {
		return "", s.errorf(nil, err, "identify the server")
	}
	return fmt.Sprintf("postgres:%s/%d/%s/%s", id.system, id.timeline, id.database, s.cfg.Table), nil
}

// Close releases the source's connections, which drops its temporary slot. A Watch still
// open fails. A named slot stays: DropSlot drops it.
func (s *Source[V]) Close() error {
	s.mu.Lock()
	s.closed = true
	st, l := s.parked, s.list
	s.parked, s.list = nil, nil
	s.mu.Unlock()
	if l != nil {
		l.close() // first: its reader may be reading on the stream's connection
	}
	if st != nil {
		st.close()
	}
	return nil
}

// DropSlot drops the named replication slot (Config.Slot) of a source no longer used, so
// that the server recycles the WAL it kept. It fails if the slot is in use.
func DropSlot(ctx context.Context, connString, slot string) error {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return err
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres: drop slot %s: %w", slot, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot("+quoteLiteral(slot)+")").ReadAll()
	if err != nil {
		return fmt.Errorf("postgres: drop slot %s: %w", slot, err)
	}
	return nil
}

// connect opens a connection, a replication one if replication is set.
func (s *Source[V]) connect(ctx context.Context, replication bool) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.ConnString)
	if err != nil {
		return nil, err
	}
	what := "connect"
	if replication {
		cfg.RuntimeParams["replication"] = "database"
		what = "open a replication connection"
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, s.errorf(informer.ErrConnectionRefused, err, "%s", what)
	}
	return conn, nil
}

// identify asks the server on conn, a replication connection, who it is and how far
// its WAL has reached.
func identify(ctx context.Context, conn *pgconn.PgConn) (identity, pglogrepl.LSN, error) {
	r, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return identity{}, 0, err
	}
	return identity{system: r.SystemID, timeline: r.Timeline, database: r.DBName}, r.XLogPos, nil
}

// String says which system and timeline the identity names.
func (id identity) String() string {
	return fmt.Sprintf("system %s timeline %d", id.system, id.timeline)
}

// sourceError is an error of the Source. It matches an informer error class without
// repeating the class's message, and unwraps to the cause.
type sourceError struct {
	class error
	msg   string
	err   error
}

func (e *sourceError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *sourceError) Unwrap() []error {
	var out []error
	if e.class != nil {
		out = append(out, e.class)
	}
	if e.err != nil {
		out = append(out, e.err)
	}
	return out
}

// errorf returns an error of class (nil: none) about the source's table, with the cause.
func (s *Source[V]) errorf(class, cause error, format string, args ...any) error {
	return &sourceError{class: class, msg: "postgres " + s.cfg.Table + ": " + fmt.Sprintf(format, args...), err: cause}
}

// DecodeError reports a row that could not be decoded. It matches informer.ErrDecode
// (and so informer.ErrBadInput). The row is left out of the cache until a later change
// of it decodes.
type DecodeError struct {
	// Table is the table, as in Config.Table.
	Table string
	// Key names the row by its key columns: "id=3".
	Key string
	// Err is the decoder's error.
	Err error
}

// Error says which row failed, why, and what becomes of it.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("postgres %s: row (%s) cannot be decoded, left out of the cache until it changes: %v", e.Table, e.Key, e.Err)
}

// Unwrap returns informer.ErrDecode and the decoder's error.
func (e *DecodeError) Unwrap() []error { return []error{informer.ErrDecode, e.Err} }

// decodeRow decodes r, reporting a failure.
func (s *Source[V]) decodeRow(r *Row) (V, bool) {
	v, err := s.decode(r)
	if err != nil {
		s.reports.Report(&DecodeError{Table: s.cfg.Table, Key: r.key(), Err: err})
		return v, false
	}
	return v, true
}

// newSlotName returns a fresh name for a temporary slot.
func newSlotName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "informer_" + hex.EncodeToString(b)
}

// newTypeMap returns the type map a list or a stream decodes with (a pgtype.Map is not
// safe for concurrent use).
func newTypeMap() *pgtype.Map { return pgtype.NewMap() }
