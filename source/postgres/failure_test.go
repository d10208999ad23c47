package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/postgres"
	"github.com/informer-go/informer/source/postgres/pgtest"
)

// byContent makes an object's content its revision, so that a relist delivers only the
// rows that changed.
func byContent(o *informer.Options[int64, *item]) {
	o.Revision = func(it *item) string { return fmt.Sprintf("%s/%s/%v", it.Name, it.Value, it.Extra) }
}

// terminate ends the backends of the test's database that stream from a slot, and
// returns how many it ended.
func terminate(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	err := c.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE active_pid IS NOT NULL`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The replication connection cut (pg_terminate_backend): the temporary slot goes with
// it, the informer lists again and its handlers receive only what changed meanwhile.
func TestReplicationConnectionCut(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'n', 'v'||i FROM generate_series(1, 50) i")
	inf, rec := run(t, newSource(t, name), byContent)
	rec.WaitFor(t, 50)
	caughtUp(t, c, inf, name)
	rec.Reset()
	if n := terminate(t, c); n != 1 {
		t.Fatalf("%d replication backends ended, want 1", n)
	}
	exec(t, c, "UPDATE "+name+" SET value = 'changed' WHERE id = 3")
	exec(t, c, "DELETE FROM "+name+" WHERE id = 4")
	exec(t, c, "INSERT INTO "+name+" VALUES (100, 'n', 'new')")
	rec.ExpectNextUnordered(t, "update 3=v3→changed", "delete?4=v4", "add 100=new")
	caughtUp(t, c, inf, name)
}

// A named slot dropped from outside while the informer streams from it: the watch
// fails with ErrExpired, the informer lists again (a new slot) and its handlers receive
// only the differences.
func TestNamedSlotDroppedFromOutside(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	slot := "informer_dropped"
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'n', 'v'||i FROM generate_series(1, 50) i")
	inf, rec := run(t, newSource(t, name, func(cfg *postgres.Config[*item]) { cfg.Slot = slot }), byContent)
	rec.WaitFor(t, 50)
	caughtUp(t, c, inf, name)
	rec.Reset()
	informertest.Eventually(t, time.Minute, func() bool {
		terminate(t, c)
		_, err := c.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot)
		return err == nil
	}, "slot %s not dropped", slot)
	exec(t, c, "UPDATE "+name+" SET value = 'changed' WHERE id = 3")
	exec(t, c, "INSERT INTO "+name+" VALUES (100, 'n', 'new')")
	rec.ExpectNextUnordered(t, "update 3=v3→changed", "add 100=new")
	caughtUp(t, c, inf, name)
	t.Cleanup(func() { _ = postgres.DropSlot(context.Background(), server.URL, slot) })
}

// PostgreSQL crashes and restarts (pg_ctl -m immediate) while the informer watches: the
// informer lists again once the server is back, and converges.
func TestServerCrashWhileWatching(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'n', 'v'||i FROM generate_series(1, 50) i")
	inf, rec := run(t, newSource(t, name), byContent, func(o *informer.Options[int64, *item]) {
		o.Backoff = informer.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	})
	rec.WaitFor(t, 50)
	caughtUp(t, c, inf, name)
	rec.Reset()
	if err := server.Restart("immediate"); err != nil {
		t.Fatal(err)
	}
	c = connect(t)
	exec(t, c, "UPDATE "+name+" SET value = 'after' WHERE id = 7")
	rec.ExpectNextUnordered(t, "update 7=v7→after")
	caughtUp(t, c, inf, name)
}

// wal_level below logical, and a publication that is missing or does not publish the
// table: List fails with an error that says what to run.
func TestMisconfigurationSaysWhatToRun(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "CREATE TABLE "+name+"_nopub (id bigint PRIMARY KEY, name text, value text, extra text)")
	exec(t, c, "CREATE PUBLICATION informer_"+name+"_other FOR TABLE "+name)
	for _, tc := range []struct {
		table, publication, want string
	}{
		{name + "_nopub", "", "postgres " + name + "_nopub: publication informer_" + name + "_nopub does not exist: run CREATE PUBLICATION \"informer_" + name + "_nopub\" FOR TABLE \"" + name + "_nopub\"; as the table's owner"},
		{name + "_nopub", "informer_" + name + "_other", "postgres " + name + "_nopub: publication informer_" + name + "_other does not publish table \"" + name + "_nopub\": run ALTER PUBLICATION \"informer_" + name + "_other\" ADD TABLE \"" + name + "_nopub\"; as the table's owner"},
	} {
		src := newSource(t, tc.table, func(cfg *postgres.Config[*item]) { cfg.Publication = tc.publication })
		_, err := src.List(context.Background(), informer.ListOptions{})
		if err == nil || err.Error() != tc.want {
			t.Errorf("List:\n got %v\nwant %s", err, tc.want)
		}
	}

	<-replicaReady
	if replicaErr != nil {
		t.Fatal(replicaErr)
	}
	src, err := postgres.New(postgres.Config[*item]{ConnString: replicaServer.URL, Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	_, err = src.List(context.Background(), informer.ListOptions{})
	want := "postgres t: wal_level is replica, logical replication needs logical: run ALTER SYSTEM SET wal_level = logical; then restart the server"
	if err == nil || err.Error() != want {
		t.Fatalf("List:\n got %v\nwant %s", err, want)
	}
}

// A named slot survives the source: a new source on it watches from the revision the
// first one reached and receives exactly what changed meanwhile; DropSlot removes it.
func TestNamedSlotResumes(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	slot := "informer_resume"
	exec(t, c, "INSERT INTO "+name+" VALUES (1, 'n', 'a')")
	withSlot := func(cfg *postgres.Config[*item]) { cfg.Slot = slot }
	first := newSource(t, name, withSlot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := first.List(ctx, informer.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := first.Watch(ctx, informer.WatchOptions{Revision: l.Revision})
	if err != nil {
		t.Fatal(err)
	}
	exec(t, c, "UPDATE "+name+" SET value = 'b' WHERE id = 1")
	ev, err := w.Next()
	if err != nil || ev.Type != informer.Modified || ev.Object.Value != "b" {
		t.Fatalf("first source: %v %+v, %v", ev.Type, ev.Object, err)
	}
	w.Stop()
	_ = first.Close()
	exec(t, c, "UPDATE "+name+" SET value = 'c' WHERE id = 1")
	exec(t, c, "INSERT INTO "+name+" VALUES (2, 'n', 'd')")

	second := newSource(t, name, withSlot)
	w, err = second.Watch(ctx, informer.WatchOptions{Revision: ev.Revision})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for len(got) < 2 {
		ev, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v %d=%s", ev.Type, ev.Object.ID, ev.Object.Value))
	}
	if want := "Modified 1=c, Added 2=d"; strings.Join(got, ", ") != want {
		t.Fatalf("second source received %s, want %s", strings.Join(got, ", "), want)
	}
	// A revision before the one the slot confirmed is refused, not silently skipped.
	w.Stop()
	_ = second.Close()
	third := newSource(t, name, withSlot)
	_, err = third.Watch(ctx, informer.WatchOptions{Revision: l.Revision})
	if !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("watch from before the slot's confirmed position: %v, want ErrExpired", err)
	}
	_ = third.Close()
	if err := postgres.DropSlot(ctx, server.URL, slot); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil || n != 0 {
		t.Fatalf("slot %s still there (%d, %v)", slot, n, err)
	}
}

// A failover to a promoted standby is another history. The standby (a base backup of
// the primary, streaming its WAL) is promoted onto a new timeline while the informer
// reads the primary; each server then takes writes the other never sees, and the
// primary stops. The informer's connection string names both servers and asks for the
// writable one, so it reaches the standby: the watch on its named slot finds another
// timeline and fails with ErrOtherHistory, which the informer reports, and the informer
// lists the new server, its handlers receiving exactly the rows that differ.
func TestFailoverToPromotedStandbyRelists(t *testing.T) {
	connect(t) // skips without a server
	primary, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	pc := connectTo(t, primary.URL)
	name := newTable(t, pc)
	exec(t, pc, "INSERT INTO "+name+" SELECT i, 'n', 'v'||i FROM generate_series(1, 20) i")
	standby, err := primary.StartStandby()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })

	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", primary.Port, standby.Port)
	src := newSource(t, name, func(cfg *postgres.Config[*item]) { cfg.ConnString, cfg.Slot = url, "informer_failover" })
	otherHistory := make(chan error, 16)
	inf, rec := run(t, src, byContent, func(o *informer.Options[int64, *item]) {
		o.Backoff = informer.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
		o.ErrorHandler = func(err error) {
			if errors.Is(err, informer.ErrOtherHistory) {
				select {
				case otherHistory <- err:
				default:
				}
			}
		}
	})
	rec.WaitFor(t, 20)
	caughtUp(t, pc, inf, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := src.SourceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.Reset()

	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	exec(t, pc, "UPDATE "+name+" SET value = 'primary' WHERE id = 1")
	exec(t, pc, "INSERT INTO "+name+" VALUES (100, 'n', 'primary')")
	rec.ExpectNextUnordered(t, "update 1=v1→primary", "add 100=primary")
	caughtUp(t, pc, inf, name)
	sc := connectTo(t, standby.URL)
	exec(t, sc, "UPDATE "+name+" SET value = 'standby' WHERE id = 2")
	exec(t, sc, "DELETE FROM "+name+" WHERE id = 3")
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}

	rec.ExpectNextUnordered(t, "update 1=primary→v1", "delete?100=primary", "update 2=v2→standby", "delete?3=v3")
	caughtUp(t, sc, inf, name)
	select {
	case err := <-otherHistory:
		if !strings.Contains(err.Error(), "(restored or promoted): list again") {
			t.Fatalf("the informer reported %v, want the server restored or promoted", err)
		}
	default:
		t.Fatal("the informer reported no error matching ErrOtherHistory")
	}
	after, err := src.SourceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sys, _, _ := strings.Cut(before, "/"); after == before || !strings.HasPrefix(after, sys+"/") {
		t.Fatalf("SourceID %s after the failover, %s before: want the same system on another timeline", after, before)
	}
}

// connectTo returns a connection to url, closed when the test ends.
func connectTo(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
