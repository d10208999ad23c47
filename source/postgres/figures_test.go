package postgres_test

import (
	"context"
	"flag"
	"log/slog"
	osexec "os/exec"
	"runtime"
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
// of 100,000 rows of about 1 KiB against one SELECT * of them through pgx ("sync"); the
// latency from commit to handler at 1,000 commits/s and the WAL the slot retains
// meanwhile ("latency"). It runs only with -figures.
func TestFigures(t *testing.T) {
	if !*figures {
		t.Skip("run with -figures")
	}
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" SELECT i, 'name-'||i, repeat(md5(i::text), 30), NULL FROM generate_series(1, 100000) i")
	exec(t, c, "VACUUM ANALYZE "+name)
	t.Run("sync", func(t *testing.T) { figureSync(t, c, name) })
	t.Run("latency", func(t *testing.T) { figureLatency(t, name) })
}

// figureSync times, in seven interleaved rounds, one SELECT * of the table through pgx
// (decoded into the same struct) on an open connection and on a new one, the source's
// List alone (every page) and an informer's first sync, and reports the medians and
// their ratios.
func figureSync(t *testing.T, c *pgx.Conn, name string) {
	ctx := context.Background()
	// selectOn reads the whole table on conn with one SELECT *, decoded into the same struct.
	selectOn := func(conn *pgx.Conn) {
		rows, err := conn.Query(ctx, "SELECT * FROM "+name)
		if err != nil {
			t.Fatal(err)
		}
		items, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[item])
		if err != nil || len(items) != 100_000 {
			t.Fatalf("%d rows, %v", len(items), err)
		}
	}
	selectAll := func() time.Duration {
		start := time.Now()
		selectOn(c)
		return time.Since(start)
	}
	// selectNew is what a program that loads the table at its start does: connect, then
	// SELECT *. Like the informer's list, it reads the table through a server process
	// that has not read it before.
	selectNew := func() time.Duration {
		start := time.Now()
		nc, err := pgx.Connect(ctx, server.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close(ctx)
		selectOn(nc)
		return time.Since(start)
	}
	syncOnce := func() time.Duration {
		src := newSource(t, name)
		inf, err := informer.New(src, informer.Options[int64, *item]{Key: itemKey, Name: "figures", Logger: slog.New(slog.DiscardHandler)})
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
		var items []*item // kept, as SELECT * keeps its rows: the heap grows alike
		for cont := ""; ; {
			l, err := src.List(ctx, informer.ListOptions{Limit: postgres.DefaultPageSize, Continue: cont})
			if err != nil {
				t.Fatal(err)
			}
			items = append(items, l.Items...)
			if cont = l.Continue; cont == "" {
				break
			}
		}
		if len(items) != 100_000 {
			t.Fatalf("listed %d rows", len(items))
		}
		return time.Since(start)
	}
	// settled waits until the server has dropped the temporary slots of the sources
	// closed, and their processes have ended: the next measure must not share the
	// server with their teardown.
	settled := func() {
		deadline := time.Now().Add(time.Minute)
		for {
			var n int
			if err := c.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender')").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d slots and walsenders left a minute after the sources closed", n)
			}
			time.Sleep(10 * time.Millisecond) // polling the server's state, with a deadline
		}
	}
	const rounds = 7
	var sel, seln, syn, lis []time.Duration
	for range rounds {
		runtime.GC() // each measure starts without the last one's garbage
		sel = append(sel, selectAll())
		runtime.GC()
		seln = append(seln, selectNew())
		runtime.GC()
		syn = append(syn, syncOnce())
		settled()
		runtime.GC()
		lis = append(lis, listOnce())
		settled()
	}
	ms := func(ds []time.Duration) string {
		var b strings.Builder
		for i, d := range ds {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(strconv.FormatInt(d.Milliseconds(), 10))
		}
		return b.String()
	}
	t.Logf("SELECT * through pgx, ms: %s", ms(sel))
	t.Logf("connect and SELECT *, ms: %s", ms(seln))
	t.Logf("informer sync, ms:       %s", ms(syn))
	t.Logf("the source's List, ms:   %s", ms(lis))
	med := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	t.Logf("the source's List alone: %v (%.2f× SELECT *)", med(lis).Round(time.Millisecond), float64(med(lis))/float64(med(sel)))
	t.Logf("initial sync of 100,000 rows of ~1 KiB: informer %v, SELECT * through pgx %v (medians of %d): %.2f×", med(syn).Round(time.Millisecond), med(sel).Round(time.Millisecond), rounds, float64(med(syn))/float64(med(sel)))
	t.Logf("against connect and SELECT * %v: %.2f×", med(seln).Round(time.Millisecond), float64(med(syn))/float64(med(seln)))
	t.Logf("load: %s", uptime())
}

// figureLatency commits single-row updates at 1,000 commits/s for 5 s, paced by an
// absolute schedule over several writer connections, and reports the latency from the
// start of each commit's statement to the handler, and the WAL the slot retained.
func figureLatency(t *testing.T, name string) {
	ctx := context.Background()
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
	const (
		rate     = 1000 // commits per second
		duration = 5 * time.Second
		writers  = 8
		total    = int(rate * duration / time.Second)
	)
	// Commit i is due at start + i/rate, on writer i mod writers: a writer that falls
	// behind its schedule commits at once until it has caught up.
	start := time.Now().Add(50 * time.Millisecond)
	errs := make(chan error, writers)
	for w := range writers {
		wc := connect(t)
		exec(t, wc, "SET synchronous_commit = on") // the test server's default is off: commits would wait for the WAL writer
		go func() {
			for i := w; i < total; i += writers {
				time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
				if _, err := wc.Exec(ctx, "UPDATE "+name+" SET name = $1 WHERE id = $2", strconv.FormatInt(time.Now().UnixNano(), 10), i%100_000+1); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	caughtUpCount(t, &mu, &lat, total)
	close(stop)
	<-sampled
	slices.Sort(lat)
	t.Logf("commit to handler at %d commits in %v (%.0f/s, %d writer connections): p50 %v, p99 %v, max %v", total, took.Round(time.Millisecond), float64(total)/took.Seconds(), writers,
		lat[len(lat)/2].Round(10*time.Microsecond), lat[len(lat)*99/100].Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	t.Logf("WAL retained by the slot while running: at most %d KiB behind restart_lsn, %d KiB behind confirmed_flush_lsn (status every 100 ms)", maxRetained>>10, maxUnconfirmed>>10)
	t.Logf("load: %s", uptime())
}

func uptime() string {
	out, _ := osexec.Command("uptime").Output()
	return strings.TrimSpace(string(out))
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
