package fanout

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// BenchmarkAdversarialEndlessBodies: 64 lists and 200 watches whose GET bodies never end,
// from 8 source addresses, against a Server with the README's http.Server settings (no
// ReadTimeout); reports the slots they hold once answered, and an honest list's status.
func BenchmarkAdversarialEndlessBodies(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	up := newUpstream(b, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, err := newServer(b, up, ServerOptions[*wiretest.Obj]{})
	if err != nil {
		b.Fatal(err)
	}
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
	srv.core.mu.Lock()
	held := srv.core.lists.total + srv.core.watchers.total
	srv.core.mu.Unlock()
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
	up := newUpstream(b, memory.Options{})
	val := strings.Repeat("v", size)
	for i := range objects {
		wiretest.Put(up.src, fmt.Sprintf("k%05d", i), val)
	}
	srv, err := newServer(b, up, ServerOptions[*wiretest.Obj]{HistoryLimit: history, ServeOptions: ServeOptions{ErrorHandler: func(error) {}}})
	if err != nil {
		b.Fatal(err)
	}
	ts := startServer(b, srv)
	addr := ts.Listener.Addr().String()
	n := 0 // every put changes its object
	write := func(stop <-chan struct{}) {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for ; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				wiretest.Put(up.src, fmt.Sprintf("k%05d", n%objects), fmt.Sprintf("%s%08d", val[:size-8], n))
			}
		}
	}
	for _, readers := range []int{0, 16} {
		before, rev0 := memInUse(), srv.src.Revision()
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
		held := float64(int64(memInUse())-int64(before)) / (1 << 20)
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
		conns := make([]net.Conn, watchers)
		for i := range conns {
			conns[i] = dialFrom(b, addr, 0, "watch=1&resourceVersion="+from)
		}
		wiretest.Eventually(b, "the watchers to open", func() bool { return srv.Stats().OpenWatches == watchers })
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
