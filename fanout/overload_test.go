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

	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer/internal/wire"
	httpsource "github.com/informer-go/informer/source/http"

	"github.com/informer-go/informer"
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
	ts := serveFront(t, srv, sil)
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
			up := newUpstream(t, memory.Options{})
			val := strings.Repeat("v", 1<<10)
			for i := range objects {
				wiretest.Put(up.src, fmt.Sprintf("k%05d", i), val)
			}
			srv, err := newServer(t, up, ServerOptions[*wiretest.Obj]{HistoryLimit: history, ServeOptions: ServeOptions{ErrorHandler: func(error) {}}})
			if err != nil {
				t.Fatal(err)
			}
			ts := startServer(t, srv)
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
			err = nil
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
	up := startUpstream(t, src, "upstream", true)
	_, ts, _ := startReplica(t, up, filterOptions())
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{Filter: httpsource.Filter{Index: "team", Value: "payments"}}).Ordered(), "payments", nil)
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := informer.WaitForCacheSync(ctx, d.Inf); err != nil {
		t.Fatal(err)
	}
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
