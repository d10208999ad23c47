package etcd_test

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
)

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
