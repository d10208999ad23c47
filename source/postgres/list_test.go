package postgres_test

import (
	"context"
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
