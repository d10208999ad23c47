package fanout

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wire"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// sendEndless sends a GET of query whose body never ends (a chunked body, or a
// Content-Length that is never reached) on a bare TCP connection, and returns the
// connection with its response's status, read within limit (0 if none came).
func sendEndless(t *testing.T, addr, query string, chunked bool, limit time.Duration) (net.Conn, int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head := "Content-Length: 1000000\r\n\r\nabcd"
	if chunked {
		head = "Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n"
	}
	if _, err := fmt.Fprintf(conn, "GET /?%s HTTP/1.1\r\nHost: x\r\n%s", query, head); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return conn, 0
	}
	resp.Body.Close()
	return conn, resp.StatusCode
}

// A GET whose body never ends holds no list or watch slot: it is answered 400 at once,
// before a slot is taken, with the http.Server settings the README shows (no
// ReadTimeout), and an honest list and watch are served while such requests stay open.
func TestServerEndlessRequestBody(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, err := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxLists: 2, MaxWatchers: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, srv)
	addr := ts.Listener.Addr().String()
	for _, q := range []string{"limit=0", "watch=1", "watch=1&resourceVersion=" + rev(srv, 1)} {
		for _, chunked := range []bool{true, false} {
			for range 3 {
				if _, code := sendEndless(t, addr, q, chunked, 2*time.Second); code != http.StatusBadRequest {
					t.Fatalf("GET ?%s with a body that never ends (chunked %v): status %d, want 400 at once", q, chunked, code)
				}
			}
		}
	}
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	l, err := c.List(context.Background(), informer.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("an honest list: %v, %d items", err, len(l.Items))
	}
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: rev(srv, 1)})
	if err != nil {
		t.Fatalf("an honest watch: %v", err)
	}
	w.Stop()
	if n := srv.Stats().ListsRejected + srv.Stats().Rejected; n != 0 {
		t.Errorf("%d requests refused for want of a slot, want 0", n)
	}
	if n := srv.Stats().BadRequests; n != 18 {
		t.Errorf("Stats.BadRequests = %d, want 18", n)
	}
}

// silencer serves a handler and, once frozen, drops every byte of the responses already
// begun, as a middlebox that lost a connection without a reset: the client sees a
// server gone silent. Responses begun later are served. watches counts watch requests.
type silencer struct {
	h       http.Handler
	mu      sync.Mutex
	open    []*atomic.Bool
	watches atomic.Int64
}

func (s *silencer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("watch") != "" {
		s.watches.Add(1)
	}
	mute := new(atomic.Bool)
	s.mu.Lock()
	s.open = append(s.open, mute)
	s.mu.Unlock()
	s.h.ServeHTTP(silentWriter{w, mute}, r)
}

func (s *silencer) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.open {
		m.Store(true)
	}
}

// serveSilenceable serves, behind a silencer on loopback (ConnContext installed), a Server
// with the bookmark interval over an upstream that holds a=1, and returns the silencer,
// the upstream and an informer (default Client and informer options) that has converged on a=1 and watches.
func serveSilenceable(t testing.TB, interval time.Duration) (*silencer, *upstream, *wiretest.Mirror) {
	t.Helper()
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, err := newServer(t, up, ServerOptions[*wiretest.Obj]{BookmarkInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	sil := &silencer{h: srv}
	ts := serveHTTP(t, srv, sil, withConnContext)
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}), "silent", nil)
	wiretest.Converge(t, d, func() string { return "a=1" })
	wiretest.Eventually(t, "the client's watch", func() bool { return srv.Stats().OpenWatches == 1 })
	return sil, up, d
}

type silentWriter struct {
	http.ResponseWriter
	mute *atomic.Bool
}

func (w silentWriter) Write(b []byte) (int, error) {
	if w.mute.Load() {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w silentWriter) FlushError() error {
	if w.mute.Load() {
		return nil
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w silentWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A server that goes silent is noticed within two of its bookmark intervals with the
// default options of Client and informer (whose watches ask for a timeout of minutes):
// the Server tells its interval (a response header), the watch ends with an error that
// matches informer.ErrRetryable, LastError has it, and the informer watches again.
func TestClientNoticesSilentServer(t *testing.T) {
	const interval = time.Second
	sil, up, d := serveSilenceable(t, interval)
	watches, seen := sil.watches.Load(), len(d.Rec.Errors())
	frozen := time.Now()
	sil.freeze()
	var noticed time.Duration
	wiretest.Eventually(t, "the silence to be noticed", func() bool {
		for _, err := range d.Rec.Errors()[seen:] {
			if errors.Is(err, informer.ErrRetryable) && strings.Contains(err.Error(), "bookmark interval") {
				noticed = time.Since(frozen)
				return true
			}
		}
		return false
	})
	t.Logf("silence noticed after %v (bookmark interval %v)", noticed, interval)
	if noticed > 2*interval+interval/2 {
		t.Errorf("silence noticed after %v, want within 2 bookmark intervals (%v)", noticed, 2*interval)
	}
	wiretest.Eventually(t, "a new watch", func() bool { return sil.watches.Load() > watches })
	wiretest.Put(up.src, "a", "2")
	wiretest.Converge(t, d, func() string { return "a=2" })
}

// A list or a streaming list still being sent when its revision leaves the history is cut
// (the connection is closed mid-body; a streaming list ends with an ERROR event, 410), so
// that a slow reader never pins more of the state than the changes the history holds.
func TestServerSlowListReaderCut(t *testing.T) {
	const objects, history = 2000, 100
	for _, q := range []string{"limit=0", "watch=1&sendInitialEvents=true"} {
		t.Run(q, func(t *testing.T) {
			up, srv, ts := bigState(t, objects, 1<<10, history)
			rc := dialAs(t, ts.Listener.Addr().String(), q, "", 64<<10)
			if rc.resp.StatusCode != 200 {
				t.Fatalf("status %d", rc.resp.StatusCode)
			}
			if _, err := io.ReadFull(rc.r, make([]byte, 64<<10)); err != nil {
				t.Fatal(err)
			}
			// The state changes past the history while the reader is still at the start.
			for i := range 2 * history {
				wiretest.Put(up.src, fmt.Sprintf("k%05d", i), "changed")
			}
			wiretest.Eventually(t, "the server to log the changes", func() bool { return srv.src.Revision() >= objects+2*history })
			// A list, streaming or not, whose write waits for its reader is cut too, well
			// before WriteTimeout: it releases its slot and its snapshot at once.
			wiretest.Eventually(t, "the waiting list to be cut", func() bool { return srv.Stats().Evicted == 1 })
			if strings.HasPrefix(q, "watch") {
				wiretest.Eventually(t, "the cut streaming list's slot to be free", func() bool { return srv.Stats().OpenWatches == 0 })
			}
			_ = rc.conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
			var rest []byte
			var err error
			if strings.HasPrefix(q, "watch") {
				for err == nil && !bytes.Contains(rest, []byte(wire.InitialEventsEnd)) && !bytes.Contains(rest, []byte(`"type":"ERROR"`)) {
					var l []byte
					l, err = rc.r.ReadBytes('\n')
					rest = append(rest, l...)
				}
			} else {
				rest, err = io.ReadAll(rc.r)
			}
			if err == nil && (bytes.Contains(rest, []byte(wire.InitialEventsEnd)) || bytes.HasSuffix(rest, []byte("]}\n"))) {
				t.Fatalf("the slow reader got the whole state (%d bytes more) though its revision left the history", len(rest))
			}
			if n := srv.Stats().Evicted; n != 1 {
				t.Errorf("Stats.Evicted = %d, want 1", n)
			}
		})
	}
}

// A client that AuthorizeClient does not name is its IPv4 address, or its IPv6 /64: an
// IPv6 host is given a /64, so that counting its addresses one by one would let one host
// be as many clients as it likes.
func TestRemoteHostIPv6Prefix(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.2:4000":                 "127.0.0.2",
		"[2001:db8:1:2::1]:4000":         "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:1:2:3]:4001": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:4000":         "2001:db8:1:3::/64",
		"[::ffff:10.0.0.1]:80":           "10.0.0.1",
		"not an address":                 "not an address",
	} {
		if got := remoteHost(addr); got != want {
			t.Errorf("remoteHost(%q) = %q, want %q", addr, got, want)
		}
	}
}

// After a burst that overflows the Server's handler queue, then quiet, a client reaches
// the burst's last revision: an overflow never loses the revision marker the Server
// waits for before it logs the changes it holds.
func TestServerBurstThenQuiet(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "0")
	up := startUpstream(t, src, "upstream", true)
	_, ts, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{QueueLength: 8})
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{StreamingList: true}).Ordered(), "mirror", nil)
	var last int64
	for i := range 200 {
		last = wiretest.Put(src, fmt.Sprintf("k%03d", i%50), fmt.Sprint(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := d.Inf.WaitForRevision(ctx, fmt.Sprint(last)); err != nil {
		t.Fatalf("WaitForRevision(%d) after a burst then quiet: %v", last, err)
	}
}

// A filtered client's WaitForRevision of a write to another value returns soon, not after
// a bookmark interval (a minute by default): the Server sends its idle filtered watchers a
// bookmark at the newest revision shortly after it moves.
func TestFilteredClientWaitsForAWriteElsewhere(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "payments:0")
	d := paymentsMirror(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	for i := range 3 {
		r := strconv.FormatInt(wiretest.Put(src, "b", fmt.Sprintf("search:%d", i)), 10)
		start := time.Now()
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		err := d.Inf.WaitForRevision(wctx, r)
		wcancel()
		if err != nil {
			t.Fatalf("WaitForRevision(%s) of a write to another value: %v after %v", r, err, time.Since(start))
		}
	}
	if n := d.Inf.Len(); n != 1 {
		t.Errorf("the filtered cache holds %d objects, want 1", n)
	}
}

// Behind a round-robin balancer the pages of one list go to different replicas: a
// continue token of one replica is served by another at the same upstream revision.
func TestPagedListAcrossReplicas(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	for i := range 10 {
		wiretest.Put(src, fmt.Sprintf("k%02d", i), "v")
	}
	up := startUpstream(t, src, "upstream", true)
	_, a, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
	_, b, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
	ca, cb := newTestClient(t, a.URL, httpsource.ClientOptions[*wiretest.Obj]{}), newTestClient(t, b.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	var got []string
	l, err := ca.List(context.Background(), informer.ListOptions{Limit: 4})
	for i := 0; err == nil; i++ {
		for _, o := range l.Items {
			got = append(got, o.Name)
		}
		if l.Continue == "" {
			break
		}
		next := ca
		if i%2 == 0 {
			next = cb
		}
		l, err = next.List(context.Background(), informer.ListOptions{Limit: 4, Continue: l.Continue})
	}
	if err != nil {
		t.Fatalf("a paged list across replicas: %v after %v", err, got)
	}
	if s := strings.Join(got, ","); s != "k00,k01,k02,k03,k04,k05,k06,k07,k08,k09" {
		t.Fatalf("a paged list across replicas gave %s", s)
	}
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
