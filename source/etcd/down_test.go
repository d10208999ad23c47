package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
)

// warnings is a slog handler that sends each Warn record, its message and attributes in
// one line, to a channel.
type warnings chan string

func (w warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnings) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	select {
	case w <- b.String():
	default:
	}
	return nil
}
func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }

// downAtStart saves a cache of four keys under /down/ and stops etcd. It returns the
// server, the options of a warm start from the saved cache and etcd's state.
func downAtStart(t *testing.T) (*server, informer.Options[string, *item], map[string]string) {
	srv, c := startWithClient(t)
	const p = "/down/"
	var rev int64
	for _, k := range []string{"a", "b", "c", "d"} {
		rev = put(t, c, p+k, "1")
	}
	opts := savedCache(t, c, p, informer.Options[string, *item]{Name: "down", Revision: modRevision}, rev)
	want := etcdState(t, c, p)
	srv.Stop()
	return srv, opts, want
}

// startDown runs an informer with opts over /down/ of etcd at endpoint, which does not
// answer, and returns it and its first Warn line (at most 5 s after Run).
func startDown(t *testing.T, endpoint string, opts informer.Options[string, *item], errs *testkit.Errors) (*informer.Informer[string, *item], string) {
	t.Helper()
	warn := make(warnings, 16)
	opts.Key = itemKey
	opts.Logger = slog.New(warn)
	opts.ErrorHandler = errs.Report
	opts.Backoff = informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	c := newClient(t, endpoint)
	inf, err := informer.New(newKVSource(t, c, "/down/"), opts)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := run(inf)
	t.Cleanup(stop)
	select {
	case line := <-warn:
		return inf, line
	case <-time.After(5 * time.Second):
		t.Fatal("no Warn within 5 s of a start with etcd down")
	}
	return nil, ""
}

// etcd down at a warm start: within 5 s a Warn names the informer, etcd's endpoint and
// what to do; the informer waits, and once etcd answers it restores the saved cache and
// resumes its watch: no list.
func TestWarmStartEtcdDown(t *testing.T) {
	srv, opts, want := downAtStart(t)
	errs := new(testkit.Errors)
	inf, line := startDown(t, srv.Endpoint(), opts, errs)
	for _, s := range []string{`"down"`, srv.Endpoint(), "check that the source runs"} {
		if !strings.Contains(line, s) {
			t.Fatalf("the Warn %q does not say %s", line, s)
		}
	}
	if inf.Stats().Synced {
		t.Fatal("synced while etcd is down, without ServeUnconfirmed")
	}
	srv.Restart()
	informertest.Eventually(t, 30*time.Second, func() bool { return inf.Stats().Synced }, "no sync after etcd came back")
	if got := cacheState(inf); !maps.Equal(got, want) {
		t.Fatalf("cache %v, want %v", got, want)
	}
	if st := inf.Stats(); !st.Restored || st.Lists != 0 || st.Unconfirmed {
		t.Fatalf("Stats: restored %v, %d lists, unconfirmed %v; want the saved cache, no list", st.Restored, st.Lists, st.Unconfirmed)
	}
	if e := errs.All(); len(e) != 0 {
		t.Fatalf("reported %v", e)
	}
}

// With ServeUnconfirmed, etcd down at a warm start: the saved cache is served at once,
// marked unconfirmed; once etcd answers it is confirmed, the watch resumes from the saved
// revision (no list) and delivers the changes.
func TestWarmStartEtcdDownServeUnconfirmed(t *testing.T) {
	srv, o, want := downAtStart(t)
	o.ServeUnconfirmed = true
	errs := new(testkit.Errors)
	inf, line := startDown(t, srv.Endpoint(), o, errs)
	if !strings.Contains(line, "not yet confirmed") || !strings.Contains(line, srv.Endpoint()) {
		t.Fatalf("the Warn %q does not say that the cache is served unconfirmed, or where etcd is", line)
	}
	informertest.Eventually(t, 10*time.Second, func() bool { return inf.Stats().Synced }, "the saved cache is not served while etcd is down")
	if st := inf.Stats(); !st.Unconfirmed || !st.Restored {
		t.Fatalf("Stats: unconfirmed %v, restored %v; want both", st.Unconfirmed, st.Restored)
	}
	if got := cacheState(inf); !maps.Equal(got, want) {
		t.Fatalf("served %v, want the saved %v", got, want)
	}
	srv.Restart()
	c := newClient(t, srv.Endpoint())
	rev := put(t, c, "/down/e", "1")
	want["/down/e"] = "1"
	waitRev(t, inf, rev)
	if got := cacheState(inf); !maps.Equal(got, want) {
		t.Fatalf("cache %v, want %v", got, want)
	}
	if st := inf.Stats(); st.Unconfirmed || st.Lists != 0 {
		t.Fatalf("Stats: unconfirmed %v, %d lists; want confirmed without a list", st.Unconfirmed, st.Lists)
	}
	if e := errs.All(); len(e) != 0 {
		t.Fatalf("reported %v", e)
	}
}

// With ServeUnconfirmed, etcd down at a warm start and back restored from a backup of
// another history: the served cache is not confirmed; the informer lists, handlers hear
// only the differences, and the cache ends as etcd's state.
func TestWarmStartEtcdDownRestoredUnconfirmed(t *testing.T) {
	const p = "/down/"
	srv, c, backup, saved := behindBackup(t, p, 10, 10, 5)
	o := savedCache(t, c, p, informer.Options[string, *item]{Name: "down", Revision: modRevision, ServeUnconfirmed: true}, saved)
	px := startProxy(t, srv.Endpoint())
	px.Cut()

	errs := new(testkit.Errors)
	inf, _ := startDown(t, px.Addr(), o, errs)
	rec := newRecorder()
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{Name: "recorder"}); err != nil {
		t.Fatal(err)
	}
	informertest.Eventually(t, 10*time.Second, func() bool { return inf.Stats().Unconfirmed }, "the saved cache is not served while etcd is down")
	rec.ExpectNext(t, "add*/down/k00=b5", "add*/down/k01=b6", "add*/down/k02=b7", "add*/down/k03=b8", "add*/down/k04=b9",
		"add*/down/k05=a5", "add*/down/k06=a6", "add*/down/k07=a7", "add*/down/k08=a8", "add*/down/k09=a9")

	srv.restore(backup, 0)
	writeRounds(t, c, p, "c", 10, 10) // another workload after the backup
	want := etcdState(t, c, p)
	px.Resume()
	waitCache(t, inf, want)
	rec.ExpectNext(t, "update /down/k00=b5→c0", "update /down/k01=b6→c1", "update /down/k02=b7→c2", "update /down/k03=b8→c3", "update /down/k04=b9→c4",
		"update /down/k05=a5→c5", "update /down/k06=a6→c6", "update /down/k07=a7→c7", "update /down/k08=a8→c8", "update /down/k09=a9→c9")
	if st := inf.Stats(); st.Unconfirmed || st.Lists != 1 {
		t.Fatalf("Stats: unconfirmed %v, %d lists; want one list", st.Unconfirmed, st.Lists)
	}
}
