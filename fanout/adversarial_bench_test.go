package fanout

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
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
	srv := newServer(b, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{ErrorHandler: func(error) {}}})
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
	srv := newServer(b, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{WriteTimeout: timeout, ErrorHandler: func(error) {}}})
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

// BenchmarkAdversarialEndlessBodies: 64 lists and 200 watches whose GET bodies never end,
// from 8 source addresses, against a Server with the README's http.Server settings (no
// ReadTimeout); reports the slots they hold once answered, and an honest list's status.
func BenchmarkAdversarialEndlessBodies(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	up := newUpstream(b, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv := newServer(b, up, ServerOptions[*wiretest.Obj]{})
	ts := startServer(b, srv)
	addr := ts.Listener.Addr().String()
	refused := 0
	for i := range 264 {
		q := "limit=0"
		if i >= 64 {
			q = "watch=1"
		}
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%8))}}
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /?%s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n", q)
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if l, err := bufio.NewReader(conn).ReadString('\n'); err == nil && strings.Contains(l, " 400 ") {
			refused++
		}
	}
	watches, lists := srv.gate.InUse()
	held := lists + watches
	c := newTestClient(b, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	_, lerr := c.List(context.Background(), informer.ListOptions{})
	b.ReportMetric(float64(held), "slots-held")
	b.ReportMetric(float64(refused), "answered-400/264")
	b.ReportMetric(float64(boolInt(lerr == nil)), "honest-list-served")
}

// BenchmarkAdversarialSlowListReaders: a state of 5,000 objects of 4 KB, a writer at
// about 1,000 puts/s for 6 s, alone and then with 16 readers of unpaged lists at
// 16 KiB/s; HistoryLimit 2,000 (2 s of writes). Reports the heap each run holds at its
// end. The bound: lists are cut when their revision leaves the history, so together they
// pin at most the old versions of the last HistoryLimit changed objects (2,000 × 4 KB,
// 7.8 MiB here), whatever their number.
func BenchmarkAdversarialSlowListReaders(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	const objects, size, history = 5000, 4000, 2000
	up, srv, ts := bigState(b, objects, size, history)
	addr := ts.Listener.Addr().String()
	n := 0 // every put changes its object
	val := strings.Repeat("v", size-8)
	write := func(stop <-chan struct{}) {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for ; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				wiretest.Put(up.src, fmt.Sprintf("k%05d", n%objects), fmt.Sprintf("%s%08d", val, n))
			}
		}
	}
	for _, readers := range []int{0, 16} {
		before, rev0 := testkit.MemInUse(), srv.src.Revision()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { write(stop) })
		for i := range readers {
			wg.Go(func() {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 2, byte(1+i))}}
				for {
					select {
					case <-stop:
						return
					default:
					}
					conn, err := d.Dial("tcp", addr)
					if err != nil {
						return
					}
					fmt.Fprintf(conn, "GET /?limit=0 HTTP/1.1\r\nHost: x\r\n\r\n")
					buf := make([]byte, 4<<10)
					tick := time.NewTicker(250 * time.Millisecond) // 16 KiB/s
				read:
					for {
						select {
						case <-stop:
							break read
						case <-tick.C:
							_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
							if _, err := conn.Read(buf); err != nil {
								break read
							}
						}
					}
					tick.Stop()
					conn.Close()
				}
			})
		}
		time.Sleep(6 * time.Second) // the duration of the load, not a synchronisation
		held := float64(int64(testkit.MemInUse())-int64(before)) / (1 << 20)
		close(stop)
		wg.Wait()
		b.ReportMetric(held, fmt.Sprintf("MiB-held-%dreaders", readers))
		b.ReportMetric(float64(srv.src.Revision()-rev0)/6, fmt.Sprintf("puts/s-%dreaders", readers))
	}
	b.ReportMetric(float64(history*size)/(1<<20), "MiB-bound-lists")
	b.ReportMetric(float64(srv.Stats().Evicted), "lists-cut")
}

// BenchmarkAdversarialSilentServer: a Server with a bookmark interval of 1 s (the default
// is 1 minute; the bound scales with it) goes silent under an informer with the default
// options of Client and informer; reports how long the informer took to notice, in
// bookmark intervals.
func BenchmarkAdversarialSilentServer(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	const interval = time.Second
	sil, _, d := serveSilenceable(b, interval)
	seen := len(d.Rec.Errors())
	frozen := time.Now()
	sil.freeze()
	var noticed time.Duration
	wiretest.Eventually(b, "the silence to be noticed", func() bool {
		for _, err := range d.Rec.Errors()[seen:] {
			if errors.Is(err, informer.ErrRetryable) {
				noticed = time.Since(frozen)
				return true
			}
		}
		return false
	})
	b.ReportMetric(noticed.Seconds()/interval.Seconds(), "noticed-in-bookmark-intervals")
}

// BenchmarkAdversarialBurstThenQuiet: 20 runs of a burst of 300 puts over an ordered
// upstream to 1,000 watchers of a Server whose handler queue is 64 long (so that every
// burst overflows it, as 5,000 puts overflow the default 4,096), then quiet; reports the
// watchers that have not reached the burst's last revision 5 s after it.
func BenchmarkAdversarialBurstThenQuiet(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	const runs, watchers, burst = 20, 1000, 300
	raiseFileLimit(b, 2*watchers+1024)
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "0")
	up := startUpstream(b, src, "upstream", true)
	srv, ts, _ := startReplica(b, up, ServerOptions[*wiretest.Obj]{QueueLength: 64})
	addr := ts.Listener.Addr().String()
	stale, staleRuns := 0, 0
	for run := range runs {
		from := srv.Revision()
		conns := openWatches(b, srv, addr, watchers, from)
		var last int64
		for i := range burst {
			last = wiretest.Put(src, fmt.Sprintf("k%03d", i%100), fmt.Sprint(run, ".", i))
		}
		want := []byte(fmt.Sprintf(`"resourceVersion":"%d"`, last))
		deadline := time.Now().Add(5 * time.Second)
		var behind atomic.Int64
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() {
				_ = c.SetReadDeadline(deadline)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					behind.Add(1)
					return
				}
				r := bufio.NewReader(resp.Body)
				for {
					l, err := r.ReadSlice('\n')
					if bytes.Contains(l, want) {
						return
					}
					if err != nil && err != bufio.ErrBufferFull {
						behind.Add(1)
						return
					}
				}
			})
		}
		wg.Wait()
		if n := int(behind.Load()); n > 0 {
			stale += n
			staleRuns++
		}
		for _, c := range conns {
			c.Close()
		}
		wiretest.Eventually(b, "the watchers to close", func() bool { return srv.Stats().OpenWatches == 0 })
	}
	b.ReportMetric(float64(stale), "stale-watchers")
	b.ReportMetric(float64(staleRuns), "stale-runs/20")
}
