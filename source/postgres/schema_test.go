package postgres_test

import (
	"testing"
	"time"
)

// A column dropped and one added while the informer runs: the Relation messages give the
// new shape, rows decode by name, and the added column reaches the cache.
func TestColumnsAddedAndDroppedWhileRunning(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" VALUES (1, 'a', 'x', 'e1')")
	inf, _ := run(t, newSource(t, name))
	caughtUp(t, c, inf, name)

	exec(t, c, "ALTER TABLE "+name+" DROP COLUMN extra")
	exec(t, c, "INSERT INTO "+name+" VALUES (2, 'b', 'y')")
	exec(t, c, "UPDATE "+name+" SET value = 'x2' WHERE id = 1")
	caughtUp(t, c, inf, name)
	if it, _ := inf.Get(1); it.Extra != nil {
		t.Fatalf("row 1 keeps the dropped column's value %q", *it.Extra)
	}

	exec(t, c, "ALTER TABLE "+name+" ADD COLUMN extra text, ADD COLUMN colour text")
	exec(t, c, "INSERT INTO "+name+" VALUES (3, 'c', 'z', 'e3', 'red')")
	caughtUp(t, c, inf, name)
	if it, _ := inf.Get(3); it.Extra == nil || *it.Extra != "e3" {
		t.Fatalf("row 3's added column: %v", it.Extra)
	}
}

// An update that leaves a TOASTed column unchanged does not send it: the cache keeps the
// 10 KB value, whether the row was listed or inserted while watching, and one of 1.5 KB
// (not kept by the source) is read back from the table.
func TestUnchangedToastedColumnKept(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "ALTER TABLE "+name+" ALTER COLUMN value SET STORAGE EXTERNAL, ALTER COLUMN extra SET STORAGE EXTERNAL")
	big := "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 320))" // 10,240 bytes
	exec(t, c, "INSERT INTO "+name+" VALUES (1, 'a', "+big+")")
	inf, _ := run(t, newSource(t, name))
	caughtUp(t, c, inf, name)

	exec(t, c, "INSERT INTO "+name+" VALUES (2, 'b', "+big+")")
	exec(t, c, "INSERT INTO "+name+" VALUES (3, 'c', repeat('q', 1500), repeat('r', 1500))")
	caughtUp(t, c, inf, name)
	exec(t, c, "UPDATE "+name+" SET name = 'a2' WHERE id = 1")
	exec(t, c, "UPDATE "+name+" SET name = 'b2' WHERE id = 2")
	exec(t, c, "UPDATE "+name+" SET name = 'c2' WHERE id = 3")
	caughtUp(t, c, inf, name)
	for id, want := range map[int64]string{1: "a2", 2: "b2", 3: "c2"} {
		if it, _ := inf.Get(id); it.Name != want || len(it.Value) < 1500 {
			t.Fatalf("row %d: name %q, value of %d bytes", id, it.Name, len(it.Value))
		}
	}
	// A changed big value replaces the kept one.
	exec(t, c, "UPDATE "+name+" SET value = "+big+" WHERE id = 1")
	exec(t, c, "UPDATE "+name+" SET name = 'a3' WHERE id = 1")
	caughtUp(t, c, inf, name)
}

// The decoder's failures: a row it cannot read is reported with the table and the key,
// left out of the cache (a row that turns bad leaves it too), and enters it once fixed.
func TestUndecodableRowReportedAndConverges(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" VALUES (1, 'a', 'x', 'ok'), (2, 'b', 'y', 'bad')")
	errs := make(chan error, 16)
	src := newSource(t, name, withBadExtra)
	src.ReportErrorsTo(func(err error) { errs <- err })
	inf, _ := run(t, src)
	wantErr(t, errs, `postgres `+name+`: row (id=2) cannot be decoded, left out of the cache until it changes: extra is "bad"`)
	if _, ok := inf.Get(2); ok || inf.Len() != 1 {
		t.Fatalf("cache holds %d rows, the bad one %v", inf.Len(), ok)
	}
	exec(t, c, "UPDATE "+name+" SET extra = 'bad' WHERE id = 1")
	wantErr(t, errs, `postgres `+name+`: row (id=1) cannot be decoded, left out of the cache until it changes: extra is "bad"`)
	exec(t, c, "UPDATE "+name+" SET extra = 'ok'")
	caughtUp(t, c, inf, name)
}

func wantErr(t *testing.T, errs chan error, want string) {
	t.Helper()
	select {
	case err := <-errs:
		if err.Error() != want {
			t.Fatalf("error:\n got %s\nwant %s", err, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no error reported, want %s", want)
	}
}
