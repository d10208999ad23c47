package fanout

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// The figures of the fan-out tier (source/http/README.md, "Fan-out figures"). Every
// watcher is a bare socket in the same process, so that the figures are the server's.

// raiseFileLimit raises the soft limit on open files to at least n (each watcher here
// takes two descriptors: its socket and the server's).
func raiseFileLimit(tb testing.TB, n uint64) {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		tb.Skipf("needs %d open files; the hard limit is %d", n, lim.Max)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Skipf("setrlimit: %v", err)
	}
}

// fanoutServer starts a Server over an idle upstream with the filter index "team", on a
// loopback http.Server set up as the README says (ConnContext), with no limit on
// watchers per client (they all come from 127.0.0.1).
func fanoutServer(tb testing.TB, opts ServerOptions[*wiretest.Obj]) (*Server[string, *wiretest.Obj], string) {
	tb.Helper()
	up := newUpstream(tb, memory.Options{})
	opts.Filters = filterOptions().Filters
	opts.MaxWatchersPerClient = -1
	opts.MaxWatchers = -1
	s := newServer(tb, up, opts)
	return s, startServer(tb, s).Listener.Addr().String()
}

// watchConn opens a watch on a bare socket; readBuffer > 0 caps its receive buffer
// (SO_RCVBUF, set before connecting so that the TCP window is small from the start).
func watchConn(tb testing.TB, addr, query string, readBuffer int) net.Conn {
	tb.Helper()
	d := net.Dialer{}
	if readBuffer > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, readBuffer)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	return dialGet(tb, &d, addr, query)
}

// BenchmarkFilterDispatch measures one change of an object on team "x" (encode, log,
// index, dispatch to the one watcher of "x") while `others` filtered watchers wait on
// other values, each its own: the cost must not grow with them.
func BenchmarkFilterDispatch(b *testing.B) {
	for _, others := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			src := memory.New(wiretest.ObjName, memory.Options{})
			inf, err := informer.New(src, informer.Options[string, *wiretest.Obj]{Key: wiretest.ObjKey, Indexers: testIndexes()})
			if err != nil {
				b.Fatal(err)
			}
			srv, err := NewServer(inf, ServerOptions[*wiretest.Obj]{HistoryLimit: 1000, Filters: filterOptions().Filters})
			if err != nil {
				b.Fatal(err)
			}
			h := srv.mirror.filters
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			open := func(value string) *filterWatch[string, *wiretest.Obj] {
				w, err := h.Watch(ctx, valueFilter{Index: "team", Value: value}, informer.WatchOptions{})
				if err != nil {
					b.Fatal(err)
				}
				fw := w.(*filterWatch[string, *wiretest.Obj])
				h.mu.Lock() // blocked in Next, as a served watcher that has caught up is
				fw.fv.waiters.Add(fw)
				h.mu.Unlock()
				b.Cleanup(fw.Stop)
				return fw
			}
			for i := range others {
				open(fmt.Sprint("other", i))
			}
			x := open("x")
			objs := make([]*wiretest.Obj, 1024)
			for i := range objs {
				objs[i] = &wiretest.Obj{Name: fmt.Sprintf("k%02d", i%64), Val: fmt.Sprint("x:", i)}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				srv.mirror.put(objs[i%len(objs)])
				h.mu.Lock() // the watcher of "x" takes its event and waits again
				x.next = x.fv.dropped + int64(len(x.fv.history))
				x.fv.waiters.Add(x)
				h.mu.Unlock()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkFanoutWatcherMemory measures what an idle watcher costs the process serving
// it, at 1,000 and 5,000 watchers, unfiltered and filtered (all on one value): the live
// heap and stacks after GC, with every watcher sent one change, minus before they
// opened, per watcher. The bare client sockets (a few hundred bytes each) are included.
// A first round, not reported, warms the process up. It measures as
// BenchmarkWatcherCost does (heapAndStacks), whose figure is the one the documentation
// states.
func BenchmarkFanoutWatcherMemory(b *testing.B) {
	for _, kind := range []string{"unfiltered", "filtered"} {
		for _, n := range []int{1000, 5000} {
			b.Run(fmt.Sprintf("%s/watchers=%d", kind, n), func(b *testing.B) {
				raiseFileLimit(b, uint64(2*n+1024))
				srv, addr := fanoutServer(b, ServerOptions[*wiretest.Obj]{})
				query := "watch=1&resourceVersion="
				if kind == "filtered" {
					query = "watch=1&index=team&value=payments&resourceVersion="
				}
				for i := -1; i < b.N; i++ { // a first round, not reported, warms the process up
					from := srv.Revision()
					heap0, stacks0 := heapAndStacks()
					conns := make([]net.Conn, n)
					for j := range conns {
						conns[j] = watchConn(b, addr, query+from, 0)
					}
					wiretest.Eventually(b, "the watchers to open", func() bool { return srv.Stats().OpenWatches == int64(n) })
					val := fmt.Sprint("payments:", i)
					srv.mirror.put(&wiretest.Obj{Name: "a", Val: val})
					for _, c := range conns { // each has its change: the server is idle again
						_ = c.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
						resp, err := http.ReadResponse(bufio.NewReaderSize(c, 1024), nil)
						if err != nil {
							b.Fatal(err)
						}
						if l, err := bufio.NewReaderSize(resp.Body, 1024).ReadString('\n'); err != nil || !strings.Contains(l, val) {
							b.Fatalf("%q %v", l, err)
						}
					}
					if heap, stacks := heapAndStacks(); i >= 0 {
						b.ReportMetric(float64(int64(heap+stacks-heap0-stacks0))/float64(n), "B/watcher")
					}
					for _, c := range conns {
						c.Close()
					}
					wiretest.Eventually(b, "the watchers to close", func() bool { return srv.Stats().OpenWatches == 0 })
				}
			})
		}
	}
}

// arrival is a change a healthy watcher read: the sequence number in its value
// "payments:<n>:…", and when.
type arrival struct {
	seq int
	at  time.Time
}

// newHealthyWatcher reads a watch and sends each change it reads; the channel is closed
// when the watch ends.
func newHealthyWatcher(tb testing.TB, addr, query string) <-chan arrival {
	conn := watchConn(tb, addr, query, 0)
	arrived := make(chan arrival, 1)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("healthy watch: %v %v", resp, err)
	}
	go func() {
		r := bufio.NewReaderSize(resp.Body, 64<<10)
		for {
			l, err := r.ReadSlice('\n')
			if err != nil {
				close(arrived)
				return
			}
			now := time.Now()
			_, rest, _ := strings.Cut(string(l), `"val":"payments:`)
			seq, _, _ := strings.Cut(rest, ":")
			n, err := strconv.Atoi(seq)
			if err != nil {
				continue
			}
			arrived <- arrival{seq: n, at: now}
		}
	}()
	return arrived
}

// BenchmarkFanoutStalledLatency measures the delivery latency of a change to a healthy
// watcher while 1,000 other watchers of the same changes do not read their connections,
// against its latency in the same run without them (unloaded). The two alternate three
// times (the stalled watchers connect, are measured beside, and disconnect), so that the
// noise of a shared machine falls on both alike. Changes of 1 KiB are made one at a
// time: each is timed from the server's handler receiving it to the healthy watcher
// reading its line. The stalled watchers' sockets are small (4 KiB receive buffer,
// SendBuffer 16 KiB), so that they fill within the first 100 changes of a round, which
// are not measured, and their writers block; WriteTimeout is 5 minutes, so that none is
// disconnected during the run.
func BenchmarkFanoutStalledLatency(b *testing.B) {
	const stalled, warm, measured, rounds = 1000, 100, 1000, 3
	raiseFileLimit(b, 2*stalled+1024)
	pad := strings.Repeat("p", 1<<10)
	for i := 0; i < b.N; i++ {
		srv, addr := fanoutServer(b, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{WriteTimeout: 5 * time.Minute, SendBuffer: 16 << 10}})
		healthy := newHealthyWatcher(b, addr, "watch=1&resourceVersion="+srv.Revision())
		seq := 0
		run := func(lat []time.Duration, n int) []time.Duration {
			for range n {
				seq++
				start := time.Now()
				srv.mirror.put(&wiretest.Obj{Name: fmt.Sprint("k", seq%100), Val: fmt.Sprintf("payments:%d:%s", seq, pad)})
				a, ok := <-healthy
				if !ok || a.seq != seq {
					b.Fatalf("healthy watcher read change %d (open: %v), want %d", a.seq, ok, seq)
				}
				lat = append(lat, a.at.Sub(start))
			}
			return lat
		}
		var unloaded, loaded []time.Duration
		run(nil, warm)
		for range rounds {
			unloaded = run(unloaded, measured)
			from := srv.Revision()
			conns := make([]net.Conn, stalled)
			for j := range conns {
				conns[j] = watchConn(b, addr, "watch=1&resourceVersion="+from, 4<<10)
			}
			wiretest.Eventually(b, "the stalled watchers to open", func() bool { return srv.Stats().OpenWatches == stalled+1 })
			run(nil, warm) // fills the stalled watchers' sockets
			loaded = run(loaded, measured)
			for _, c := range conns {
				c.Close()
			}
			wiretest.Eventually(b, "the stalled watchers to go", func() bool { return srv.Stats().OpenWatches == 1 })
		}
		if ev := srv.Stats().Evicted; ev != 0 {
			b.Fatalf("%d watchers were disconnected for stalling", ev)
		}
		p := func(lat []time.Duration, q float64) float64 {
			s := slices.Clone(lat)
			slices.Sort(s)
			return float64(s[int(q*float64(len(s)-1))].Microseconds())
		}
		b.ReportMetric(p(unloaded, 0.50), "unloaded-p50-µs")
		b.ReportMetric(p(unloaded, 0.99), "unloaded-p99-µs")
		b.ReportMetric(p(loaded, 0.50), "stalled-p50-µs")
		b.ReportMetric(p(loaded, 0.99), "stalled-p99-µs")
		b.ReportMetric(p(loaded, 0.99)/p(unloaded, 0.99), "p99-ratio")
	}
}

// BenchmarkFanoutThousandWatchers measures changes fanned out to 1,000 watchers over
// loopback: 5,000 changes of about 60 bytes, made as fast as the server takes them,
// while every watcher reads its stream to the end; unfiltered, and filtered with all
// 1,000 on the changes' value. It reports changes/s (each reaching all 1,000 watchers)
// and deliveries/s.
func BenchmarkFanoutThousandWatchers(b *testing.B) {
	const changes, watchers = 5000, 1000
	for _, kind := range []string{"unfiltered", "filtered"} {
		b.Run(kind, func(b *testing.B) {
			raiseFileLimit(b, 2*watchers+1024)
			srv, addr := fanoutServer(b, ServerOptions[*wiretest.Obj]{HistoryLimit: changes})
			query := "watch=1&resourceVersion="
			if kind == "filtered" {
				query = "watch=1&index=team&value=payments&resourceVersion="
			}
			var total time.Duration
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				objs := make([]*wiretest.Obj, changes)
				for c := range objs {
					objs[c] = &wiretest.Obj{Name: fmt.Sprintf("object-%03d", c%500), Val: fmt.Sprint("payments:", i*changes+c)}
				}
				from := srv.Revision()
				var ready, done sync.WaitGroup
				errs := make(chan error, watchers)
				for range watchers {
					conn := watchConn(b, addr, query+from, 0)
					ready.Add(1)
					done.Add(1)
					go func() {
						defer done.Done()
						defer conn.Close()
						readWatch(conn, changes, &ready, errs)
					}()
				}
				ready.Wait()
				wiretest.Eventually(b, "the watchers to open", func() bool { return srv.Stats().OpenWatches == watchers })
				b.StartTimer()
				start := time.Now()
				for _, o := range objs {
					srv.mirror.put(o)
				}
				done.Wait()
				total += time.Since(start)
				b.StopTimer()
				select {
				case err := <-errs:
					b.Fatal(err)
				default:
				}
				wiretest.Eventually(b, "the watchers to close", func() bool { return srv.Stats().OpenWatches == 0 })
			}
			n := float64(b.N * changes)
			b.ReportMetric(n/total.Seconds(), "changes/s")
			b.ReportMetric(n*watchers/total.Seconds(), "deliveries/s")
		})
	}
}

// readWatch reads a raw watch's response on conn and then n event lines, calling
// ready.Done once the response's header is in; a failure goes to errs.
func readWatch(conn net.Conn, n int, ready *sync.WaitGroup, errs chan<- error) {
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	ready.Done()
	if err != nil {
		errs <- err
		return
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for range n {
		if _, err := r.ReadSlice('\n'); err != nil {
			errs <- err
			return
		}
	}
}

// BenchmarkServerFanout measures a Server sending 100,000 changes to 100 watchers over
// loopback TCP: each iteration writes the changes into the server (as its informer
// handler does: encode once, log once) while every watcher reads its stream to the end.
// It reports changes/s (each reaching all 100 watchers), deliveries/s (changes ×
// watchers) and the allocations per change and per delivery of the whole process while the
// changes flow: the server's, since the objects are made beforehand and the watchers'
// readers allocate nothing per line.
//
// With an ordered upstream ("upstream revisions") each change is its own batch: the
// server logs it at the revision its informer reached (OnRevision), the most a batch can
// cost per change; with an unordered one ("own numbering") it logs it at once.
func BenchmarkServerFanout(b *testing.B) {
	b.Run("upstream revisions", func(b *testing.B) { benchmarkServerFanout(b, true) })
	b.Run("own numbering", func(b *testing.B) { benchmarkServerFanout(b, false) })
}

func benchmarkServerFanout(b *testing.B, ordered bool) {
	const changes, watchers = 100_000, 100
	src := memory.New(wiretest.ObjName, memory.Options{})
	var lw informer.ListerWatcher[*wiretest.Obj] = src
	if !ordered {
		lw = unordered{src}
	}
	inf, err := informer.New(lw, informer.Options[string, *wiretest.Obj]{Key: wiretest.ObjKey})
	if err != nil {
		b.Fatal(err)
	}
	wiretest.Run(b, inf)
	srv, err := NewServer(inf, ServerOptions[*wiretest.Obj]{HistoryLimit: changes})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer func() {
		_ = srv.Shutdown(context.Background())
		ts.Close()
	}()
	<-srv.Synced()
	addr := ts.Listener.Addr().String()

	b.ReportAllocs()
	var total time.Duration
	var mallocs uint64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		objs := make([]*wiretest.Obj, changes) // made beforehand: only the server's allocations count
		for c := range objs {
			objs[c] = &wiretest.Obj{Name: fmt.Sprintf("object-%04d", c%1000), Val: fmt.Sprint(i*changes + c)}
		}
		from := srv.Revision()
		var ready, done sync.WaitGroup
		errs := make(chan error, watchers)
		conns := make([]net.Conn, watchers)
		for w := range watchers {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			conns[w] = conn
			fmt.Fprintf(conn, "GET /?watch=1&resourceVersion=%s HTTP/1.1\r\nHost: x\r\n\r\n", from)
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				readWatch(conn, changes, &ready, errs)
			}()
		}
		ready.Wait()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		b.StartTimer()
		start := time.Now()
		for c, o := range objs {
			srv.mirror.put(o)
			if ordered {
				srv.mirror.OnRevision(strconv.Itoa(1 + i*changes + c))
			}
		}
		done.Wait()
		total += time.Since(start)
		b.StopTimer()
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - before
		for _, c := range conns {
			c.Close()
		}
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		b.StartTimer()
	}
	n := float64(b.N * changes)
	b.ReportMetric(n/total.Seconds(), "changes/s")
	b.ReportMetric(n*watchers/total.Seconds(), "deliveries/s")
	b.ReportMetric(float64(mallocs)/n, "allocs/change")
	b.ReportMetric(float64(mallocs)/(n*watchers), "allocs/delivery")
}

// BenchmarkFailover measures how long N client informers of one replica take to fail
// over to another when it dies: from the kill to every client holding a change written
// just after it (WaitForRevision), and how many relists that cost (reported as relists/op;
// it should be 0). Clients back off 10 ms to 100 ms between attempts.
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 1x ./fanout/
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

// heapAndStacks is the heap (spans in use, HeapInuse) and the goroutine stacks in use
// (StackInuse) after two collections, so that nothing left in a sync.Pool is counted:
// the memory an idle watcher holds, measured from outside.
func heapAndStacks() (heap, stacks uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.StackInuse
}

// watcherCost is the state of the process before watchers open.
type watcherCost struct {
	heap, stacks uint64
	goroutines   int
}

// startWatcherCost takes the state of the process before watchers open.
func startWatcherCost() watcherCost {
	heap, stacks := heapAndStacks()
	return watcherCost{heap: heap, stacks: stacks, goroutines: runtime.NumGoroutine()}
}

// report reports what n watchers opened since c cost, per watcher: B/watcher (heap and
// stacks in use), its parts heap-B and stack-B, and goroutines.
func (c watcherCost) report(b *testing.B, n int) {
	heap, stacks := heapAndStacks()
	dh, ds := float64(int64(heap-c.heap))/float64(n), float64(int64(stacks-c.stacks))/float64(n)
	b.ReportMetric(dh+ds, "B/watcher")
	b.ReportMetric(dh, "heap-B/watcher")
	b.ReportMetric(ds, "stack-B/watcher")
	b.ReportMetric(float64(runtime.NumGoroutine()-c.goroutines)/float64(n), "goroutines/watcher")
}

// BenchmarkWatcherCost measures what an idle watcher costs the process serving it: heap
// in use and goroutine stacks in use (heapAndStacks), per watcher, over 1,000 watchers
// that have each received one change; and goroutines per watcher. The clients are bare
// sockets in the same process (a few hundred bytes each, included). A first round, not
// measured, warms the process up. This is the one figure the documentation states
// (B/watcher; heap-B and stack-B are its parts).
func BenchmarkWatcherCost(b *testing.B) {
	const n = 1000
	up := newUpstream(b, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, ts := serve(b, up, ServerOptions[*wiretest.Obj]{})
	addr := ts.Listener.Addr().String()
	for i := -1; i < b.N; i++ {
		from := int64(i + 2) // the log revision: the initial object, then one change a round
		wiretest.Eventually(b, "the server to hold the last change", func() bool { return srv.src.Revision() == from })
		cost := startWatcherCost()
		conns := openWatches(b, srv, addr, n, rev(srv, from))
		val := fmt.Sprint("round", i)
		wiretest.Put(up.src, "a", val)
		for _, c := range conns { // each has its change: the server is idle again
			_ = c.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
			resp, err := http.ReadResponse(bufio.NewReaderSize(c, 1024), nil)
			if err != nil {
				b.Fatal(err)
			}
			if l, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.Contains(l, val) {
				b.Fatalf("%q %v", l, err)
			}
		}
		if i >= 0 {
			cost.report(b, n)
		}
		for _, c := range conns {
			c.Close()
		}
		wiretest.Eventually(b, "the watchers to close", func() bool { return srv.Stats().OpenWatches == 0 })
	}
}

// BenchmarkWatcherCostHTTP2 measures as BenchmarkWatcherCost does, over HTTP/2 (TLS),
// whose watches stay on net/http's path (a stream of a shared connection cannot be taken
// over): 1,000 watches on the streams of a few connections of a Go client in the same
// process, whose side of each stream (its state and buffers) is included, unlike
// BenchmarkWatcherCost's bare sockets.
func BenchmarkWatcherCostHTTP2(b *testing.B) {
	const n = 1000
	raiseFileLimit(b, 2*n+1024)
	up := newUpstream(b, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv := newServer(b, up, ServerOptions[*wiretest.Obj]{})
	ts := httptest.NewUnstartedServer(srv)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	b.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		ts.Close()
	})
	waitSynced(b, srv)
	client := ts.Client()
	line := make([]byte, 1)
	for i := -1; i < b.N; i++ {
		from := int64(i + 2)
		wiretest.Eventually(b, "the server to hold the last change", func() bool { return srv.src.Revision() == from })
		cost := startWatcherCost()
		bodies := make([]io.ReadCloser, n)
		for j := range bodies {
			resp, err := client.Get(ts.URL + "?watch=1&resourceVersion=" + rev(srv, from))
			if err != nil {
				b.Fatal(err)
			}
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
				b.Fatalf("%s %s", resp.Proto, resp.Status)
			}
			bodies[j] = resp.Body
		}
		val := fmt.Sprint("round", i)
		wiretest.Put(up.src, "a", val)
		for _, body := range bodies { // each has its change: the server is idle again
			var got []byte
			for !bytes.HasSuffix(got, []byte("\n")) {
				if _, err := io.ReadFull(body, line); err != nil {
					b.Fatal(err)
				}
				got = append(got, line[0])
			}
			if !bytes.Contains(got, []byte(val)) {
				b.Fatalf("%q", got)
			}
		}
		if i >= 0 {
			cost.report(b, n)
		}
		for _, body := range bodies {
			body.Close()
		}
		wiretest.Eventually(b, "the watchers to close", func() bool { return srv.Stats().OpenWatches == 0 })
	}
}
