package etcd_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/etcd"
)

// warmLife runs one informer over src that persists to f until stop returns (after Run
// returned: the final save is done).
func warmLife(t *testing.T, src informer.ListerWatcher[*item], f *persist.File[string, *item], errs *errorLog) (inf *informer.Informer[string, *item], rec *recorder, stop func()) {
	t.Helper()
	inf, err := informer.New(src, informer.Options[string, *item]{
		Key:          itemKey,
		Persist:      f,
		Backoff:      informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		ErrorHandler: errs.report,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec = newRecorder()
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{Name: "recorder", Policy: informer.Block}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	syncCtx, cancelSync := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSync()
	if !inf.WaitForCacheSync(syncCtx) {
		t.Fatal("the informer did not sync")
	}
	return inf, rec, stop
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
	srv := startServer(t, serverOptions{})
	c := newClient(t, srv.Endpoint())
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
	errs := newErrorLog()
	inf, rec, stop := warmLife(t, src, f, errs)
	rec.expectNext(t, 0, "add /wr/a=1 initial", "add /wr/b=1 initial", "add /wr/c=1 initial")
	waitRev(t, inf, rev)
	stop()
	if e := errs.all(); len(e) != 0 {
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
	errs := newErrorLog()
	inf, rec, _ := warmLife(t, src, f, errs)
	if !inf.Restored() {
		t.Fatal("Restored is false after a warm start")
	}
	rec.expectNext(t, 0, "add /wr/a=1 initial", "add /wr/b=1 initial", "add /wr/c=1 initial",
		"update /wr/b 1->2", "delete /wr/c=1", "add /wr/d=1")
	waitRev(t, inf, last)
	if got := inf.Keys(); !slices.Equal(got, []string{"/wr/a", "/wr/b", "/wr/d"}) {
		t.Fatalf("cache keys %q", got)
	}
	if st := inf.Stats(); st.Lists != 0 {
		t.Fatalf("the warm start listed %d times", st.Lists)
	}
	if e := errs.all(); len(e) != 0 {
		t.Fatalf("errors: %v", e)
	}
}

// The same after etcd compacted the saved revision away: the informer relists and
// delivers only the differences.
func TestWarmRestartEtcdCompacted(t *testing.T) {
	c, src, f, last := warmSetup(t)
	if _, err := c.Compact(context.Background(), last, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	errs := newErrorLog()
	inf, rec, _ := warmLife(t, src, f, errs)
	// a is unchanged (the same bytes): a resync, which no handler asked for.
	rec.expectNext(t, 0, "add /wr/a=1 initial", "add /wr/b=1 initial", "add /wr/c=1 initial",
		"update /wr/b 1->2", "add /wr/d=1", "delete /wr/c=1 unknown")
	waitRev(t, inf, last)
	if inf.Restored() {
		t.Fatal("Restored after a relist")
	}
	if st := inf.Stats(); st.Lists != 1 || st.Expirations == 0 {
		t.Fatalf("Stats: %d lists, %d expirations; want one list after an expiry", st.Lists, st.Expirations)
	}
	for _, err := range errs.all() {
		if !errors.Is(err, informer.ErrExpired) {
			t.Fatalf("unexpected error: %v", err)
		}
	}
}
