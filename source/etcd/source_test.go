package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
)

// The initial list of 10,000 keys comes in pages of 500 (after a first page of 32), every
// page at the first page's revision: writes made between pages are not in the list but
// arrive by the watch.
func TestInitialSyncAcrossPages(t *testing.T) {
	_, c := startWithClient(t)
	const prefix, n = "/items/", 10000
	fill(t, c, prefix, n)
	// Neighbours of the prefix that must stay out of the mirror.
	put(t, c, "/items", "x")
	put(t, c, "/items.", "x")
	put(t, c, "/items0", "x")

	src := newSource(t, c, prefix, etcd.Options{})
	var (
		mu    sync.Mutex
		pages []informer.ListOptions
		revs  []string
		once  sync.Once
	)
	lw := listHook{src, func(opts informer.ListOptions, l informer.List[*item], err error) {
		mu.Lock()
		pages, revs = append(pages, opts), append(revs, l.Revision)
		mu.Unlock()
		once.Do(func() { // after the first page: change the first, the last and a new key
			del(t, c, prefix+"k00000")
			del(t, c, prefix+"k09999")
			put(t, c, prefix+"k10000", "v10000")
		})
	}}
	inf, rec := startInformer(t, lw, informer.Options[string, *item]{PageSize: 500}, nil)

	mu.Lock()
	// The first page holds 32 keys (the Source learns the key-values' size), the others
	// the informer's 500.
	if want := 1 + (n-32+499)/500; len(pages) != want {
		t.Errorf("listed in %d pages, want %d", len(pages), want)
	}
	for i, p := range pages {
		if p.Limit != 500 || (i == 0) != (p.Continue == "") || revs[i] != revs[0] {
			t.Errorf("page %d: options %+v, revision %s (first page %s)", i, p, revs[i], revs[0])
		}
	}
	mu.Unlock()

	// The list: every key, in key order, as of the first page; then the three changes by
	// the watch. Between keys there is no order to rely on (a change may join a key's
	// deltas while the list is still being delivered), so each key's calls are checked.
	calls := rec.WaitFor(t, n+3)
	var initial []string
	for _, c := range calls {
		if strings.HasPrefix(c, "add*") {
			initial = append(initial, c)
		}
	}
	if len(initial) != n {
		t.Fatalf("%d initial adds, want %d", len(initial), n)
	}
	for i, c := range initial {
		if want := fmt.Sprintf("add*%sk%05d=v%d", prefix, i, i); c != want {
			t.Fatalf("initial add %d: %q, want %q", i, c, want)
		}
	}
	keys := informertest.ByKey(calls)
	for key, want := range map[string][]string{
		prefix + "k00000": {"add*/items/k00000=v0", "delete /items/k00000=v0"},
		prefix + "k09999": {"add*/items/k09999=v9999", "delete /items/k09999=v9999"},
		prefix + "k10000": {"add /items/k10000=v10000"},
	} {
		if !slices.Equal(keys[key], want) {
			t.Errorf("%s: %q, want %q", key, keys[key], want)
		}
	}
	want := calls[:n+3]
	assertMirrors(t, inf, src, c, prefix)
	if got := len(rec.Calls()); got != len(want) {
		t.Errorf("%d handler calls, want %d", got, len(want))
	}
}

// Puts, updates, deletes, transactions and lease expiries reach the handler as they
// happen, each with the right previous and new value.
func TestLiveChangesInOrder(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/live/"
	put(t, c, p+"seed", "0")
	src := newSource(t, c, p, etcd.Options{})
	inf, rec := startInformer(t, src, informer.Options[string, *item]{}, nil)
	rec.ExpectNext(t, "add*/live/seed=0")

	put(t, c, p+"a", "1")
	rec.ExpectNext(t, "add /live/a=1")
	put(t, c, p+"b", "1")
	rec.ExpectNext(t, "add /live/b=1")
	put(t, c, p+"a", "2")
	rec.ExpectNext(t, "update /live/a=1→2")
	del(t, c, p+"b")
	rec.ExpectNext(t, "delete /live/b=1")
	put(t, c, "/elsewhere", "x") // outside the prefix: nothing
	txn(t, c, clientv3.OpPut(p+"c", "1"), clientv3.OpPut(p+"d", "1"), clientv3.OpDelete(p+"a"))
	rec.ExpectNext(t, "add /live/c=1", "add /live/d=1", "delete /live/a=2")
	put(t, c, p+"b", "again")
	rec.ExpectNext(t, "add /live/b=again")

	// A key under a lease goes away with a delete when the lease is revoked.
	lease, err := c.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, p+"c", "2", clientv3.WithLease(lease.ID))
	rec.ExpectNext(t, "update /live/c=1→2")
	if _, err := c.Revoke(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "delete /live/c=2")

	// A burst without waiting: per key, every change in order.
	for i := 0; i < 50; i++ {
		put(t, c, p+"x", fmt.Sprint(i))
		put(t, c, p+"y", fmt.Sprint(i))
	}
	del(t, c, p+"x")
	n := rec.Checked()
	calls := rec.WaitFor(t, n+101)
	keys := informertest.ByKey(calls[n:])
	var wantX, wantY []string
	for i := 0; i < 50; i++ {
		if i == 0 {
			wantX, wantY = append(wantX, "add /live/x=0"), append(wantY, "add /live/y=0")
			continue
		}
		wantX = append(wantX, fmt.Sprintf("update /live/x=%d→%d", i-1, i))
		wantY = append(wantY, fmt.Sprintf("update /live/y=%d→%d", i-1, i))
	}
	wantX = append(wantX, "delete /live/x=49")
	if !slices.Equal(keys["/live/x"], wantX) || !slices.Equal(keys["/live/y"], wantY) || len(keys) != 2 {
		t.Fatalf("burst: got %q", calls[n:])
	}
	assertMirrors(t, inf, src, c, p)
	if got := len(rec.Calls()); got != n+101 {
		t.Errorf("%d handler calls, want %d", got, n+101)
	}
}

// While the informer is cut off from etcd, keys change and the history is compacted. When
// the connection comes back the watch finds its revision compacted, the informer lists
// again, and the keys deleted meanwhile reach OnDelete as tombstones.
func TestCompactionWhileDisconnected(t *testing.T) {
	srv, direct := startWithClient(t)
	px := startProxy(t, srv.Endpoint())
	viaProxy := newClient(t, px.Addr())
	const p = "/cfg/"
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		put(t, direct, p+k, "1")
	}
	// With NewKV the objects carry their ModRevision, so that a relist knows which
	// objects did not change (informer.Options.Revision) and does not report them.
	src, err := etcd.NewKV(viaProxy, p, decodeKV, etcd.Options{RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := new(testkit.Errors)
	inf, rec := startInformer(t, src, informer.Options[string, *item]{
		Revision: func(it *item) string { return etcd.FormatRevision(it.ModRevision) },
		Backoff:  informer.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	}, errs)
	n := len(rec.WaitFor(t, 5))

	px.Cut()
	del(t, direct, p+"b")
	put(t, direct, p+"c", "2")
	del(t, direct, p+"d")
	put(t, direct, p+"d", "2") // deleted and created again: the informer sees a change
	put(t, direct, p+"f", "1")
	rev := del(t, direct, p+"nothing")
	if _, err := direct.Compact(context.Background(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	px.Resume()

	calls := rec.WaitFor(t, n+4)
	got := informertest.ByKey(calls[n:])
	want := map[string][]string{
		p + "b": {"delete?/cfg/b=1"},
		p + "c": {"update /cfg/c=1→2"},
		p + "d": {"update /cfg/d=1→2"},
		p + "f": {"add /cfg/f=1"},
	}
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("calls after the reconnect: %q", calls[n:])
	}
	if inf.Stats().Expirations == 0 {
		t.Error("no expiration counted")
	}
	assertMirrors(t, inf, src, direct, p)
	if got := len(rec.Calls()); got != n+4 {
		t.Errorf("%d handler calls, want %d: %q", got, n+4, rec.Calls()[n:])
	}
}

func decodeKV(kv *mvccpb.KeyValue) (*item, error) {
	it, err := decodeItem(kv.Key, kv.Value)
	if err != nil {
		return nil, err
	}
	it.ModRevision = kv.ModRevision
	return it, nil
}

// etcd goes down mid-watch, as in a crash (its connections drop at once), and starts
// again on the same data directory and ports. While it is down the informer reports it
// unavailable (retryable); once it is back the informer picks up where it was, without
// losing a change. (A graceful etcd shutdown behaves the same but takes up to etcd's
// request timeout, 7 s, to close open watch streams.)
func TestEtcdRestartMidWatch(t *testing.T) {
	srv := startServer(t, serverOptions{})
	px := startProxy(t, srv.Endpoint())
	c := newClient(t, px.Addr())
	const p = "/svc/"
	put(t, c, p+"a", "1")
	errs := new(testkit.Errors)
	src := newSource(t, c, p, etcd.Options{RequestTimeout: 300 * time.Millisecond, OnDecodeError: errs.Report})
	inf, rec := startInformer(t, src, informer.Options[string, *item]{
		MinWatchTimeout: time.Second,
		Backoff:         informer.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	}, errs)
	rec.ExpectNext(t, "add*/svc/a=1")
	put(t, c, p+"b", "1")
	rec.ExpectNext(t, "add /svc/b=1")

	px.Cut() // the connections drop, as when etcd is killed
	srv.Stop()
	px.Resume() // nothing listens behind the proxy: connections are refused
	err := waitForError(t, errs, "an unavailable error", func(err error) bool { return errors.Is(err, informer.ErrUnavailable) })
	if !errors.Is(err, informer.ErrRetryable) {
		t.Errorf("%v does not match ErrRetryable", err)
	}
	srv.Restart()

	put(t, c, p+"a", "2")
	del(t, c, p+"b")
	put(t, c, p+"c", "1")
	rec.ExpectNext(t, "update /svc/a=1→2", "delete /svc/b=1", "add /svc/c=1")
	assertMirrors(t, inf, src, c, p)
	for _, err := range errs.All() {
		if !errors.Is(err, informer.ErrRetryable) {
			t.Errorf("unexpected error: %v", err)
		}
	}
}

// With progress notifications on, the informer's revision follows writes outside the
// prefix: WaitForRevision returns for them, by bookmark.
func TestBookmarksFromProgressNotifications(t *testing.T) {
	srv := startServer(t, serverOptions{ProgressNotifyInterval: 100 * time.Millisecond})
	c := newClient(t, srv.Endpoint())
	const p = "/bm/"
	put(t, c, p+"a", "1")
	src := newSource(t, c, p, etcd.Options{})
	inf, rec := startInformer(t, src, informer.Options[string, *item]{}, nil)
	rec.WaitFor(t, 1)

	rev := put(t, c, "/outside", "x")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := inf.WaitForRevision(ctx, etcd.FormatRevision(rev)); err != nil {
		t.Fatalf("WaitForRevision(%d) for a write outside the prefix: %v", rev, err)
	}
	if inf.Stats().Bookmarks == 0 {
		t.Error("no bookmark counted")
	}

	// The watch itself: bookmarks only when allowed. (etcd sends progress notifications
	// to a watch only once the store has reached the watch's start revision.)
	for _, allow := range []bool{true, false} {
		w, err := src.Watch(ctx, informer.WatchOptions{Revision: etcd.FormatRevision(rev), AllowBookmarks: allow, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rev = put(t, c, "/outside", "y")
		var bookmarks int
		for {
			ev, err := w.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("watch ended with %v, want io.EOF", err)
				}
				break
			}
			if ev.Type != informer.Bookmark {
				t.Fatalf("unexpected %v event", ev.Type)
			}
			if r, _ := etcd.ParseRevision(ev.Revision); r < rev {
				t.Errorf("bookmark at %s, before %d", ev.Revision, rev)
			}
			bookmarks++
		}
		w.Stop()
		if allow != (bookmarks > 0) {
			t.Errorf("AllowBookmarks %v: %d bookmarks in a second", allow, bookmarks)
		}
	}
	assertMirrors(t, inf, src, c, p)
	if got := len(rec.Calls()); got != 1 {
		t.Errorf("handler calls %q", rec.Calls())
	}
}

// With etcd's default progress interval (10 minutes), RequestProgress brings a bookmark
// at once.
func TestRequestProgress(t *testing.T) {
	_, c := startWithClient(t)
	src := newSource(t, c, "/rp/", etcd.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.RequestProgress(ctx); err == nil {
		t.Error("RequestProgress with no watch open: no error")
	}
	w, err := src.Watch(ctx, informer.WatchOptions{Revision: "1", AllowBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	rev := put(t, c, "/outside", "x")
	if err := src.RequestProgress(ctx); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != informer.Bookmark || ev.Revision != etcd.FormatRevision(rev) {
		t.Fatalf("got %v at %s, want a bookmark at %d", ev.Type, ev.Revision, rev)
	}
}

// Read-your-writes: write through the etcd client, wait for the write's revision, read
// the new state from the cache — for single writes and for transactions.
func TestReadYourWrites(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/ryw/"
	src := newSource(t, c, p, etcd.Options{})
	inf, _ := startInformer(t, src, informer.Options[string, *item]{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 50; i++ {
		key, value := fmt.Sprintf("%sk%d", p, i%5), fmt.Sprint(i)
		rev := put(t, c, key, value)
		if err := inf.WaitForRevision(ctx, etcd.FormatRevision(rev)); err != nil {
			t.Fatal(err)
		}
		if it, ok := inf.Get(key); !ok || it.Value != value {
			t.Fatalf("after WaitForRevision(%d): Get(%s) = %v, %v; want %s", rev, key, it, ok, value)
		}
	}
	for i := 0; i < 20; i++ {
		a, b, z := fmt.Sprint("a", i), fmt.Sprint("b", i), fmt.Sprint("z", i)
		rev := txn(t, c, clientv3.OpPut(p+"t1", a), clientv3.OpPut(p+"t2", b), clientv3.OpDelete(p+"k0"), clientv3.OpPut(p+"t3", z))
		if err := inf.WaitForRevision(ctx, etcd.FormatRevision(rev)); err != nil {
			t.Fatal(err)
		}
		snap := inf.Snapshot() // one consistent read of the three
		t1, _ := snap.Get(p + "t1")
		t2, _ := snap.Get(p + "t2")
		t3, _ := snap.Get(p + "t3")
		_, k0 := snap.Get(p + "k0")
		if t1 == nil || t2 == nil || t3 == nil || t1.Value != a || t2.Value != b || t3.Value != z || k0 {
			t.Fatalf("transaction %d at revision %d not wholly visible: %v %v %v, k0 present %v", i, rev, t1, t2, t3, k0)
		}
		put(t, c, p+"k0", "back")
	}
	assertMirrors(t, inf, src, c, p)
}

// Two consumers ask a factory for the informer of one prefix: they share one informer,
// which lists once, and both see every change.
func TestFactorySharedInformer(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/shared/"
	put(t, c, p+"a", "1")
	src := newSource(t, c, p, etcd.Options{})
	var lists, builds atomic.Int32
	lw := listHook{src, func(informer.ListOptions, informer.List[*item], error) { lists.Add(1) }}
	f := informer.NewFactory()
	t.Cleanup(func() { _ = f.Shutdown() })
	consumer := func() (*informer.Informer[string, *item], *informertest.Recorder[*item]) {
		inf, err := informer.InformerFor(f, "etcd:"+p, func() (*informer.Informer[string, *item], error) {
			builds.Add(1)
			return informer.New(lw, informer.Options[string, *item]{Key: itemKey, Name: "shared"})
		})
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		if _, err := inf.AddHandler(rec, informer.HandlerOptions{Policy: informer.Block}); err != nil {
			t.Fatal(err)
		}
		return inf, rec
	}
	inf1, rec1 := consumer()
	inf2, rec2 := consumer()
	if inf1 != inf2 || builds.Load() != 1 {
		t.Fatalf("consumers got different informers (%d built)", builds.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f.Start(ctx)
	if err := f.WaitForCacheSync(ctx); err != nil {
		t.Fatalf("WaitForCacheSync: %v", err)
	}
	// One change at a time, each seen by both consumers before the next: the order is
	// then the order of the writes (across keys the informer promises no order).
	for _, step := range []struct {
		write func()
		want  string
	}{
		{func() {}, "add*/shared/a=1"},
		{func() { put(t, c, p+"b", "1") }, "add /shared/b=1"},
		{func() { put(t, c, p+"a", "2") }, "update /shared/a=1→2"},
		{func() { del(t, c, p+"b") }, "delete /shared/b=1"},
	} {
		step.write()
		rec1.ExpectNext(t, step.want)
		rec2.ExpectNext(t, step.want)
	}
	assertMirrors(t, inf1, src, c, p)
	if lists.Load() != 1 {
		t.Errorf("%d lists, want 1", lists.Load())
	}
	rec1.ExpectNoMore(t)
	rec2.ExpectNoMore(t)
}

// A value that does not decode is reported with its key to the informer's error handler
// (informer.New hands the source its error sink: no OnDecodeError needed), counted in the
// source and in the informer's Stats, and skipped; a later value that decodes is applied,
// and a delete of such a key goes through.
func TestDecoderFailure(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/dec/"
	put(t, c, p+"a", "1")
	put(t, c, p+"bad", "!1")
	errs := new(testkit.Errors)
	src := newSource(t, c, p, etcd.Options{})
	inf, rec := startInformer(t, src, informer.Options[string, *item]{}, errs)
	rec.ExpectNext(t, "add*/dec/a=1")
	expectDecodeError(t, errs, p+"bad")

	put(t, c, p+"bad", "2") // decodes now: an add, the key was never in the cache
	rec.ExpectNext(t, "add /dec/bad=2")
	put(t, c, p+"bad", "!3") // skipped: the cache keeps 2
	put(t, c, p+"a", "2")
	rec.ExpectNext(t, "update /dec/a=1→2")
	if it, _ := inf.Get(p + "bad"); it == nil || it.Value != "2" {
		t.Errorf("after a value that does not decode the cache holds %v, want the previous value", it)
	}
	put(t, c, p+"bad", "4")
	rec.ExpectNext(t, "update /dec/bad=2→4")
	put(t, c, p+"bad", "!5")
	// The last value does not decode: the delete carries the key alone, and OnDelete
	// receives the state the cache held, the last one that decoded.
	del(t, c, p+"bad")
	rec.ExpectNext(t, "delete /dec/bad=4")
	assertMirrors(t, inf, src, c, p)
	if got := src.DecodeErrors(); got != 3 {
		t.Errorf("DecodeErrors() = %d, want 3", got)
	}
	if got := inf.Stats().DecodeErrors; got != 3 {
		t.Errorf("the informer's Stats.DecodeErrors = %d, want 3", got)
	}
	rec.ExpectNoMore(t)
	for _, err := range errs.All() {
		if !errors.Is(err, informer.ErrBadInput) || !errors.Is(err, errBadValue) {
			t.Errorf("reported %v: want a decode error", err)
		}
	}
}

func expectDecodeError(t *testing.T, errs *testkit.Errors, key string) {
	t.Helper()
	err := waitForError(t, errs, "a decode error", func(err error) bool {
		var de *etcd.DecodeError
		return errors.As(err, &de) && de.Key == key
	})
	if !errors.Is(err, informer.ErrBadInput) || !errors.Is(err, errBadValue) {
		t.Errorf("%v: want it to match ErrBadInput and the decoder's error", err)
	}
}

// A page's Bytes is the size of its keys and values, as etcd sent them: on the first page
// (a Get) and on the pages read from the list's stream alike, adding up to the prefix's.
func TestListBytes(t *testing.T) {
	_, c := startWithClient(t)
	const prefix, n = "/sized/", 3000
	fill(t, c, prefix, n)
	src := newSource(t, c, prefix, etcd.Options{})
	ctx := context.Background()
	var total int64
	opts := informer.ListOptions{Limit: 500}
	for page := 0; ; page++ {
		l, err := src.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		for _, it := range l.Items {
			want += int64(len(it.Key) + len(it.Value))
		}
		if l.Bytes != want || want == 0 {
			t.Fatalf("page %d of %d items: Bytes %d, want %d", page, len(l.Items), l.Bytes, want)
		}
		total += l.Bytes
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, kv := range resp.Kvs {
		want += int64(len(kv.Key) + len(kv.Value))
	}
	if total != want {
		t.Fatalf("the pages hold %d bytes, etcd %d", total, want)
	}
}

// The informer's progress log says how many bytes a list over etcd has read: a line per
// page while it runs (the clock moves on by the log's interval at each page) and one at
// the end, with the size of the prefix's keys and values.
func TestListProgressLogShowsBytes(t *testing.T) {
	_, c := startWithClient(t)
	const prefix, n = "/progress/", 20_000
	fill(t, c, prefix, n)
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithLimit(32))
	if err != nil {
		t.Fatal(err)
	}
	var first int
	for _, kv := range resp.Kvs {
		first += len(kv.Key) + len(kv.Value)
	}
	resp, err = c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, kv := range resp.Kvs {
		total += len(kv.Key) + len(fmt.Sprintf("v%d", i))
	}

	clk := clock.NewFake(time.Unix(0, 0))
	lw := listHook{newSource(t, c, prefix, etcd.Options{}), func(informer.ListOptions, informer.List[*item], error) {
		clk.Step(10 * time.Second)
	}}
	lines := &infoLines{}
	startInformer(t, lw, informer.Options[string, *item]{PageSize: 5000, Clock: clk, Logger: slog.New(lines)}, nil)
	want := []string{ // pages of 32, 5,000, 5,000, 5,000 and 4,968 keys
		fmt.Sprintf("listed 32 objects (%d B) in 10s, page 1", first),
		"listed 5,032 objects", "listed 10,032 objects", "listed 15,032 objects",
		"listed 20,000 objects",
		fmt.Sprintf("listed 20,000 objects (%.1f kB) in 50s, 5 pages, 400 objects/s", float64(total)/1000),
	}
	got := lines.listed()
	if len(got) != len(want) {
		t.Fatalf("the list logged %q, want %d lines", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) || !strings.Contains(got[i], "B) in ") {
			t.Errorf("line %d: %q, want %q…", i, got[i], want[i])
		}
	}
}

// infoLines is a slog handler that keeps the messages of Info records.
type infoLines struct {
	mu    sync.Mutex
	lines []string
}

func (h *infoLines) Enabled(_ context.Context, l slog.Level) bool { return l == slog.LevelInfo }
func (h *infoLines) Handle(_ context.Context, rec slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, rec.Message)
	return nil
}
func (h *infoLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *infoLines) WithGroup(string) slog.Handler      { return h }

// listed returns the lines that say how far a list has come.
func (h *infoLines) listed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.lines {
		if strings.HasPrefix(l, "listed ") {
			out = append(out, l)
		}
	}
	return out
}
