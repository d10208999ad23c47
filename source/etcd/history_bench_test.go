package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/etcd"
)

// unproven is a Source without ProveHistory: a warm start over it trusts the saved state.
type unproven struct{ src *etcd.Source[*item] }

func (u unproven) List(ctx context.Context, opts informer.ListOptions) (informer.List[*item], error) {
	return u.src.List(ctx, opts)
}

func (u unproven) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*item], error) {
	return u.src.Watch(ctx, opts)
}

func (u unproven) CompareRevisions(a, b string) (int, error)    { return u.src.CompareRevisions(a, b) }
func (u unproven) SourceID(ctx context.Context) (string, error) { return u.src.SourceID(ctx) }
func (u unproven) DefaultPageSize() int64                       { return u.src.DefaultPageSize() }

// BenchmarkHistoryProof measures, in one run over ETCD_BENCH_OBJECTS keys of about 1 KiB
// (default 20,000) with 100 changes since the snapshot was saved: the history proof of a
// warm start alone (a keys-only range at the saved revision, compared with the saved
// objects' ModRevisions), the warm start with it and without it, and the cold start (a
// list); each start ends when the informer holds etcd's last change. For the issue's
// figures:
//
//	ETCD_BENCH_OBJECTS=100000 go test -run '^$' -bench HistoryProof -benchtime 5x -timeout 30m ./source/etcd/
func BenchmarkHistoryProof(b *testing.B) {
	n := 20000
	if s := os.Getenv("ETCD_BENCH_OBJECTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("ETCD_BENCH_OBJECTS=%q", s)
		}
	}
	srv, c := startWithClient(b)
	const prefix = "/bench/proof/"
	putMany(b, c, prefix+"%08d", n, strings.Repeat("x", 1000))
	src, err := etcd.NewKV(newClient(b, srv.Endpoint()), prefix, decodeKV, etcd.Options{})
	if err != nil {
		b.Fatal(err)
	}
	f, err := persist.New[string, *item](b.TempDir(), persist.Options[*item]{Interval: -1})
	if err != nil {
		b.Fatal(err)
	}
	opts := func(p informer.Persister[string, *item]) informer.Options[string, *item] {
		return informer.Options[string, *item]{Key: itemKey, Persist: p, Revision: modRevision, Logger: slog.New(slog.DiscardHandler)}
	}
	saver, err := informer.New(src, opts(f))
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := run(saver)
	if informer.WaitForCacheSync(ctx, saver) != nil {
		b.Fatal("no sync")
	}
	sn := saver.Snapshot()
	savedRev, revisions := sn.Revision(), make([]string, 0, sn.Len())
	for _, it := range sn.All() {
		revisions = append(revisions, modRevision(it))
	}
	stop()
	var last int64
	for i := range 100 {
		last = put(b, c, fmt.Sprintf("%s%08d", prefix, i*(n/100)), "changed")
	}

	b.Run("proof", func(b *testing.B) {
		for b.Loop() {
			if err := src.ProveHistory(context.Background(), savedRev, revisions); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
	})
	for _, mode := range []string{"warm", "warm-unproven", "cold"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				b.StartTimer()
				var lw informer.ListerWatcher[*item] = src
				var p informer.Persister[string, *item] = f
				switch mode {
				case "warm-unproven":
					lw = unproven{src}
				case "cold":
					p = nil
				}
				inf, err := informer.New(lw, opts(p))
				if err != nil {
					b.Fatal(err)
				}
				ctx, stop := run(inf)
				if err := inf.WaitForRevision(ctx, etcd.FormatRevision(last)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if inf.Len() != n || mode != "cold" && inf.Stats().Lists != 0 {
					b.Fatalf("%d objects, %d lists; want %d objects, no list", inf.Len(), inf.Stats().Lists, n)
				}
				stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
		})
	}
}
