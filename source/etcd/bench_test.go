package etcd_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
)

// The benchmarks run etcd in the same process, so client and server share the CPUs; each
// has a "paired" sub-benchmark that times the raw clientv3 baseline and the adapter
// alternately in every iteration and reports their ratio, which stays meaningful on a
// busy machine where separate runs drift.

// decodeCopy is the benchmarks' decoder: the key and the value as strings (a copy, as
// any decoder that keeps data must make).
func decodeCopy(key, value []byte) (*item, error) {
	return &item{Key: string(key), Value: string(value)}, nil
}

// benchValue is a 128-byte value.
var benchValue = `{"team":"payments","replicas":3,"image":"registry.example.com/payments:v1.2.3","limits":{"cpu":"500m"}}` + strings.Repeat(" ", 23)

// BenchmarkInitialSync100k compares a cold informer sync of 100,000 keys with raw clientv3
// reads of the same prefix: one unpaged Get (the fastest raw read, and the goal's
// yardstick) and a Get paged by 500 pinned to the first page's revision. The informer
// runs with the Source's default page size (Source.DefaultPageSize) and, for comparison,
// with pages of 500 and unpaged. Goal: the default informer sync ≤ 1.3× one unpaged raw
// Get ("paired": the two alternate in every iteration and the ratio of their times is
// reported). Each informer sub-benchmark reports peak-heap-MB, the largest heap in use
// seen during the sync (sampled every millisecond, after a GC; etcd runs in the same
// process and counts too), and the unpaged raw Get reports the same for comparison.
func BenchmarkInitialSync100k(b *testing.B) {
	const n = 100000
	srv := startServer(b, serverOptions{})
	c := newClient(b, srv.Endpoint())
	const prefix = "/bench/sync/"
	putMany(b, c, prefix+"%06d", n, benchValue)

	rawPaged := func(b *testing.B) {
		if got := rawPagedGet(b, c, prefix, 500); got != n {
			b.Fatalf("got %d keys", got)
		}
	}
	rawUnpaged := func(b *testing.B) {
		resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix())
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Kvs) != n {
			b.Fatalf("got %d keys", len(resp.Kvs))
		}
	}
	list := func(b *testing.B) {
		src, err := etcd.New(c, prefix, decodeCopy, etcd.Options{})
		if err != nil {
			b.Fatal(err)
		}
		got, opts := 0, informer.ListOptions{Limit: src.DefaultPageSize()}
		for {
			l, err := src.List(context.Background(), opts)
			if err != nil {
				b.Fatal(err)
			}
			got += len(l.Items)
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		if got != n {
			b.Fatalf("got %d keys", got)
		}
	}
	syncWith := func(pageSize, pageBytes int64) func(b *testing.B) {
		return func(b *testing.B) {
			src, err := etcd.New(c, prefix, decodeCopy, etcd.Options{PageBytes: pageBytes})
			if err != nil {
				b.Fatal(err)
			}
			inf, err := informer.New(src, informer.Options[string, *item]{Key: itemKey, PageSize: pageSize})
			if err != nil {
				b.Fatal(err)
			}
			ctx, stop := run(inf)
			if informer.WaitForCacheSync(ctx, inf) != nil || inf.Len() != n {
				b.Fatalf("synced %d keys", inf.Len())
			}
			stop()
		}
	}
	sync := func(pageSize int64) func(b *testing.B) { return syncWith(pageSize, 0) }
	b.Run("clientv3-unpaged-get", func(b *testing.B) { loop(b, n, "keys/s", withPeakHeap(rawUnpaged)) })
	b.Run("clientv3-paged-get-500", func(b *testing.B) { loop(b, n, "keys/s", rawPaged) })
	b.Run("source-list-default-pages", func(b *testing.B) { loop(b, n, "keys/s", list) })
	b.Run("informer-default-pages", func(b *testing.B) { loop(b, n, "keys/s", withPeakHeap(sync(0))) })
	b.Run("informer-pages-500", func(b *testing.B) { loop(b, n, "keys/s", withPeakHeap(sync(500))) })
	b.Run("informer-unpaged", func(b *testing.B) { loop(b, n, "keys/s", withPeakHeap(sync(-1))) })
	b.Run("paired", func(b *testing.B) { paired(b, rawUnpaged, sync(0), false, "informer/unpaged-get-time") })
	b.Run("paired-unpaged", func(b *testing.B) { paired(b, rawUnpaged, sync(-1), false, "informer/unpaged-get-time") })
	b.Run("paired-list", func(b *testing.B) { paired(b, rawUnpaged, list, false, "list/unpaged-get-time") })
	b.Run("paired-pages-500", func(b *testing.B) { paired(b, rawUnpaged, sync(500), false, "informer/unpaged-get-time") })
}

// withPeakHeap runs op while sampling the heap in use every millisecond, and reports the
// largest sample over all iterations as peak-heap-MB (the heap of the benchmark process,
// etcd included, since it runs in the same process).
func withPeakHeap(op func(*testing.B)) func(*testing.B) {
	var peak uint64
	return func(b *testing.B) {
		b.StopTimer()
		runtime.GC() // the garbage of the iteration before does not count
		b.StartTimer()
		stop := testkit.PeakHeap()
		op(b)
		peak = max(peak, stop())
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
	}
}

// rawPagedGet reads prefix in pages pinned to the first page's revision, as a program
// using clientv3 directly would, and returns the number of keys.
func rawPagedGet(b *testing.B, c *clientv3.Client, prefix string, page int64) int {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key, rev, got := prefix, int64(0), 0
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.Get(context.Background(), key, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		got += len(resp.Kvs)
		if !resp.More {
			return got
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// BenchmarkWatchThroughput replays the same 40,000 puts (800 transactions of 50 keys, over
// 1,000 keys) from etcd's history to a raw clientv3.Watch consumer and to the adapter,
// alone and feeding an informer. Goal: adapter ≥ 0.9× the raw consumer's events/s.
//
// The puts are grouped in transactions because etcd replays history to a watch at most
// 1,000 revisions per 100 ms (watchBatchMaxRevs): with one put per revision every
// consumer would measure that server-side limit, about 10,000 events/s.
func BenchmarkWatchThroughput(b *testing.B) {
	const events, keys, perTxn = 40000, 1000, 50
	srv := startServer(b, serverOptions{})
	c := newClient(b, srv.Endpoint())
	const prefix = "/bench/watch/"
	start := put(b, c, "/bench/start", "x")
	ops := make([]clientv3.Op, 0, perTxn)
	for i := 0; i < events; i++ {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%04d", prefix, i%keys), benchValue))
		if len(ops) == perTxn {
			txn(b, c, ops...)
			ops = ops[:0]
		}
	}
	last := put(b, c, "/bench/end", "x")

	raw := func(decode bool) func(b *testing.B) {
		return func(b *testing.B) {
			ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
			defer cancel()
			got := 0
			for resp := range c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(start+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify()) {
				if err := resp.Err(); err != nil {
					b.Fatal(err)
				}
				if decode {
					for _, ev := range resp.Events {
						if _, err := decodeCopy(ev.Kv.Key, ev.Kv.Value); err != nil {
							b.Fatal(err)
						}
					}
				}
				if got += len(resp.Events); got == events {
					return
				}
			}
		}
	}
	watch := func(b *testing.B) {
		src, err := etcd.New(c, prefix, decodeCopy, etcd.Options{})
		if err != nil {
			b.Fatal(err)
		}
		w, err := src.Watch(context.Background(), informer.WatchOptions{Revision: etcd.FormatRevision(start), AllowBookmarks: true})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		for got := 0; got < events; {
			ev, err := w.Next()
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type != informer.Bookmark {
				got++
			}
		}
	}
	mirror := func(b *testing.B) {
		src, err := etcd.New(c, prefix, decodeCopy, etcd.Options{})
		if err != nil {
			b.Fatal(err)
		}
		// An empty list at the start revision, so that the informer replays every event
		// from the watch.
		inf, err := informer.New[string, *item](emptyList{src, etcd.FormatRevision(start)}, informer.Options[string, *item]{Key: itemKey})
		if err != nil {
			b.Fatal(err)
		}
		ctx, stop := run(inf)
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		if err := inf.WaitForRevision(wctx, etcd.FormatRevision(last-1)); err != nil || inf.Len() != keys {
			b.Fatalf("informer at %s with %d keys: %v", inf.Stats().ReceivedRevision, inf.Len(), err)
		}
		wcancel()
		stop()
	}
	b.Run("clientv3-watch", func(b *testing.B) { loop(b, events, "events/s", raw(false)) })
	b.Run("clientv3-watch-decode", func(b *testing.B) { loop(b, events, "events/s", raw(true)) })
	b.Run("source-watch", func(b *testing.B) { loop(b, events, "events/s", watch) })
	b.Run("informer", func(b *testing.B) { loop(b, events, "events/s", mirror) })
	b.Run("paired", func(b *testing.B) { paired(b, raw(false), watch, true, "source/raw-events/s") })
}

// loop runs op b.N times and reports items/s as unit.
func loop(b *testing.B, items int, unit string, op func(*testing.B)) {
	b.ReportAllocs()
	for b.Loop() {
		op(b)
	}
	b.ReportMetric(float64(items)*float64(b.N)/b.Elapsed().Seconds(), unit)
}

// paired runs base and subject alternately, each first every other iteration, and reports
// the ratio of their total times, subject/base, or with throughput set the ratio of their
// throughputs, base/subject time.
func paired(b *testing.B, base, subject func(*testing.B), throughput bool, unit string) {
	var baseTime, subjectTime time.Duration
	timed := func(op func(*testing.B), total *time.Duration) {
		start := time.Now()
		op(b)
		*total += time.Since(start)
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			timed(base, &baseTime)
			timed(subject, &subjectTime)
		} else {
			timed(subject, &subjectTime)
			timed(base, &baseTime)
		}
		i++
	}
	ratio := float64(subjectTime) / float64(baseTime)
	if throughput {
		ratio = 1 / ratio
	}
	b.ReportMetric(ratio, unit)
}

// emptyList is a Source whose List returns nothing at a fixed revision.
type emptyList struct {
	*etcd.Source[*item]
	rev string
}

func (e emptyList) List(context.Context, informer.ListOptions) (informer.List[*item], error) {
	return informer.List[*item]{Revision: e.rev}, nil
}
