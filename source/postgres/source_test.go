package postgres_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/informer-go/informer"
)

// A list reads the table in pages at the slot's consistent point; the watch then
// delivers inserts, updates and deletes, and the cache equals SELECT * after each.
func TestListThenWatchMatchesTable(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'n'||i, 'v'||i FROM generate_series(1, 250) i")
	src := newSource(t, name)
	inf, rec := run(t, src, func(o *informer.Options[int64, *item]) { o.PageSize = 100 })
	if got := len(rec.WaitFor(t, 250)); got != 250 {
		t.Fatalf("%d initial adds, want 250", got)
	}
	caughtUp(t, c, inf, name)
	rec.Reset()

	exec(t, c, "INSERT INTO "+name+" VALUES (1000, 'a', 'x')")
	exec(t, c, "UPDATE "+name+" SET value = 'y' WHERE id = 1000")
	exec(t, c, "DELETE FROM "+name+" WHERE id = 1000")
	exec(t, c, "UPDATE "+name+" SET value = 'z' WHERE id = 7")
	// A delete carries the key only (the default replica identity): OnDelete receives the
	// state the informer held.
	rec.Expect(t, "add 1000=x", "update 1000=x→y", "delete 1000=y", "update 7=v7→z")
	caughtUp(t, c, inf, name)

	// Several rows in one transaction, a key changed by an update.
	rec.Reset()
	exec(t, c, "BEGIN; DELETE FROM "+name+" WHERE id <= 2; UPDATE "+name+" SET id = 2000 WHERE id = 6; INSERT INTO "+name+" VALUES (3000, 'b', 'w'); COMMIT")
	rec.Expect(t, "delete 1=v1", "delete 2=v2", "delete 6=v6", "add 2000=v6", "add 3000=w")
	caughtUp(t, c, inf, name)
	if _, ok := inf.Get(6); ok {
		t.Fatal("the row whose key changed from 6 is still in the cache under 6")
	}
}

// A 10,000-row transaction reaches readers whole under its revision: every snapshot
// labelled with the transaction's revision or a later one holds all its rows, and
// WaitForRevision with the LSN of its commit returns only once all are in the cache.
func TestLargeTransactionIsAtomic(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	src := newSource(t, name)
	inf, _ := run(t, src)

	type sample struct {
		rev string
		n   int
	}
	samples := make(chan []sample, 1)
	go func() {
		var seen []sample
		last := sample{n: -1}
		for {
			sn := inf.Snapshot()
			s := sample{sn.Revision(), sn.Len()}
			if s != last {
				seen, last = append(seen, s), s
			}
			if s.n == 10_000 {
				samples <- seen
				return
			}
		}
	}()
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'n'||i, 'v'||i FROM generate_series(1, 10000) i")
	var lsn string
	if err := c.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := inf.WaitForRevision(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	if n := inf.Snapshot().Len(); n != 10_000 {
		t.Fatalf("at %s (after the commit) the cache holds %d rows, want 10000", inf.Snapshot().Revision(), n)
	}
	seen := <-samples
	full := seen[len(seen)-1].rev // the first revision at which the snapshot held it all
	for _, s := range seen {
		if s.n != 0 && s.n != 10_000 {
			if cmp, _ := src.CompareRevisions(s.rev, full); cmp >= 0 {
				t.Fatalf("a snapshot labelled %s holds %d of the transaction's rows; it was whole only at %s", s.rev, s.n, full)
			}
		}
	}
	t.Logf("%d distinct (revision, rows) states seen by a reader; the transaction whole at %s", len(seen), full)
	caughtUp(t, c, inf, name)
}

// SourceID names the server (system identifier and timeline), the database and the table.
func TestSourceIDNamesServerTimelineDatabaseTable(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	var want string
	err := c.QueryRow(context.Background(), `SELECT 'postgres:' || system_identifier || '/' || (SELECT timeline_id FROM pg_control_checkpoint()) || '/' || current_database() || '/' || $1::text FROM pg_control_system()`, name).Scan(&want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := newSource(t, name).SourceID(context.Background())
	if err != nil || got != want {
		t.Fatalf("SourceID = %q, %v; want %q", got, err, want)
	}
}

// A watch given a timeout ends cleanly (io.EOF) once it has passed, and the next watch
// from the same revision reads on from the same slot: no relist.
func TestWatchTimeoutEndsAndResumes(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	src := newSource(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := src.List(ctx, informer.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := src.Watch(ctx, informer.WatchOptions{Revision: l.Revision, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(); err != io.EOF {
		t.Fatalf("Next after the timeout: %v, want io.EOF", err)
	}
	w.Stop()
	w, err = src.Watch(ctx, informer.WatchOptions{Revision: l.Revision})
	if err != nil {
		t.Fatalf("watch again from %s: %v", l.Revision, err)
	}
	defer w.Stop()
	exec(t, c, "INSERT INTO "+name+" VALUES (1, 'n', 'a')")
	ev, err := w.Next()
	if err != nil || ev.Type != informer.Added || ev.Object.ID != 1 {
		t.Fatalf("Next: %v %+v, %v", ev.Type, ev.Object, err)
	}
}

// A list is one snapshot: rows changed while its pages are read are listed as they were
// at its revision, and the watch from that revision delivers the changes.
func TestListIsOneSnapshotAcrossPages(t *testing.T) {
	c, name, src, l := firstPage(t, 30, 10)
	ctx := t.Context()
	exec(t, c, "UPDATE "+name+" SET value = 'changed' WHERE id > 10")
	exec(t, c, "INSERT INTO "+name+" VALUES (31, 'n', 'new')")
	items := l.Items
	for cont := l.Continue; cont != ""; {
		p, err := src.List(ctx, informer.ListOptions{Limit: 10, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		if p.Revision != l.Revision {
			t.Fatalf("page at %s, the first at %s", p.Revision, l.Revision)
		}
		items, cont = append(items, p.Items...), p.Continue
	}
	if len(items) != 30 {
		t.Fatalf("listed %d rows, want the 30 of the snapshot", len(items))
	}
	for _, it := range items {
		if it.Value != fmt.Sprint("v", it.ID) {
			t.Fatalf("row %d listed as %q, not as at the list's revision", it.ID, it.Value)
		}
	}
	w, err := src.Watch(ctx, informer.WatchOptions{Revision: l.Revision})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for len(got) < 21 {
		ev, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v %d=%s", ev.Type, ev.Object.ID, ev.Object.Value))
	}
	if got[0] != "Modified 11=changed" || got[19] != "Modified 30=changed" || got[20] != "Added 31=new" {
		t.Fatalf("watch after the list: %v", got)
	}
}

// A TRUNCATE of the table makes the informer list again: the cache empties.
func TestTruncateRelists(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'n', 'v'||i FROM generate_series(1, 5) i")
	inf, rec := run(t, newSource(t, name))
	rec.WaitFor(t, 5)
	rec.Reset()
	exec(t, c, "TRUNCATE "+name)
	rec.ExpectNextUnordered(t, "delete?1=v1", "delete?2=v2", "delete?3=v3", "delete?4=v4", "delete?5=v5")
	exec(t, c, "INSERT INTO "+name+" VALUES (9, 'n', 'after')")
	rec.ExpectNext(t, "add 9=after")
	caughtUp(t, c, inf, name)
}
