package etcd_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// warmLife runs one informer over src that persists to f until stop returns (after Run
// returned: the final save is done).
func warmLife(t *testing.T, src informer.ListerWatcher[*item], f *persist.File[string, *item], errs *testkit.Errors) (inf *informer.Informer[string, *item], rec *informertest.Recorder[*item], stop func()) {
	t.Helper()
	return startStoppableInformer(t, src, informer.Options[string, *item]{
		Persist: f,
		Backoff: informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	}, errs)
}

func waitRev(t *testing.T, inf *informer.Informer[string, *item], rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := inf.WaitForRevision(ctx, etcd.FormatRevision(rev)); err != nil {
		t.Fatalf("WaitForRevision(%d): %v", rev, err)
	}
}

// warmSetup runs a first life over a, b, c under /wr/ and stops it, then changes b,
// deletes c and creates d behind its back. It returns the client, the source, the file
// and the revision of the last change.
func warmSetup(t *testing.T) (*clientv3.Client, *etcd.Source[*item], *persist.File[string, *item], int64) {
	t.Helper()
	_, c := startWithClient(t)
	const p = "/wr/"
	for _, k := range []string{"a", "b", "c"} {
		put(t, c, p+k, "1")
	}
	rev := put(t, c, "/other", "x") // a revision beyond the prefix's last change
	src := newSource(t, c, p, etcd.Options{})
	f, err := persist.New[string, *item](t.TempDir(), persist.Options[*item]{Schema: "v1", Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	errs := new(testkit.Errors)
	inf, rec, stop := warmLife(t, src, f, errs)
	rec.ExpectNext(t, "add*/wr/a=1", "add*/wr/b=1", "add*/wr/c=1")
	waitRev(t, inf, rev)
	stop()
	if e := errs.All(); len(e) != 0 {
		t.Fatalf("first life reported %v", e)
	}
	put(t, c, p+"b", "2")
	del(t, c, p+"c")
	last := put(t, c, p+"d", "1")
	return c, src, f, last
}

// A restart over a real etcd with the revision still in etcd's history: the cache is
// restored, the watch resumes from the saved revision (no list), and handlers hear
// exactly the changes made while the informer was down.
func TestWarmRestartEtcd(t *testing.T) {
	_, src, f, last := warmSetup(t)
	errs := new(testkit.Errors)
	inf, rec, _ := warmLife(t, src, f, errs)
	if !inf.Stats().Restored {
		t.Fatal("Restored is false after a warm start")
	}
	rec.ExpectNext(t, "add*/wr/a=1", "add*/wr/b=1", "add*/wr/c=1",
		"update /wr/b=1→2", "delete /wr/c=1", "add /wr/d=1")
	waitRev(t, inf, last)
	var got []string
	for k := range inf.All() {
		got = append(got, k)
	}
	if !slices.Equal(got, []string{"/wr/a", "/wr/b", "/wr/d"}) {
		t.Fatalf("cache keys %q", got)
	}
	if st := inf.Stats(); st.Lists != 0 {
		t.Fatalf("the warm start listed %d times", st.Lists)
	}
	if e := errs.All(); len(e) != 0 {
		t.Fatalf("errors: %v", e)
	}
}

// The same after etcd compacted the saved revision away: etcd can no longer prove the
// saved state its own (an etcd restored with its revisions bumped and marked compacted
// looks the same), so the informer lists as on a first start; with ServeUnconfirmed it
// serves the saved state unconfirmed meanwhile and the list delivers only the differences.
func TestWarmRestartEtcdCompacted(t *testing.T) {
	t.Run("lists", func(t *testing.T) {
		c, src, f, last := warmSetup(t)
		if _, err := c.Compact(context.Background(), last, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		errs := new(testkit.Errors)
		inf, rec, _ := warmLife(t, src, f, errs)
		rec.ExpectNext(t, "add*/wr/a=1", "add*/wr/b=2", "add*/wr/d=1")
		waitRev(t, inf, last)
		if st := inf.Stats(); st.Restored || st.Lists != 1 {
			t.Fatalf("Stats: restored %v, %d lists; want one list and no restore", st.Restored, st.Lists)
		}
		if e := errs.All(); len(e) != 0 {
			t.Fatalf("errors: %v", e)
		}
	})
	t.Run("serves unconfirmed", func(t *testing.T) {
		c, src, f, last := warmSetup(t)
		if _, err := c.Compact(context.Background(), last, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		errs := new(testkit.Errors)
		inf, rec, _ := startStoppableInformer(t, src, informer.Options[string, *item]{
			Persist:          f,
			ServeUnconfirmed: true,
			Backoff:          informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		}, errs)
		// a is unchanged (the same bytes): a resync, which no handler asked for.
		rec.ExpectNext(t, "add*/wr/a=1", "add*/wr/b=1", "add*/wr/c=1",
			"update /wr/b=1→2", "add /wr/d=1", "delete?/wr/c=1")
		waitRev(t, inf, last)
		if st := inf.Stats(); st.Restored || st.Unconfirmed || st.Lists != 1 {
			t.Fatalf("Stats: restored %v, unconfirmed %v, %d lists; want one list replacing the restored state", st.Restored, st.Unconfirmed, st.Lists)
		}
		for _, err := range errs.All() {
			if !errors.Is(err, informer.ErrExpired) {
				t.Fatalf("unexpected error: %v", err)
			}
		}
	})
}

// binaryItem encodes an item as its key and value, length-prefixed.
var binaryItem = persist.CodecFuncs[*item]{
	CodecName: "item-binary",
	EncodeFunc: func(it *item) ([]byte, error) {
		b := binary.AppendUvarint(nil, uint64(len(it.Key)))
		b = append(b, it.Key...)
		return append(b, it.Value...), nil
	},
	DecodeFunc: func(data []byte) (*item, error) {
		n, k := binary.Uvarint(data)
		if k <= 0 || n > uint64(len(data)-k) {
			return nil, errors.New("malformed item")
		}
		return &item{Key: string(data[k : k+int(n)]), Value: string(data[k+int(n):])}, nil
	},
}

// BenchmarkWarmStartEtcd starts an informer over ETCD_BENCH_OBJECTS keys of about 1 KiB
// (default 20,000) in an embedded etcd, with 100 changes made since the snapshot was
// saved: cold (a list, pages of 500) and warm (the snapshot, in JSON or a binary codec,
// and a watch resumed from its revision). It reports the time until the informer holds
// etcd's last change, the bytes etcd sent (through a counting proxy on loopback), and
// the CPU time of the process (the embedded etcd's included). For the figures:
//
//	ETCD_BENCH_OBJECTS=1000000 go test -run '^$' -bench WarmStartEtcd -benchtime 1x -timeout 60m ./source/etcd/
func BenchmarkWarmStartEtcd(b *testing.B) {
	n := 20000
	if s := os.Getenv("ETCD_BENCH_OBJECTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("ETCD_BENCH_OBJECTS=%q", s)
		}
	}
	srv := startServer(b, serverOptions{})
	c := newClient(b, srv.Endpoint())
	const prefix = "/bench/warm/"
	putMany(b, c, prefix+"%08d", n, strings.Repeat("x", 1000))
	px := startProxy(b, srv.Endpoint())
	viaProxy := newClient(b, px.Addr())
	src := newSource(b, viaProxy, prefix, etcd.Options{})

	save := func(codec persist.Codec[*item]) *persist.File[string, *item] {
		f, err := persist.New[string, *item](b.TempDir(), persist.Options[*item]{Interval: -1, Codec: codec})
		if err != nil {
			b.Fatal(err)
		}
		inf, err := informer.New(src, informer.Options[string, *item]{Key: itemKey, Persist: f, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		ctx, stop := run(inf)
		if informer.WaitForCacheSync(ctx, inf) != nil {
			b.Fatal("no sync")
		}
		stop()
		return f
	}
	files := map[string]*persist.File[string, *item]{"warm": save(nil), "warm-json": save(persist.JSON[*item]()), "warm-binary": save(binaryItem)}
	var last int64
	for i := range 100 {
		last = put(b, c, fmt.Sprintf("%s%08d", prefix, i*(n/100)), "changed")
	}

	for _, mode := range []string{"cold", "warm", "warm-json", "warm-binary"} {
		b.Run(mode, func(b *testing.B) {
			var bytes int64
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				received0, cpu0 := px.Received(), cpuTime()
				b.StartTimer()
				var p informer.Persister[string, *item]
				if f, ok := files[mode]; ok {
					p = f
				}
				inf, err := informer.New(src, informer.Options[string, *item]{Key: itemKey, Persist: p, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				ctx, stop := run(inf)
				if err := inf.WaitForRevision(ctx, etcd.FormatRevision(last)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				bytes += px.Received() - received0
				cpu += cpuTime() - cpu0
				if inf.Len() != n {
					b.Fatalf("%d objects, want %d", inf.Len(), n)
				}
				stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms-to-current")
			b.ReportMetric(float64(bytes)/float64(b.N), "etcd-bytes/op")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// replace stops the server and starts a fresh one, with an empty data directory, on the
// same URLs: another cluster at the same endpoints, with token as its cluster token (the
// same token gives the same cluster ID).
func (s *server) replace(token string) {
	s.t.Helper()
	s.Stop()
	s.dir, s.token = s.t.TempDir(), token
	e, err := startEmbedded(s.dir, s.clientURL, s.peerURL, s.progressNotification, s.token)
	if err != nil {
		s.t.Fatalf("starting the new etcd: %v", err)
	}
	s.e = e
}

// putRetrying is put that retries while the client reconnects to a replaced server.
func putRetrying(t *testing.T, c *clientv3.Client, key, value string) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Put(context.Background(), key, value)
		if err == nil {
			return resp.Header.Revision
		}
		if time.Now().After(deadline) {
			t.Fatalf("put %s: %v", key, err)
		}
		time.Sleep(20 * time.Millisecond) // a retry interval, not a synchronisation
	}
}

// cacheState returns the informer's cache as key → value.
func cacheState(inf *informer.Informer[string, *item]) map[string]string {
	m := map[string]string{}
	for k, v := range inf.All() {
		m[k] = v.Value
	}
	return m
}

// waitCache waits until the informer's cache is want and no longer the restored state.
func waitCache(t *testing.T, inf *informer.Informer[string, *item], want map[string]string) {
	t.Helper()
	informertest.Eventually(t, 30*time.Second, func() bool {
		return !inf.Stats().Restored && maps.Equal(cacheState(inf), want)
	}, "the cache did not become the source's state: restored %v, %d objects", inf.Stats().Restored, len(cacheState(inf)))
}

// A watch from a revision the cluster has not reached is refused as expired, as a list at
// such a revision is: it is a revision of another history (a replaced cluster).
func TestWatchRefusesUnreachedRevision(t *testing.T) {
	_, c := startWithClient(t)
	rev := put(t, c, "/fw/a", "1")
	src := newSource(t, c, "/fw/", etcd.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ahead := range []int64{1, 1000} {
		w, err := src.Watch(ctx, informer.WatchOptions{Revision: etcd.FormatRevision(rev + ahead)})
		if err == nil {
			_, err = w.Next()
			w.Stop()
		}
		if !errors.Is(err, informer.ErrExpired) || !strings.Contains(err.Error(), "newer than the cluster's") {
			t.Fatalf("watch from %d, the cluster at %d: got %v, want ErrExpired", rev+ahead, rev, err)
		}
	}
	// The cluster's own revision is fine: the watch waits for the next change.
	w, err := src.Watch(ctx, informer.WatchOptions{Revision: etcd.FormatRevision(rev)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := put(t, c, "/fw/b", "1")
	ev, err := w.Next()
	if err != nil || ev.Revision != etcd.FormatRevision(next) {
		t.Fatalf("watch from the current revision: %v %v, want the put at %d", ev, err, next)
	}
}

// firstEtcdLife runs an informer over prefix of c persisting to dir until it reached rev,
// then stops it.
func firstEtcdLife(t *testing.T, c *clientv3.Client, prefix, dir string, rev int64) {
	t.Helper()
	f := newPersistFile(t, dir)
	errs := new(testkit.Errors)
	inf, _, stop := warmLife(t, newSource(t, c, prefix, etcd.Options{}), f, errs)
	waitRev(t, inf, rev)
	stop()
	if e := errs.All(); len(e) != 0 {
		t.Fatalf("first life reported %v", e)
	}
}

func newPersistFile(t *testing.T, dir string) *persist.File[string, *item] {
	t.Helper()
	f, err := persist.New[string, *item](dir, persist.Options[*item]{Schema: "v1", Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A warm restart against another etcd cluster on the same endpoints ends with the new
// cluster's state, having listed: a new cluster behind the saved revision with the same
// cluster ID (the same URLs, name and token) is refused by the history proof; one with
// another cluster ID, behind or ahead, by the snapshot's source identity.
func TestWarmRestartReplacedEtcd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new int    // puts in the old and the new cluster, over 50 keys
		token    string // the new cluster's token
	}{
		{"behind, same cluster ID", 300, 5, ""},
		{"behind", 300, 5, "replaced"},
		{"ahead", 5, 300, "replaced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := startWithClient(t)
			const p = "/rs/"
			var rev int64
			for i := range tc.old {
				rev = put(t, c, fmt.Sprintf("%sk%02d", p, i%50), fmt.Sprintf("a%d", i))
			}
			dir := t.TempDir()
			firstEtcdLife(t, c, p, dir, rev)

			srv.replace(tc.token)
			want := map[string]string{}
			for i := range tc.new {
				key, value := fmt.Sprintf("%sk%02d", p, i%50), fmt.Sprintf("b%d", i)
				putRetrying(t, c, key, value)
				want[key] = value
			}
			errs := new(testkit.Errors)
			inf, _, _ := warmLife(t, newSource(t, c, p, etcd.Options{}), newPersistFile(t, dir), errs)
			waitCache(t, inf, want)
			st := inf.Stats()
			if st.Lists == 0 {
				t.Fatal("no list after a restart against another cluster")
			}
			e := errs.All()
			// The same cluster ID: the history proof refuses the saved revision (the cluster
			// has not reached it); another: the snapshot's source identity.
			if tc.token == "" && (len(e) != 1 || !errors.Is(e[0], informer.ErrOtherHistory)) ||
				tc.token != "" && (len(e) != 1 || !errors.Is(e[0], persist.ErrIncompatible)) {
				t.Fatalf("%d expirations, reported %v; want one ErrOtherHistory (same cluster ID) or one ErrIncompatible (another)", st.Expirations, e)
			}
		})
	}
}

// errorsNot returns the errors that do not match target.
func errorsNot(errs []error, target error) []error {
	var out []error
	for _, err := range errs {
		if !errors.Is(err, target) {
			out = append(out, err)
		}
	}
	return out
}

// A warm restart with another prefix and the same state directory does not keep the old
// prefix's keys.
func TestWarmRestartNewPrefix(t *testing.T) {
	_, c := startWithClient(t)
	put(t, c, "/p1/a", "1")
	rev := put(t, c, "/p1/b", "1")
	dir := t.TempDir()
	firstEtcdLife(t, c, "/p1/", dir, rev)
	put(t, c, "/p2/x", "2")
	errs := new(testkit.Errors)
	inf, _, _ := warmLife(t, newSource(t, c, "/p2/", etcd.Options{}), newPersistFile(t, dir), errs)
	waitCache(t, inf, map[string]string{"/p2/x": "2"})
	e := errs.All()
	if len(e) != 1 || !errors.Is(e[0], persist.ErrIncompatible) || !strings.Contains(e[0].Error(), "/p1/") || !strings.Contains(e[0].Error(), "/p2/") {
		t.Fatalf("reported %v, want one ErrIncompatible naming both prefixes", e)
	}
}
