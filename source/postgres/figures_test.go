package postgres_test

import (
	"context"
	"flag"
	osexec "os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/postgres"
)

var figures = flag.Bool("figures", false, "measure the figures of the README (about a minute)")

// TestFigures measures, in one run against the test server: the informer's initial sync
// of 100,000 rows of about 1 KiB against one SELECT * of them through pgx; the latency
// from commit to handler at 1,000 commits/s; and the WAL the slot retains meanwhile.
// It runs only with -figures.
func TestFigures(t *testing.T) {
	if !*figures {
		t.Skip("run with -figures")
	}
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'name-'||i, repeat(md5(i::text), 30), NULL FROM generate_series(1, 100000) i")
	exec(t, c, "VACUUM ANALYZE "+name)
	ctx := context.Background()

	selectAll := func() time.Duration {
		start := time.Now()
		rows, err := c.Query(ctx, "SELECT * FROM "+name)
		if err != nil {
			t.Fatal(err)
		}
		items, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[item])
		if err != nil || len(items) != 100_000 {
			t.Fatalf("%d rows, %v", len(items), err)
		}
		return time.Since(start)
	}
	syncOnce := func() time.Duration {
		src := newSource(t, name)
		inf, err := informer.New(src, informer.Options[int64, *item]{Key: itemKey, Name: "figures"})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		start := time.Now()
		done := make(chan struct{})
		go func() { defer close(done); _ = inf.Run(rctx) }()
		<-inf.Synced()
		d := time.Since(start)
		cancel()
		<-done
		_ = src.Close()
		if inf.Len() != 100_000 {
			t.Fatalf("synced %d rows", inf.Len())
		}
		return d
	}
	listOnce := func() time.Duration {
		src := newSource(t, name)
		defer src.Close()
		start := time.Now()
		n, cont := 0, ""
		for {
			l, err := src.List(ctx, informer.ListOptions{Limit: postgres.DefaultPageSize, Continue: cont})
			if err != nil {
				t.Fatal(err)
			}
			n += len(l.Items)
			if cont = l.Continue; cont == "" {
				break
			}
		}
		if n != 100_000 {
			t.Fatalf("listed %d rows", n)
		}
		return time.Since(start)
	}
	var sel, syn, lis []time.Duration
	for range 3 {
		sel = append(sel, selectAll())
		syn = append(syn, syncOnce())
		lis = append(lis, listOnce())
	}
	slices.Sort(sel)
	slices.Sort(syn)
	slices.Sort(lis)
	t.Logf("the source's List alone: %v (%.2f× SELECT *)", lis[1].Round(time.Millisecond), float64(lis[1])/float64(sel[1]))
	t.Logf("initial sync of 100,000 rows of ~1 KiB: informer %v, SELECT * through pgx %v (medians of 3): %.2f×", syn[1].Round(time.Millisecond), sel[1].Round(time.Millisecond), float64(syn[1])/float64(sel[1]))

	// Latency and WAL retained at 1,000 commits/s for 5 s.
	src := newSource(t, name)
	var mu sync.Mutex
	var lat []time.Duration
	inf, _ := run(t, src)
	if _, err := inf.AddHandler(informer.HandlerFuncs[*item]{UpdateFunc: func(_, it *item) {
		if ns, err := strconv.ParseInt(it.Name, 10, 64); err == nil {
			mu.Lock()
			lat = append(lat, time.Since(time.Unix(0, ns)))
			mu.Unlock()
		}
	}}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	w := connect(t)
	exec(t, w, "SET synchronous_commit = on") // the test server's default is off: commits would wait for the WAL writer
	stop := make(chan struct{})
	var maxRetained, maxUnconfirmed int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		s := connectNoCleanup(t)
		defer s.Close(ctx)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var retained, unconfirmed int64
			if err := s.QueryRow(ctx, `SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), 0)::bigint,
  coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)), 0)::bigint FROM pg_replication_slots`).Scan(&retained, &unconfirmed); err == nil {
				maxRetained, maxUnconfirmed = max(maxRetained, retained), max(maxUnconfirmed, unconfirmed)
			}
		}
	}()
	tick := time.NewTicker(time.Millisecond)
	n := 0
	for start := time.Now(); time.Since(start) < 5*time.Second; n++ {
		<-tick.C
		if _, err := w.Exec(ctx, "UPDATE "+name+" SET name = $1 WHERE id = $2", strconv.FormatInt(time.Now().UnixNano(), 10), n%100_000+1); err != nil {
			t.Fatal(err)
		}
	}
	tick.Stop()
	caughtUpCount(t, &mu, &lat, n)
	close(stop)
	<-sampled
	slices.Sort(lat)
	load, _ := osexec.Command("uptime").Output()
	t.Logf("commit to handler at %d commits in 5 s: p50 %v, p99 %v, max %v", n, lat[len(lat)/2].Round(10*time.Microsecond), lat[len(lat)*99/100].Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	t.Logf("WAL retained by the slot while running: at most %d KiB behind restart_lsn, %d KiB behind confirmed_flush_lsn (status every 100 ms)", maxRetained>>10, maxUnconfirmed>>10)
	t.Logf("load: %s", strings.TrimSpace(string(load)))
}

func caughtUpCount(t *testing.T, mu *sync.Mutex, lat *[]time.Duration, n int) {
	informertest.Eventually(t, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(*lat) >= n
	}, "handler did not see %d updates", n)
}

func connectNoCleanup(t *testing.T) *pgx.Conn {
	c, err := pgx.Connect(context.Background(), server.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
