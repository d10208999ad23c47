package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/postgres"
	"github.com/informer-go/informer/source/postgres/pgtest"
)

// server is the PostgreSQL server of the test binary, started by TestMain (nil when none
// could be started outside CI: the tests skip).
var server *pgtest.Server

// replicaServer is a second server, with wal_level=replica, started in the background
// by TestMain; replicaReady is closed once it is up (or failed to start).
var (
	replicaServer *pgtest.Server
	replicaErr    error
	replicaReady  = make(chan struct{})
)

// TestMain starts the servers, runs the tests, stops the servers and checks that no
// goroutine is left.
func TestMain(m *testing.M) {
	go func() {
		defer close(replicaReady)
		replicaServer, replicaErr = pgtest.Start(pgtest.Options{WalLevel: "replica"})
	}()
	code := pgtest.Main(m.Run, func(s *pgtest.Server) { server = s })
	<-replicaReady
	if replicaServer != nil {
		_ = replicaServer.Stop()
	}
	if code == 0 {
		if err := testkit.FindLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left at the end of the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// item is a row of the tests' tables.
type item struct {
	ID    int64   `db:"id"`
	Name  string  `db:"name"`
	Value string  `db:"value"`
	Extra *string `db:"extra"`
}

func itemKey(it *item) (int64, error) { return it.ID, nil }

func describe(it *item) (string, string) { return fmt.Sprint(it.ID), it.Value }

// connect returns a connection to the test server, closed when the test ends.
func connect(t testing.TB) *pgx.Conn {
	t.Helper()
	if server == nil {
		t.Skip("no PostgreSQL server (see the TestMain message)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, server.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

var tableSeq atomic.Int64

// newTable creates a table of items for the test, and its publication informer_<table>.
func newTable(t testing.TB, c *pgx.Conn) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", tableSeq.Add(1), strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name())))
	if len(name) > 40 {
		name = name[:40]
	}
	exec(t, c, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, name text NOT NULL, value text NOT NULL, extra text);
CREATE PUBLICATION informer_%s FOR TABLE %s`, name, name, name))
	return name
}

func exec(t testing.TB, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// newSource returns a source over table, closed when the test ends.
func newSource(t testing.TB, table string, edit ...func(*postgres.Config[*item])) *postgres.Source[*item] {
	t.Helper()
	cfg := postgres.Config[*item]{ConnString: server.URL, Table: table, StatusInterval: 100 * time.Millisecond}
	for _, e := range edit {
		e(&cfg)
	}
	src, err := postgres.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// firstPage fills a new table with rows rows (value "v<id>"), and returns a connection,
// the table's name, a source over it (edited by edit) and the first page of a list in pages
// of limit rows.
func firstPage(t *testing.T, rows, limit int, edit ...func(*postgres.Config[*item])) (*pgx.Conn, string, *postgres.Source[*item], informer.List[*item]) {
	t.Helper()
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'n', 'v'||i FROM generate_series(1, $1::int) i", rows)
	src := newSource(t, name, edit...)
	l, err := src.List(t.Context(), informer.ListOptions{Limit: int64(limit)})
	if err != nil {
		t.Fatal(err)
	}
	return c, name, src, l
}

// run starts an informer over src with a recorder, and waits for its first sync.
func run(t testing.TB, src *postgres.Source[*item], edit ...func(*informer.Options[int64, *item])) (*informer.Informer[int64, *item], *informertest.Recorder[*item]) {
	t.Helper()
	opts := informer.Options[int64, *item]{Key: itemKey, Name: t.Name(), Logger: slog.New(slog.DiscardHandler),
		ErrorHandler: func(err error) { t.Logf("informer error: %v", err) }}
	for _, e := range edit {
		e(&opts)
	}
	inf, err := informer.New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := informertest.NewRecorder(describe).WithTimeout(time.Minute)
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := informer.WaitForCacheSync(sctx, inf); err != nil {
		t.Fatal("informer did not sync")
	}
	return inf, rec
}

// table reads the table as id → value.
func table(t testing.TB, c *pgx.Conn, name string) map[int64]string {
	t.Helper()
	rows, err := c.Query(context.Background(), "SELECT id, value FROM "+name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	var id int64
	var v string
	_, err = pgx.ForEachRow(rows, []any{&id, &v}, func() error { out[id] = v; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cache reads the informer's cache as id → value.
func cache(inf *informer.Informer[int64, *item]) map[int64]string {
	out := map[int64]string{}
	for k, v := range inf.All() {
		out[k] = v.Value
	}
	return out
}

// caughtUp waits until the informer has reached the server's current WAL position, then
// checks that its cache equals SELECT * of the table.
func caughtUp(t testing.TB, c *pgx.Conn, inf *informer.Informer[int64, *item], name string) {
	t.Helper()
	var lsn string
	if err := c.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := inf.WaitForRevision(ctx, lsn); err != nil {
		t.Fatalf("informer did not reach %s: %v (at %s)", lsn, err, inf.Snapshot().Revision())
	}
	want, got := table(t, c, name), cache(inf)
	if !maps.Equal(want, got) {
		t.Fatalf("cache at %s differs from SELECT * (%d rows, cache %d):\n%s", inf.Snapshot().Revision(), len(want), len(got), diff(want, got))
	}
}

func diff(want, got map[int64]string) string {
	var b strings.Builder
	n := 0
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			if n++; n <= 10 {
				fmt.Fprintf(&b, "  %d: table %.40q, cache %.40q (present %v)\n", k, v, g, ok)
			}
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			if n++; n <= 10 {
				fmt.Fprintf(&b, "  %d: not in the table, cache %.40q\n", k, v)
			}
		}
	}
	return b.String()
}

// withBadExtra makes the source's decoder fail on rows whose extra is "bad".
func withBadExtra(cfg *postgres.Config[*item]) {
	d, err := postgres.StructDecoder[*item]()
	if err != nil {
		panic(err)
	}
	cfg.Decode = func(r *postgres.Row) (*item, error) {
		it, err := d(r)
		if err == nil && it.Extra != nil && *it.Extra == "bad" {
			return nil, errors.New(`extra is "bad"`)
		}
		return it, err
	}
}
