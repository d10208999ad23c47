package fanout

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer/source/memory"
)

// The adversarial benchmarks (make adversarial) attack a Server with default options over
// loopback, from many source addresses (127.0.0.0/8 is all loopback on Linux), and report
// what it held and whom it served. They take about a minute, so they run only with
// -adversarial.
var adversarial = flag.Bool("adversarial", false, "run the adversarial benchmarks")

// dialFrom opens a connection to addr from the loopback address 127.0.0.<from> (0: any)
// and sends a GET of query; it reads nothing.
func dialFrom(tb testing.TB, addr string, from byte, query string) net.Conn {
	tb.Helper()
	d := &net.Dialer{}
	if from != 0 {
		d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, from)}
	}
	return dialGet(tb, d, addr, query)
}

// openWatches opens n watches from resourceVersion from on bare sockets to srv at addr and
// waits until the server counts them open.
func openWatches(tb testing.TB, srv *Server[string, *wiretest.Obj], addr string, n int, from string) []net.Conn {
	tb.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialFrom(tb, addr, 0, "watch=1&resourceVersion="+from)
	}
	wiretest.Eventually(tb, "the watchers to open", func() bool { return srv.Stats().OpenWatches == int64(n) })
	return conns
}

// dialGet opens a connection to addr with d, closed at the end of the test, and sends a
// GET of query; it reads nothing.
func dialGet(tb testing.TB, d *net.Dialer, addr, query string) net.Conn {
	tb.Helper()
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET /?%s HTTP/1.1\r\nHost: x\r\n\r\n", query); err != nil {
		tb.Fatal(err)
	}
	return conn
}

// status reads the status code of the response on conn, and no more than its header.
func status(tb testing.TB, conn net.Conn) int {
	tb.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode
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

// BenchmarkAdversarialFairness: one client (127.0.0.2) opens as many watches as it can, and
// starts a paged list a thousand times on one connection; another (127.0.0.3) must still
// be served, and its paged list must still get its second page.
func BenchmarkAdversarialFairness(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	up := newUpstream(b, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	wiretest.Put(up.src, "b", "1")
	srv, ts := serve(b, up, ServerOptions[*wiretest.Obj]{})
	addr := ts.Listener.Addr().String()
	q := "watch=1&resourceVersion=" + rev(srv, 2)
	held, rejected := 0, 0
	for range DefaultMaxWatchersPerClient + 100 {
		switch status(b, dialFrom(b, addr, 2, q)) {
		case 200:
			held++
		case 429:
			rejected++
		}
	}
	start := time.Now()
	victim := dialFrom(b, addr, 3, q)
	served := status(b, victim) == 200
	waited := time.Since(start)

	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}).DialContext}}
	defer hc.CloseIdleConnections()
	resp := wiretest.Get(b, hc, ts.URL+"?limit=1", nil)
	_, tok, _ := strings.Cut(wiretest.Body(b, resp), `"continue":"`)
	tok = tok[:strings.IndexByte(tok, '"')]
	attacker := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	defer attacker.CloseIdleConnections()
	for range 1000 {
		wiretest.Body(b, wiretest.Get(b, attacker, ts.URL+"?limit=1", nil))
	}
	second := wiretest.Get(b, hc, ts.URL+"?limit=1&continue="+tok, nil)
	wiretest.Body(b, second)
	b.ReportMetric(float64(held), "attacker-watches")
	b.ReportMetric(float64(rejected), "attacker-429s")
	b.ReportMetric(float64(boolInt(served)), "victim-served")
	b.ReportMetric(float64(waited.Microseconds())/1000, "victim-ms")
	b.ReportMetric(float64(second.StatusCode), "victim-2nd-page-status")
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// BenchmarkAdversarialStalledLists: 50 full lists of 20,000 objects of 1 KiB (20 MiB
// each) that are never read, from one client and from 50, with the http.Server set up as
// the README says (ConnContext). Reports the heap they hold while stalled.
func BenchmarkAdversarialStalledLists(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	up := newUpstream(b, memory.Options{})
	val := strings.Repeat("v", 1<<10)
	for i := range 20000 {
		wiretest.Put(up.src, fmt.Sprintf("k%05d", i), val)
	}
	srv, err := newServer(b, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{ErrorHandler: func(error) {}}})
	if err != nil {
		b.Fatal(err)
	}
	ts := startServer(b, srv)
	addr := ts.Listener.Addr().String()
	for _, clients := range []int{1, 50} {
		before := testkit.MemInUse()
		served, rejected := 0, 0
		var conns []net.Conn
		for i := range 50 {
			c := dialFrom(b, addr, byte(10+i%clients), "limit=0")
			conns = append(conns, c)
			switch status(b, c) {
			case 200:
				served++
			case 429:
				rejected++
			}
		}
		held := float64(int64(testkit.MemInUse())-int64(before)) / (1 << 20)
		b.ReportMetric(held, fmt.Sprintf("MiB-held-%dclients", clients))
		b.ReportMetric(float64(served), fmt.Sprintf("served-%dclients", clients))
		b.ReportMetric(float64(rejected), fmt.Sprintf("429s-%dclients", clients))
		for _, c := range conns {
			c.Close()
		}
	}
}

// BenchmarkAdversarialSlowReader finds the slowest steady reader that is kept: a watcher
// that reads a large initial state at a fixed rate (halved from 256 KiB/s until it is
// evicted), with WriteTimeout scaled down to 2 s (the slowest rate kept scales with
// 1/WriteTimeout) and the http.Server set up as the README says.
func BenchmarkAdversarialSlowReader(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	const timeout = 2 * time.Second
	up := newUpstream(b, memory.Options{})
	val := strings.Repeat("v", 64<<10)
	for i := range 64 { // 4 MiB
		wiretest.Put(up.src, fmt.Sprintf("k%02d", i), val)
	}
	srv, err := newServer(b, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{WriteTimeout: timeout, ErrorHandler: func(error) {}}})
	if err != nil {
		b.Fatal(err)
	}
	ts := startServer(b, srv)
	addr := ts.Listener.Addr().String()
	slowest := 0
	for rate := 256; rate >= 2; rate /= 2 {
		evicted := srv.Stats().Evicted
		conn := dialFrom(b, addr, 0, "watch=1&sendInitialEvents=true")
		const chunk = 4 << 10
		tick := time.NewTicker(time.Second * chunk / time.Duration(rate<<10))
		buf := make([]byte, chunk)
		end := time.Now().Add(3 * timeout)
		kept := true
		for time.Now().Before(end) {
			<-tick.C
			_ = conn.SetReadDeadline(time.Now().Add(timeout))
			if _, err := io.ReadFull(conn, buf); err != nil || srv.Stats().Evicted != evicted {
				kept = false
				break
			}
		}
		tick.Stop()
		conn.Close()
		b.Logf("%d KiB/s: kept %v", rate, kept)
		if !kept {
			break
		}
		slowest = rate
	}
	b.ReportMetric(float64(slowest), "slowest-kept-KiB/s@2s")
	b.ReportMetric(float64(slowest)*float64(timeout)/float64(DefaultWriteTimeout), "slowest-kept-KiB/s@default")
}
