package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// List pages: sorted by key, bounded by Limit, each pinned to the first page's revision,
// with an opaque continue token that is checked.
func TestListPages(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/pages/"
	for i := 9; i >= 0; i-- {
		put(t, c, fmt.Sprintf("%s%d", p, i), fmt.Sprint(i))
	}
	put(t, c, "/pages0", "outside")
	src := newSource(t, c, p, etcd.Options{})
	ctx := context.Background()

	first, err := src.List(ctx, informer.ListOptions{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, p+"9", "changed") // after the first page: not in this list
	put(t, c, p+"95", "new")
	var keys []string
	opts := informer.ListOptions{Limit: 4}
	for l := first; ; {
		if l.Revision != first.Revision {
			t.Fatalf("page at revision %s, first page %s", l.Revision, first.Revision)
		}
		for _, it := range l.Items {
			keys = append(keys, it.Key+"="+it.Value)
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
		if l, err = src.List(ctx, opts); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"/pages/0=0", "/pages/1=1", "/pages/2=2", "/pages/3=3", "/pages/4=4", "/pages/5=5", "/pages/6=6", "/pages/7=7", "/pages/8=8", "/pages/9=9"}
	if !slices.Equal(keys, want) {
		t.Fatalf("listed %q", keys)
	}

	// No limit: one page, at the newest revision.
	all, err := src.List(ctx, informer.ListOptions{})
	if err != nil || all.Continue != "" || len(all.Items) != 11 {
		t.Fatalf("unpaged list: %d items, continue %q, %v", len(all.Items), all.Continue, err)
	}
	// At least as fresh as a revision, served by the member (serializable) or not.
	if l, err := src.List(ctx, informer.ListOptions{Revision: all.Revision}); err != nil || l.Revision != all.Revision {
		t.Fatalf("list at revision %s: %s, %v", all.Revision, l.Revision, err)
	}
	if l, err := src.List(ctx, informer.ListOptions{Revision: all.Revision, Consistent: true}); err != nil || l.Revision != all.Revision {
		t.Fatalf("consistent list: %s, %v", l.Revision, err)
	}

	other := newSource(t, c, "/other/", etcd.Options{})
	otherFirst, err := other.List(ctx, informer.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	_ = otherFirst
	tests := []struct {
		name string
		opts informer.ListOptions
		want error
	}{
		{"malformed token", informer.ListOptions{Continue: "not a token"}, informer.ErrBadInput},
		{"token of another prefix", informer.ListOptions{Continue: tokenFor(t, c, "/z/")}, informer.ErrBadInput},
		{"malformed revision", informer.ListOptions{Revision: "x1"}, informer.ErrBadInput},
		{"revision from the future", informer.ListOptions{Revision: "1000000"}, informer.ErrExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := src.List(ctx, tc.opts); !errors.Is(err, tc.want) {
				t.Fatalf("List(%+v): %v, want %v", tc.opts, err, tc.want)
			}
		})
	}

	// A continue token whose revision has been compacted meanwhile: expired.
	rev := put(t, c, p+"last", "x")
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := src.List(ctx, informer.ListOptions{Limit: 4, Continue: first.Continue}); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("page at a compacted revision: %v, want ErrExpired", err)
	}
	if _, err := src.List(ctx, informer.ListOptions{Revision: first.Revision}); err != nil {
		t.Fatalf("a list at least as fresh as a compacted revision is still fine: %v", err)
	}
}

// tokenFor returns a real continue token of a source over prefix (which needs two keys).
func tokenFor(t *testing.T, c *clientv3.Client, prefix string) string {
	put(t, c, prefix+"a", "1")
	put(t, c, prefix+"b", "1")
	l, err := newSource(t, c, prefix, etcd.Options{}).List(context.Background(), informer.ListOptions{Limit: 1})
	if err != nil || l.Continue == "" {
		t.Fatalf("no token: %v", err)
	}
	return l.Continue
}

// readEvents reads a watch until it ends and returns its events as strings
// "Type key=value@revision" and the error it ended with.
// eventString describes ev as "Type key=value"; a delete that carries the key alone says
// so ("Deleted key= (key alone)").
func eventString(ev informer.Event[*item]) string {
	s := ev.Type.String()
	if ev.Type != informer.Bookmark {
		s += " " + ev.Object.Key + "=" + ev.Object.Value
	}
	if ev.LastStateUnknown {
		s += " (key alone)"
	}
	return s
}

func readEvents(w informer.Watch[*item]) ([]string, error) {
	var out []string
	for {
		ev, err := w.Next()
		if err != nil {
			return out, err
		}
		s := eventString(ev)
		out = append(out, s+"@"+ev.Revision)
	}
}

// readBatched is readEvents with " more" after each event the watch said is followed by
// more of its revision (informer.BatchedWatch).
func readBatched(w informer.Watch[*item]) ([]string, error) {
	var out []string
	for {
		ev, err := w.Next()
		if err != nil {
			return out, err
		}
		s := eventString(ev)
		s += "@" + ev.Revision
		if w.(informer.BatchedWatch).MoreAtRevision() {
			s += " more"
		}
		out = append(out, s)
	}
}

// The events of one transaction carry its revision R, and each but the last says more of
// R follow, so that R is reached only when the whole transaction has been delivered. When
// the last events of a response do not decode, a bookmark stands in for them.
func TestWatchTransactionRevisions(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/tx/"
	put(t, c, p+"a", "0")
	start := put(t, c, p+"z", "0")
	src := newSource(t, c, p, etcd.Options{})
	r1 := txn(t, c, clientv3.OpPut(p+"a", "1"), clientv3.OpPut(p+"b", "1"), clientv3.OpDelete(p+"z"))
	r2 := put(t, c, p+"c", "1")
	r3 := txn(t, c, clientv3.OpPut(p+"d", "1"), clientv3.OpPut(p+"e", "!bad"))
	r4 := txn(t, c, clientv3.OpPut(p+"f", "!bad"), clientv3.OpPut(p+"g", "!bad"))

	for _, allow := range []bool{true, false} {
		w, err := src.Watch(context.Background(), informer.WatchOptions{Revision: etcd.FormatRevision(start), AllowBookmarks: allow, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		got, err := readBatched(w)
		w.Stop()
		if err != io.EOF {
			t.Fatalf("watch ended with %v", err)
		}
		want := []string{
			fmt.Sprintf("Modified /tx/a=1@%d more", r1),
			fmt.Sprintf("Added /tx/b=1@%d more", r1),
			fmt.Sprintf("Deleted /tx/z=0@%d", r1),
			fmt.Sprintf("Added /tx/c=1@%d", r2),
			// e, which does not decode, is skipped: d is the last event of r3 delivered.
			fmt.Sprintf("Added /tx/d=1@%d", r3),
		}
		if allow { // nothing of r4 decodes: a bookmark says the stream got past it
			want = append(want, fmt.Sprintf("Bookmark@%d", r4))
		}
		if !slices.Equal(got, want) {
			t.Errorf("AllowBookmarks %v:\n got %q\nwant %q", allow, got, want)
		}
	}
}

// A delete whose last value etcd has compacted away reaches the decoder as the key with
// a nil value, and the event says it carries the key alone. A decoder that cannot make an
// object of that ends the watch with an expired error, so that the informer relists and
// reports the delete as a tombstone.
func TestDeleteWithoutPreviousValue(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/gone/"
	start := put(t, c, p+"k", "1")
	rev := del(t, c, p+"k")
	if _, err := c.Compact(context.Background(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	after := etcd.FormatRevision(start) // the watch starts at the delete, the compacted revision

	src := newSource(t, c, p, etcd.Options{})
	w, err := src.Watch(context.Background(), informer.WatchOptions{Revision: after, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got, err := readEvents(w)
	w.Stop()
	if want := []string{fmt.Sprintf("Deleted /gone/k= (key alone)@%d", rev)}; err != io.EOF || !slices.Equal(got, want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}

	errs := new(testkit.Errors)
	strict, err := etcd.New(c, p, func(key, value []byte) (*item, error) {
		if value == nil {
			return nil, errors.New("no value")
		}
		return decodeItem(key, value)
	}, etcd.Options{OnDecodeError: errs.Report})
	if err != nil {
		t.Fatal(err)
	}
	w, err = strict.Watch(context.Background(), informer.WatchOptions{Revision: after})
	if err != nil {
		t.Fatal(err)
	}
	got, err = readEvents(w)
	w.Stop()
	if len(got) != 0 || !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("strict decoder: got %q, %v; want ErrExpired", got, err)
	}
	var de *etcd.DecodeError
	if reported := errs.All(); len(reported) != 1 || !errors.As(reported[0], &de) || !de.Deleted || de.Key != p+"k" || de.Revision != rev {
		t.Fatalf("reported %v", reported)
	}
	if strict.DecodeErrors() != 1 {
		t.Errorf("DecodeErrors() = %d", strict.DecodeErrors())
	}
}

// A watch that falls behind a compaction receives a delete without the key's last value:
// etcd compacted it away before the watch delivered the delete. The event carries the key
// alone, marked LastStateUnknown, and the informer hands OnDelete the state its handlers
// saw last, as an observed delete.
func TestDeleteBehindCompactionGetsCachedState(t *testing.T) {
	srv, direct := startWithClient(t)
	px := startProxy(t, srv.Endpoint())
	const p = "/behind/"
	put(t, direct, p+"a", "1")
	start := put(t, direct, p+"k", "1")
	src := newSource(t, newClient(t, px.Addr()), p, etcd.Options{})
	inf, rec := startInformer(t, src, informer.Options[string, *item]{}, nil)
	rec.ExpectNext(t, "add*/behind/a=1", "add*/behind/k=1")

	// Cut off at start, the informer resumes its watch at start+1 once let through. The
	// delete is that revision, and etcd, compacted there, serves the watch but no longer
	// has the key's value before the delete.
	px.Cut()
	rev := del(t, direct, p+"k")
	if _, err := direct.Compact(context.Background(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if rev != start+1 {
		t.Fatalf("the delete is at revision %d, want %d", rev, start+1)
	}
	px.Resume()
	rec.ExpectNext(t, "delete /behind/k=1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitForRevision(t, ctx, inf, src, rev)
	assertMirrors(t, inf, src, direct, p)
	rec.ExpectNoMore(t)
	if n := inf.Stats().Expirations; n != 0 {
		t.Errorf("%d expirations: the delete was to come through the watch, not a relist", n)
	}
}

// A transaction whose delete cannot be decoded is not delivered whole: the changes before
// it say that more of their revision follow, so that the informer never reaches it, and
// the watch ends expired.
func TestWatchIncompleteTransactionSaysMore(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/part/"
	start := put(t, c, p+"k", "1")
	rev := txn(t, c, clientv3.OpPut(p+"a", "1"), clientv3.OpDelete(p+"k"))
	if _, err := c.Compact(context.Background(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	strict, err := etcd.New(c, p, func(key, value []byte) (*item, error) {
		if value == nil {
			return nil, errors.New("no value")
		}
		return decodeItem(key, value)
	}, etcd.Options{OnDecodeError: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := strict.Watch(context.Background(), informer.WatchOptions{Revision: etcd.FormatRevision(start)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := readBatched(w)
	w.Stop()
	if want := []string{fmt.Sprintf("Added /part/a=1@%d more", rev)}; !slices.Equal(got, want) || !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("got %q, %v; want %q and ErrExpired", got, err, want)
	}
}

// Every way a watch ends, and what Next returns then.
func TestWatchEnds(t *testing.T) {
	srv, c := startWithClient(t)
	const p = "/end/"
	rev := put(t, c, p+"a", "1")
	src := newSource(t, c, p, etcd.Options{})
	from := etcd.FormatRevision(rev)

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		w, err := src.Watch(context.Background(), informer.WatchOptions{Revision: from, Timeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := w.Next(); err != io.EOF || time.Since(start) < 200*time.Millisecond {
			t.Fatalf("Next: %v after %v, want io.EOF after the timeout", err, time.Since(start))
		}
		if _, err := w.Next(); err != io.EOF {
			t.Fatalf("Next after the end: %v", err)
		}
	})
	t.Run("stop", func(t *testing.T) {
		w, err := src.Watch(context.Background(), informer.WatchOptions{Revision: from})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { _, err := w.Next(); done <- err }()
		w.Stop()
		w.Stop()
		if err := <-done; err == nil || err == io.EOF {
			t.Fatalf("Next after Stop: %v", err)
		}
	})
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := src.Watch(ctx, informer.WatchOptions{Revision: from})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		cancel()
		if _, err := w.Next(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next after cancel: %v", err)
		}
		if _, err := src.Watch(ctx, informer.WatchOptions{Revision: from}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch with a cancelled context: %v", err)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		if _, err := src.Watch(context.Background(), informer.WatchOptions{Revision: "-3"}); !errors.Is(err, informer.ErrBadInput) {
			t.Fatalf("bad revision: %v", err)
		}
		if _, err := src.Watch(context.Background(), informer.WatchOptions{SendInitialEvents: true}); !errors.Is(err, informer.ErrNotSupported) {
			t.Fatalf("streaming list: %v", err)
		}
	})
	t.Run("compacted", func(t *testing.T) {
		r := put(t, c, p+"b", "1")
		put(t, c, p+"b", "2")
		if _, err := c.Compact(context.Background(), r+1); err != nil {
			t.Fatal(err)
		}
		w, err := src.Watch(context.Background(), informer.WatchOptions{Revision: from})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := w.Next(); !errors.Is(err, informer.ErrExpired) {
			t.Fatalf("Next: %v, want ErrExpired", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		px := startProxy(t, srv.Endpoint())
		pc := newClient(t, px.Addr())
		src := newSource(t, pc, p, etcd.Options{RequestTimeout: 300 * time.Millisecond})
		if _, err := src.List(context.Background(), informer.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		px.Cut()
		if _, err := src.List(context.Background(), informer.ListOptions{}); !errors.Is(err, informer.ErrUnavailable) {
			t.Fatalf("List while cut off: %v, want ErrUnavailable", err)
		}
		if _, err := src.Watch(context.Background(), informer.WatchOptions{Revision: from}); !errors.Is(err, informer.ErrUnavailable) {
			t.Fatalf("Watch while cut off: %v, want ErrUnavailable", err)
		}
		if src.Prefix() != p {
			t.Errorf("Prefix() = %q", src.Prefix())
		}
	})
}

func TestCompareRevisions(t *testing.T) {
	srv := startServer(t, serverOptions{})
	src := newSource(t, newClient(t, srv.Endpoint()), "/x/", etcd.Options{})
	tests := []struct {
		a, b string
		want int
		err  bool
	}{
		{"1", "2", -1, false},
		{"2", "1", 1, false},
		{"42", "42", 0, false},
		{"9", "10", -1, false},
		{"9223372036854775807", "0", 1, false},
		{"", "1", 0, true},
		{"1", "x", 0, true},
		{"-1", "1", 0, true},
		{"1.5", "1", 0, true},
	}
	for _, tc := range tests {
		got, err := src.CompareRevisions(tc.a, tc.b)
		if (err != nil) != tc.err || got != tc.want || (err != nil && !errors.Is(err, informer.ErrBadInput)) {
			t.Errorf("CompareRevisions(%q, %q) = %d, %v; want %d, error %v", tc.a, tc.b, got, err, tc.want, tc.err)
		}
	}
}

func TestNewRejectsNil(t *testing.T) {
	if _, err := etcd.New[*item](nil, "/x/", decodeItem, etcd.Options{}); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := etcd.New[*item](&clientv3.Client{}, "/x/", nil, etcd.Options{}); err == nil {
		t.Error("nil decoder accepted")
	}
}

// Pages are bounded in bytes as well as keys: after a first page of at most 32 keys, each
// page holds about Options.PageBytes of key-values, however large Limit is.
func TestListPagesBoundedByBytes(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/big/"
	value := strings.Repeat("v", 10000)
	for i := range 40 {
		put(t, c, fmt.Sprintf("%s%02d", p, i), value)
	}
	src := newSource(t, c, p, etcd.Options{PageBytes: 30000})
	opts := informer.ListOptions{Limit: etcd.DefaultPageSize}
	var sizes []int
	total := 0
	for {
		l, err := src.List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(l.Items))
		total += len(l.Items)
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	// 32 keys of 10,005 bytes, then 30,000 bytes a page: 2 keys.
	if total != 40 || sizes[0] != 32 || len(sizes) != 5 || slices.Max(sizes[1:]) != 2 {
		t.Fatalf("page sizes %v (%d keys), want 32 then pages of 2", sizes, total)
	}
}

// The pages after a list's first are read from one RangeStream: the same keys, in order,
// at the first page's revision, as a Get per page would read; the stream is parked for the
// page its token asks for and let go after the last. A page whose stream ended with the
// caller's context, and a token that no parked stream waits for, are read with a Get.
func TestListPagesFromOneStream(t *testing.T) {
	_, c := startWithClient(t)
	const prefix, n, limit = "/streamed/", 2000, 300
	fill(t, c, prefix, n)
	want, err := c.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(t, c, prefix, etcd.Options{})
	keys := func(l informer.List[*item]) string {
		var b strings.Builder
		for _, it := range l.Items {
			b.WriteString(it.Key + " ")
		}
		return b.String()
	}
	var all strings.Builder
	var tokens []string
	var pages []informer.List[*item]
	first, cancelFirst := context.WithCancel(context.Background())
	ctx := first
	opts := informer.ListOptions{Limit: limit}
	for i := 0; ; i++ {
		l, err := src.List(ctx, opts)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if l.Revision != etcd.FormatRevision(want.Header.Revision) {
			t.Fatalf("page %d at revision %s, want %d", i, l.Revision, want.Header.Revision)
		}
		all.WriteString(keys(l))
		pages = append(pages, l)
		if i >= 1 && l.Continue != "" && etcd.ParkedToken(src) != l.Continue {
			t.Fatalf("after page %d no stream is parked for the next page", i)
		}
		if i == 2 {
			cancelFirst() // the stream ends with the context it was opened with
			ctx = context.Background()
		}
		if l.Continue == "" {
			break
		}
		tokens = append(tokens, l.Continue)
		opts.Continue = l.Continue
	}
	cancelFirst()
	if got := etcd.ParkedToken(src); got != "" {
		t.Fatalf("a stream is still parked after the last page (for %q)", got)
	}
	var wantKeys strings.Builder
	for _, kv := range want.Kvs {
		wantKeys.WriteString(string(kv.Key) + " ")
	}
	if all.String() != wantKeys.String() {
		t.Fatalf("the pages hold %d keys, not the %d of one Get in its order", strings.Count(all.String(), " "), len(want.Kvs))
	}
	if len(pages) != 1+(n-32+limit-1)/limit {
		t.Errorf("%d pages, want a first of 32 keys and then %d each", len(pages), limit)
	}
	// A token again: no stream waits for it, a Get reads the same page. (The stream it
	// parks ends with againCtx, at the end of the test, not 30 s later when idle.)
	againCtx, cancelAgain := context.WithCancel(context.Background())
	defer cancelAgain()
	again, err := src.List(againCtx, informer.ListOptions{Limit: limit, Continue: tokens[0]})
	if err != nil || keys(again) != keys(pages[1]) || again.Continue != pages[1].Continue {
		t.Fatalf("page 1 read again by its token: %v, %d keys; want the page as first read (%d keys)", err, len(again.Items), len(pages[1].Items))
	}
	if tok := etcd.ParkedToken(src); tok != again.Continue {
		t.Fatalf("the page read again parked no stream for the next")
	}
}

// A list's stream that is let go before its end — replaced by another list's, or ended
// with its caller's context — leaves no goroutine behind: etcd's client sends the stream's
// chunks from a goroutine that blocks on a full channel, whatever its context says, until
// someone reads them.
func TestAbandonedListStreamEnds(t *testing.T) {
	_, c := startWithClient(t)
	const prefix, limit = "/abandoned/", 100
	fill(t, c, prefix, 3000)
	src := newSource(t, c, prefix, etcd.Options{})
	before := goleak.IgnoreCurrent()
	// twoPages reads a list's first two pages: the second opens a stream, parked for the
	// third.
	twoPages := func(ctx context.Context) string {
		t.Helper()
		l, err := src.List(ctx, informer.ListOptions{Limit: limit})
		if err == nil {
			l, err = src.List(ctx, informer.ListOptions{Limit: limit, Continue: l.Continue})
		}
		if err != nil || l.Continue == "" || etcd.ParkedToken(src) != l.Continue {
			t.Fatalf("no stream parked after two pages (%v)", err)
		}
		return l.Continue
	}
	twoPages(context.Background()) // replaced by the next list's stream
	cancelled, cancel := context.WithCancel(context.Background())
	twoPages(cancelled)
	cancel() // ends with its caller's context
	token := twoPages(context.Background())
	for token != "" { // the last list read to its end
		l, err := src.List(context.Background(), informer.ListOptions{Limit: limit, Continue: token})
		if err != nil {
			t.Fatal(err)
		}
		token = l.Continue
	}
	if err := testkit.FindLeaks(before); err != nil {
		t.Fatalf("goroutines left by the lists' streams: %v", err)
	}
}
