package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// BenchmarkFailover measures how long N client informers of one replica take to fail
// over to another when it dies: from the kill to every client holding a change written
// just after it (WaitForRevision), and how many relists that cost (reported as relists/op;
// it should be 0). Clients back off 10 ms to 100 ms between attempts.
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 1x ./source/http/
func BenchmarkFailover(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint("clients=", n), func(b *testing.B) { benchmarkFailover(b, n) })
	}
}

func benchmarkFailover(b *testing.B, n int) {
	quiet := slog.New(slog.DiscardHandler)
	var total time.Duration
	var relists uint64
	for range b.N {
		b.StopTimer()
		src := memory.New(wiretest.ObjName, memory.Options{})
		for i := range 100 {
			wiretest.Put(src, fmt.Sprint("k", i), "0")
		}
		opts := ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxWatchersPerClient: -1, MaxListsPerClient: -1, MaxLists: -1}}
		_, tsA, killA := startReplica(b, startUpstream(b, src, "a", true), opts)
		_, tsB, _ := startReplica(b, startUpstream(b, src, "b", true), opts)
		transport := &http.Transport{MaxIdleConnsPerHost: n}
		b.Cleanup(transport.CloseIdleConnections)
		hc := &http.Client{Transport: transport}
		infs := make([]*informer.Informer[string, *wiretest.Obj], n)
		for i := range infs {
			c := newTestClient(b, tsA.URL, httpsource.ClientOptions[*wiretest.Obj]{HTTPClient: hc, StreamingList: true, FailoverURLs: []string{tsB.URL}})
			inf, err := informer.New(c.Ordered(), informer.Options[string, *wiretest.Obj]{
				Key: wiretest.ObjKey, Logger: quiet, ErrorHandler: func(error) {},
				Backoff: informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
			})
			if err != nil {
				b.Fatal(err)
			}
			wiretest.Run(b, inf)
			infs[i] = inf
		}
		for _, inf := range infs {
			<-inf.Synced()
		}
		before := uint64(0)
		for _, inf := range infs {
			before += inf.Stats().Relists
		}
		b.StartTimer()
		start := time.Now()
		killA()
		rev := strconv.FormatInt(wiretest.Put(src, "k0", "1"), 10)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for _, inf := range infs {
			if err := inf.WaitForRevision(ctx, rev); err != nil {
				b.Fatalf("WaitForRevision(%s): %v", rev, err)
			}
		}
		cancel()
		total += time.Since(start)
		b.StopTimer()
		for _, inf := range infs {
			relists += inf.Stats().Relists
		}
		relists -= before
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-fail-over")
	b.ReportMetric(float64(relists)/float64(b.N), "relists/op")
}
