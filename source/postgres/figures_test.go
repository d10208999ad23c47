package postgres_test

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	osexec "os/exec"
	"runtime"
	"runtime/debug"
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

// figureSync times, in seven rounds, one SELECT * of the table through pgx (decoded into
// the same struct) on an open connection and on a new one, an informer's first sync and
// the source's List alone (every page), each cold and warm (see below), and reports the
// medians and their ratios, with the page faults each measure took.
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
	// Each measure runs twice in a row. Cold, after the heap went back to the operating
	// system: it pays for the memory it touches first, as a program that loads the table
	// at its start does (100,000 rows of 1 KiB take about 28,000 page faults, which cost
	// about 450 ms on this kind of machine). Warm, at once after a collection: it runs in
	// the heap the cold run left, as a relist does. Mixing the two made the figures
	// meaningless: a measure that found the heap of the one before ran three times faster.
	type measure struct {
		name       string
		run        func() time.Duration
		cold, warm []time.Duration
		faults     [2][]int64 // minor page faults of each cold and warm run
	}
	measures := []*measure{
		{name: "SELECT * through pgx", run: selectAll},
		{name: "connect and SELECT *", run: selectNew},
		{name: "informer sync", run: syncOnce},
		{name: "the source's List alone", run: listOnce},
	}
	const rounds = 7
	for range rounds {
		for _, m := range measures {
			for i, d := range []*[]time.Duration{&m.cold, &m.warm} {
				settled()
				if i == 0 {
					debug.FreeOSMemory()
				} else {
					runtime.GC()
				}
				f := minorFaults()
				*d = append(*d, m.run())
				m.faults[i] = append(m.faults[i], minorFaults()-f)
			}
		}
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
	med := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	medi := func(ns []int64) int64 {
		ns = slices.Clone(ns)
		slices.Sort(ns)
		return ns[len(ns)/2]
	}
	for _, m := range measures {
		t.Logf("%-24s cold, ms: %s (median %d page faults)", m.name+",", ms(m.cold), medi(m.faults[0]))
		t.Logf("%-24s warm, ms: %s (median %d page faults)", m.name+",", ms(m.warm), medi(m.faults[1]))
	}
	sel, seln, syn, lis := measures[0], measures[1], measures[2], measures[3]
	for _, c := range []struct {
		name string
		of   func(*measure) []time.Duration
	}{{"cold", func(m *measure) []time.Duration { return m.cold }}, {"warm", func(m *measure) []time.Duration { return m.warm }}} {
		t.Logf("initial sync of 100,000 rows of ~1 KiB, %s: informer %v, SELECT * through pgx %v (medians of %d): %.2f×; against connect and SELECT * %v: %.2f×; the source's List alone %v: %.2f×",
			c.name, med(c.of(syn)).Round(time.Millisecond), med(c.of(sel)).Round(time.Millisecond), rounds, float64(med(c.of(syn)))/float64(med(c.of(sel))),
			med(c.of(seln)).Round(time.Millisecond), float64(med(c.of(syn)))/float64(med(c.of(seln))),
			med(c.of(lis)).Round(time.Millisecond), float64(med(c.of(lis)))/float64(med(c.of(sel))))
	}
	t.Logf("load: %s", uptime())
}

// minorFaults is the number of minor page faults the process has taken, from
// /proc/self/stat; 0 where there is none.
func minorFaults() int64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The fields after the command's name, which ends at the last ')': the minor
	// faults are the eighth of them.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 8 {
		return 0
	}
	n, _ := strconv.ParseInt(f[7], 10, 64)
	return n
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
