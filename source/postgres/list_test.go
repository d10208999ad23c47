package postgres_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/postgres"
)

// A list's pages stream from one query on the slot's snapshot: the server keeps no copy
// of a page (a cursor's FETCH would store each page in a temporary file past work_mem,
// which temp_file_limit = 0 refuses), and each page says how many bytes of row data it
// read.
func TestListPagesStreamWithoutServerCopies(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'name-'||i, repeat(md5(i::text), 30), CASE WHEN i % 2 = 0 THEN 'x' END FROM generate_series(1, 2000) i")
	var want int64
	if err := c.QueryRow(context.Background(), `SELECT sum(octet_length(id::text) + octet_length(name) + octet_length(value) + coalesce(octet_length(extra), 0))::bigint FROM `+name).Scan(&want); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, name, func(cfg *postgres.Config[*item]) {
		cfg.ConnString += "&work_mem=64&temp_file_limit=0" // 64 kB, no temporary file at all
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rows, size int64
	pages := 0
	for cont := ""; ; {
		l, err := src.List(ctx, informer.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if l.Bytes <= 0 && len(l.Items) > 0 {
			t.Fatalf("page %d of %d rows reports %d bytes", pages, len(l.Items), l.Bytes)
		}
		rows, size = rows+int64(len(l.Items)), size+l.Bytes
		if cont = l.Continue; cont == "" {
			break
		}
	}
	if rows != 2000 || size != want {
		t.Fatalf("listed %d rows of %d bytes in %d pages, want 2000 rows of %d bytes (the text of their values)", rows, size, pages, want)
	}
}

// The source reads each page while the one before is taken in, with the first page's
// Limit: a later call with a smaller Limit still receives that many rows and no row twice,
// a call whose context ends ends the list, and the source's Close stops the reader ahead.
func TestListReadsAheadWithinEachCallsLimit(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'name-'||i, 'v', NULL FROM generate_series(1, 1000) i")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	src := newSource(t, name)
	seen := map[int64]bool{}
	var sizes []int
	for cont, limit := "", int64(300); ; limit = 70 {
		l, err := src.List(ctx, informer.ListOptions{Limit: limit, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(l.Items)) > limit {
			t.Fatalf("a call with Limit %d received %d rows", limit, len(l.Items))
		}
		sizes = append(sizes, len(l.Items))
		for _, it := range l.Items {
			if seen[it.ID] {
				t.Fatalf("row %d listed twice", it.ID)
			}
			seen[it.ID] = true
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	// 300, then the rest of each page of 300 in calls of at most 70.
	want := []int{300, 70, 70, 70, 70, 20, 70, 70, 70, 70, 20, 70, 30}
	if len(seen) != 1000 || !slices.Equal(sizes, want) {
		t.Fatalf("listed %d rows in pages of %v, want 1000 in %v", len(seen), sizes, want)
	}

	// A call whose context has ended ends the list; its token is gone.
	l, err := src.List(ctx, informer.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	ended, end := context.WithCancel(ctx)
	end()
	if _, err := src.List(ended, informer.ListOptions{Limit: 100, Continue: l.Continue}); err == nil {
		t.Fatal("a page read under an ended context")
	}
	if _, err := src.List(ctx, informer.ListOptions{Limit: 100, Continue: l.Continue}); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("the list's next page after a cancelled call: %v, want ErrExpired", err)
	}

	// Close with a reader ahead: the package's leak check fails if it does not stop.
	if _, err := src.List(ctx, informer.ListOptions{Limit: 100}); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
}

// A list and the watch that follows it use one connection to the server, a replication
// one: the slot is created in the transaction that reads the table, on that connection,
// and the watch streams on it.
func TestListAndWatchUseOneConnection(t *testing.T) {
	c, name, src, l := firstPage(t, 100, 10, func(cfg *postgres.Config[*item]) { cfg.ConnString += "&application_name=one_connection" })
	ctx := t.Context()
	connections := func() (n int, kinds []string) {
		rows, err := c.Query(ctx, "SELECT backend_type FROM pg_stat_activity WHERE application_name = 'one_connection' ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, k)
		}
		return len(kinds), kinds
	}
	var err error
	if n, kinds := connections(); n != 1 || kinds[0] != "walsender" {
		t.Fatalf("while the list is read the source holds connections %q, want one walsender", kinds)
	}
	for cont := l.Continue; cont != ""; {
		if l, err = src.List(ctx, informer.ListOptions{Limit: 10, Continue: cont}); err != nil {
			t.Fatal(err)
		}
		cont = l.Continue
	}
	w, err := src.Watch(ctx, informer.WatchOptions{Revision: l.Revision})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	exec(t, c, "UPDATE "+name+" SET value = 'w' WHERE id = 1")
	if ev, err := w.Next(); err != nil || ev.Object.Value != "w" {
		t.Fatalf("watch: %v, %v", ev, err)
	}
	if n, kinds := connections(); n != 1 || kinds[0] != "walsender" {
		t.Fatalf("while the watch streams the source holds connections %q, want one walsender", kinds)
	}
}

// A watch that starts before the list was read to its end ends the list, whose query
// holds the connection the watch would stream on: the list's next page and the watch
// both fail with ErrExpired (the temporary slot went with the connection), and a new
// list works.
func TestWatchBeforeTheListEndsEndsIt(t *testing.T) {
	_, _, src, l := firstPage(t, 100, 10)
	ctx := t.Context()
	if _, err := src.Watch(ctx, informer.WatchOptions{Revision: l.Revision}); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("a watch during the list: %v, want ErrExpired", err)
	}
	if _, err := src.List(ctx, informer.ListOptions{Limit: 10, Continue: l.Continue}); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("the list's next page after a watch: %v, want ErrExpired", err)
	}
	if l, err := src.List(ctx, informer.ListOptions{}); err != nil || len(l.Items) != 100 || l.Continue != "" {
		t.Fatalf("a new list: %d rows, continue %q, %v; want the 100 rows", len(l.Items), l.Continue, err)
	}
}
