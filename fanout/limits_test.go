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
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wire"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// dialAs sends a GET of query on a bare TCP connection, as the client named by token
// ("Bearer <token>"; none if empty), and reads the response's header only: the body is
// left for the test to read, or not.
func dialAs(t testing.TB, addr, query, token string, readBuffer int) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if readBuffer > 0 {
		_ = conn.(*net.TCPConn).SetReadBuffer(readBuffer)
	}
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := fmt.Fprintf(conn, "GET /?%s HTTP/1.1\r\nHost: %s\r\n%s\r\n", query, addr, auth); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	rc := &rawConn{conn: conn}
	if rc.resp, err = http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil); err != nil {
		t.Fatal(err)
	}
	rc.r = bufio.NewReaderSize(rc.resp.Body, 64<<10)
	return rc
}

// byToken names the client by its bearer token, and refuses requests without one.
func byToken(r *http.Request) (string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", ErrUnauthorized
	}
	return tok, nil
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Lists that are never read hold one chunk each, not their whole response; beyond the
// limit of lists per client the client is answered 429 with a Retry-After; a list reader
// that stalls past WriteTimeout is disconnected, and its slot is free again.
func TestServerStalledListReaders(t *testing.T) {
	const objects, readers = 2000, 20
	up := newUpstream(t, memory.Options{})
	val := strings.Repeat("v", 1<<10)
	for i := range objects {
		wiretest.Put(up.src, fmt.Sprintf("k%05d", i), val)
	}
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{WriteTimeout: 500 * time.Millisecond, ErrorHandler: func(error) {}}})
	ts := startServer(t, srv)
	addr := ts.Listener.Addr().String()

	before := heapInUse()
	codes := map[int]int{}
	for range readers {
		rc := dialAs(t, addr, "limit=0", "", 4096)
		codes[rc.resp.StatusCode]++
		if rc.resp.StatusCode == 429 && rc.resp.Header.Get("Retry-After") != "1" {
			t.Errorf("429 with Retry-After %q, want 1", rc.resp.Header.Get("Retry-After"))
		}
	}
	held := int64(heapInUse()) - int64(before)
	t.Logf("%d stalled list readers of %d objects of 1 KiB hold %d KiB of heap (answers %v)", readers, objects, held>>10, codes)
	if codes[200] != DefaultMaxListsPerClient || codes[429] != readers-DefaultMaxListsPerClient {
		t.Errorf("answers %v, want %d × 200 (the limit per client) and the rest 429", codes, DefaultMaxListsPerClient)
	}
	// A whole response is 2 MiB; a stalled list holds a 32 KiB chunk.
	if held > 4<<20 {
		t.Errorf("stalled list readers hold %d KiB of heap, want under 4 MiB", held>>10)
	}
	wiretest.Eventually(t, "the stalled list readers to be evicted", func() bool { return srv.Stats().Evicted == DefaultMaxListsPerClient })
	if n := srv.Stats().ListsRejected; n != readers-DefaultMaxListsPerClient {
		t.Errorf("Stats.ListsRejected = %d, want %d", n, readers-DefaultMaxListsPerClient)
	}
	// Their slots are free: a list is served in full.
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	wiretest.Eventually(t, "a list to be served again", func() bool {
		l, err := c.List(context.Background(), informer.ListOptions{})
		return err == nil && len(l.Items) == objects
	})
}

// One client cannot take every watch slot: beyond its own limit it is answered 429 while
// another client is still served; clients are named by AuthorizeClient, or else by their
// remote address.
func TestServerWatchersPerClient(t *testing.T) {
	t.Run("named", func(t *testing.T) {
		_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
			AuthorizeClient: byToken, MaxWatchers: 10, MaxWatchersPerClient: 3,
		}}, "a")
		addr := ts.Listener.Addr().String()
		q := "watch=1&resourceVersion=" + rev(srv, 1)
		for i := range 3 {
			if rc := dialAs(t, addr, q, "alice", 0); rc.resp.StatusCode != 200 {
				t.Fatalf("alice's watch %d: %d", i, rc.resp.StatusCode)
			}
		}
		over := dialAs(t, addr, q, "alice", 0)
		b, _ := io.ReadAll(over.resp.Body)
		if over.resp.StatusCode != 429 || over.resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), "limit per client is 3") {
			t.Errorf("alice's 4th watch: %d %q %s", over.resp.StatusCode, over.resp.Header.Get("Retry-After"), b)
		}
		if rc := dialAs(t, addr, q, "bob", 0); rc.resp.StatusCode != 200 {
			t.Errorf("bob's watch while alice holds her maximum: %d", rc.resp.StatusCode)
		}
		if n := srv.Stats().Rejected; n != 1 {
			t.Errorf("Stats.Rejected = %d, want 1", n)
		}
	})
	t.Run("by address", func(t *testing.T) {
		_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxWatchersPerClient: 2}}, "a")
		addr := ts.Listener.Addr().String()
		q := "watch=1&resourceVersion=" + rev(srv, 1)
		var got []int
		for range 3 {
			got = append(got, dialAs(t, addr, q, "", 0).resp.StatusCode)
		}
		if fmt.Sprint(got) != "[200 200 429]" {
			t.Errorf("three watches from 127.0.0.1: %v, want [200 200 429]", got)
		}
	})
}

// A client that starts paged list after paged list loses its own oldest snapshots, never
// another client's: a paged informer still gets its second page.
func TestServerPagedListsPerClient(t *testing.T) {
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{PagedLists: 4, PagedListsPerClient: 3, ServeOptions: ServeOptions{AuthorizeClient: byToken}}, "a", "b", "c")
	hc := &http.Client{}
	first := func(who string) string {
		t.Helper()
		resp := wiretest.Get(t, hc, ts.URL+"?limit=1", http.Header{"Authorization": {"Bearer " + who}})
		b := wiretest.Body(t, resp)
		_, tok, ok := strings.Cut(b, `"continue":"`)
		if resp.StatusCode != 200 || !ok {
			t.Fatalf("%s's first page: %d %s", who, resp.StatusCode, b)
		}
		return tok[:strings.IndexByte(tok, '"')]
	}
	next := func(who, tok string) (int, string) {
		t.Helper()
		resp := wiretest.Get(t, hc, ts.URL+"?limit=1&continue="+tok, http.Header{"Authorization": {"Bearer " + who}})
		return resp.StatusCode, wiretest.Body(t, resp)
	}
	bob := first("bob")
	var alice []string
	for range 200 { // a limit=1 loop on one connection
		alice = append(alice, first("alice"))
	}
	carol := first("carol") // the table is full: alice, who holds the most, loses one
	for _, c := range []struct{ who, tok string }{{"bob", bob}, {"carol", carol}} {
		if code, b := next(c.who, c.tok); code != 200 || !strings.Contains(b, `"name":"b"`) {
			t.Errorf("%s's second page after alice's 200 lists: %d %s", c.who, code, b)
		}
	}
	if code, _ := next("alice", alice[0]); code != 410 {
		t.Errorf("alice's first list, long evicted by her own: %d, want 410", code)
	}
	if code, b := next("alice", alice[len(alice)-1]); code != 200 || !strings.Contains(b, `"name":"b"`) {
		t.Errorf("alice's newest list: %d %s", code, b)
	}
	// A page asked for again (a client retrying it) is served again; once the last page
	// is served, the list is finished.
	dave := first("dave")
	code, b := next("dave", dave)
	_, t2, _ := strings.Cut(b, `"continue":"`)
	t2 = t2[:max(strings.IndexByte(t2, '"'), 0)]
	if code != 200 || !strings.Contains(b, `"name":"b"`) || t2 == "" {
		t.Fatalf("dave's second page: %d %s", code, b)
	}
	if code, b := next("dave", dave); code != 200 || !strings.Contains(b, `"name":"b"`) || !strings.Contains(b, t2) {
		t.Errorf("dave's second page again: %d %s", code, b)
	}
	if code, b := next("dave", t2); code != 200 || !strings.Contains(b, `"name":"c"`) || strings.Contains(b, `"continue"`) {
		t.Errorf("dave's last page: %d %s", code, b)
	}
	if code, _ := next("dave", t2); code != 410 {
		t.Errorf("a finished list's token: %d, want 410", code)
	}
	if n := srv.Stats().Lists; n != 209 {
		t.Errorf("Stats.Lists = %d, want 209", n)
	}
}

// A watch ends, cleanly, within MaxWatchDuration whatever timeoutSeconds asked; the client
// must then be authorized again, so a revoked credential stops receiving within it.
func TestServerWatchLifetime(t *testing.T) {
	var revoked atomic.Bool
	up, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		MaxWatchDuration: 400 * time.Millisecond,
		AuthorizeClient: func(r *http.Request) (string, error) {
			if revoked.Load() {
				return "", fmt.Errorf("token revoked: %w", ErrUnauthorized)
			}
			return "alice", nil
		},
	}}, "a")
	addr := ts.Listener.Addr().String()
	start := time.Now()
	w := dialAs(t, addr, "watch=1&timeoutSeconds=3600&resourceVersion="+rev(srv, 1), "", 0)
	if w.resp.StatusCode != 200 {
		t.Fatalf("watch: %d", w.resp.StatusCode)
	}
	revoked.Store(true)
	_ = w.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // changes keep coming while the revoked client is still connected
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 500; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
				wiretest.Put(up.src, "a", fmt.Sprint(i))
			}
		}
	}()
	defer wg.Wait()
	defer close(done)
	for {
		l, err := w.r.ReadString('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the watch did not end cleanly within its bound: %v (after %.60q)", err, l)
		}
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 400*time.Millisecond+time.Second {
		t.Errorf("the watch ended after %v, want between 200ms and 400ms (plus slack)", took)
	}
	if rc := dialAs(t, addr, "watch=1&resourceVersion="+rev(srv, 1), "", 0); rc.resp.StatusCode != 401 {
		t.Errorf("watch again with a revoked credential: %d, want 401", rc.resp.StatusCode)
	}
}

// Lifetimes are drawn in [MaxWatchDuration/2, MaxWatchDuration], spread out.
func TestServerWatchLifetimeSpread(t *testing.T) {
	c := newGate(ServeOptions{MaxWatchDuration: time.Minute})
	seen := map[time.Duration]bool{}
	for range 100 {
		d := c.WatchLifetime()
		if d < 30*time.Second || d > time.Minute {
			t.Fatalf("lifetime %v outside [30s, 1m]", d)
		}
		seen[d] = true
	}
	if len(seen) < 90 {
		t.Errorf("%d distinct lifetimes of 100", len(seen))
	}
	c = newGate(ServeOptions{})
	if d := c.WatchLifetime(); d < DefaultMaxWatchDuration/2 || d > DefaultMaxWatchDuration {
		t.Errorf("default lifetime %v", d)
	}
}

// paced reads a stream at about rate bytes per second, in reads of 16 KiB, until want
// ADDED events and the end-of-initial-events bookmark have been read.
func paced(t *testing.T, rc *rawConn, rate int, want int) {
	t.Helper()
	const chunk = 16 << 10
	tick := time.NewTicker(time.Duration(int64(time.Second) * chunk / int64(rate)))
	defer tick.Stop()
	_ = rc.conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	buf := make([]byte, chunk)
	var added int
	var tail []byte
	for deadline := time.Now().Add(wiretest.WaitTimeout); time.Now().Before(deadline); {
		<-tick.C
		n, err := rc.resp.Body.Read(buf)
		tail = append(tail, buf[:n]...)
		for {
			i := strings.IndexByte(string(tail), '\n')
			if i < 0 {
				break
			}
			line := string(tail[:i])
			tail = tail[i+1:]
			switch {
			case strings.HasPrefix(line, `{"type":"ADDED"`):
				added++
			case strings.Contains(line, wire.InitialEventsEnd):
				if added != want {
					t.Fatalf("%d ADDED events before the end of the initial events, want %d", added, want)
				}
				return
			default:
				t.Fatalf("unexpected frame %.80s", line)
			}
		}
		if err != nil {
			t.Fatalf("after %d of %d events: %v", added, want, err)
		}
	}
	t.Fatal("timed out")
}

// A client that reads slowly but steadily is kept, through an initial state far larger
// than its connection's buffers: eviction waits for a stall, not for one slow write.
func TestServerSlowReaderKept(t *testing.T) {
	const objects = 16 // of 64 KiB: 1 MiB of initial state
	up := newUpstream(t, memory.Options{})
	val := strings.Repeat("v", 64<<10)
	for i := range objects {
		wiretest.Put(up.src, fmt.Sprintf("k%02d", i), val)
	}
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		WriteTimeout: time.Second, SendBuffer: 64 << 10, ErrorHandler: func(error) {},
	}})
	ts := startServer(t, srv)
	rc := dialAs(t, ts.Listener.Addr().String(), "watch=1&sendInitialEvents=true&allowWatchBookmarks=true", "", 16<<10)
	paced(t, rc, 400<<10, objects) // 400 KiB/s: about 2.5 s
	if n := srv.Stats().Evicted; n != 0 {
		t.Errorf("Stats.Evicted = %d: a steady reader was evicted", n)
	}
}

// bigBuffers gives every accepted connection a send buffer of 4 MiB, as the kernel's
// autotuning does to a connection that was fast for a while.
type bigBuffers struct{ net.Listener }

func (l bigBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 20)
	}
	return c, err
}

// A steady reader behind a send buffer of megabytes is kept: one write may wait for
// seconds, until a third of that buffer has drained, but the client's TCP stack accepts
// data all along, and that progress is what keeps it (ConnContext, Linux).
func TestServerSlowReaderProgress(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the send queue is read on Linux only")
	}
	const objects = 48 // of 256 KiB: 12 MiB, beyond the 8 MiB the kernel gives a 4 MiB SO_SNDBUF
	up := newUpstream(t, memory.Options{})
	val := strings.Repeat("v", 256<<10)
	for i := range objects {
		wiretest.Put(up.src, fmt.Sprintf("k%02d", i), val)
	}
	reported := make(chan error, 1)
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		WriteTimeout: time.Second, SendBuffer: -1,
		ErrorHandler: reportTo(reported),
	}})
	ts := serveHTTP(t, srv, srv, func(ts *httptest.Server) {
		ts.Listener = bigBuffers{ts.Listener}
		ts.Config.ConnContext = ConnContext
	})
	rc := dialAs(t, ts.Listener.Addr().String(), "watch=1&sendInitialEvents=true", "", 64<<10)
	// 3 MiB at 1 MiB/s, in reads of 16 KiB: the server's writes block throughout.
	const chunk, total = 16 << 10, 3 << 20
	tick := time.NewTicker(time.Second * chunk / (1 << 20))
	defer tick.Stop()
	buf := make([]byte, chunk)
	for read := 0; read < total; {
		<-tick.C
		n, err := io.ReadFull(rc.r, buf)
		read += n
		if err != nil {
			t.Fatalf("after %d KiB: %v", read>>10, err)
		}
	}
	select {
	case err := <-reported:
		t.Errorf("a steady reader at 1 MiB/s was reported: %v", err)
	default:
	}
	if n := srv.Stats().Evicted; n != 0 {
		t.Errorf("Stats.Evicted = %d: a steady reader was evicted", n)
	}
}

// A client disconnected for stalling gets its connection reset, not closed, so that the
// kernel drops the data queued for it at once (with ConnContext installed).
func TestServerEvictedConnectionReset(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		WriteTimeout: 200 * time.Millisecond, SendBuffer: 4096, ErrorHandler: func(error) {},
	}})
	ts := startServer(t, srv)
	stalled := dialAs(t, ts.Listener.Addr().String(), "watch=1&resourceVersion="+rev(srv, 1), "", 4096)
	big := strings.Repeat("x", 4<<10)
	for i := 0; i < 1000 && srv.Stats().Evicted == 0; i++ {
		wiretest.Put(up.src, fmt.Sprintf("k%03d", i%100), big+fmt.Sprint(i))
		if i%50 == 49 {
			wiretest.Eventually(t, "the server to take the changes", func() bool { return srv.src.Revision() >= int64(i+2) })
		}
	}
	wiretest.Eventually(t, "the stalled watcher to be evicted", func() bool { return srv.Stats().Evicted == 1 })
	_ = stalled.conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	if _, err := io.Copy(io.Discard, stalled.r); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the evicted watcher's connection ended with %v, want a reset (ECONNRESET)", err)
	}
	// A watch that ends normally ends gracefully: the reset is disarmed.
	done := dialAs(t, ts.Listener.Addr().String(), "watch=1&timeoutSeconds=1&resourceVersion="+rev(srv, 1), "", 0)
	_ = done.conn.SetReadDeadline(time.Now().Add(wiretest.WaitTimeout))
	if _, err := io.Copy(io.Discard, done.r); err != nil {
		t.Errorf("a watch at its timeout ended with %v, want a clean end", err)
	}
}

// The history is bounded in bytes as well as in changes: one large object updated many
// times does not pile up its versions.
func TestServerHistoryBytes(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "0")
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{HistoryBytes: 1 << 20})
	big := strings.Repeat("x", 100<<10)
	const n = 50 // 5 MB of versions of one 100 KiB object
	for i := range n {
		wiretest.Put(up.src, "a", fmt.Sprint(i)+big)
	}
	// The log compacts right after it appends: wait for both.
	wiretest.Eventually(t, "the server to take the changes and drop the old ones", func() bool {
		return srv.src.Revision() == n+1 && srv.src.Revision()-srv.src.CompactedRevision() <= 10
	})
	kept := srv.src.Revision() - srv.src.CompactedRevision()
	if kept < 9 || kept > 10 {
		t.Errorf("the server keeps %d versions of 100 KiB, want the 9 or 10 that fit in 1 MiB", kept)
	}
	// A watch from a revision that has left the history: 410; from one within it: served.
	resp := wiretest.Get(t, nil, ts.URL+"?watch=1&resourceVersion="+rev(srv, 2), nil)
	if b := wiretest.Body(t, resp); resp.StatusCode != 410 {
		t.Errorf("watch from a dropped revision: %d %.100s", resp.StatusCode, b)
	}
	st := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion="+rev(srv, n))
	if l := st.Line(t); !strings.HasPrefix(l, fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q`, rev(srv, n+1))) {
		t.Errorf("watch from a kept revision: %.80s", l)
	}
}

// An object larger than MaxObjectSize is refused, reported and counted; clients keep its
// previous state and everything else is served.
func TestServerObjectTooLarge(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	reported := make(chan error, 4)
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{MaxObjectSize: 1000, ServeOptions: ServeOptions{ErrorHandler: func(err error) { reported <- err }}})
	st := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion="+rev(srv, 1))
	wiretest.Put(up.src, "a", strings.Repeat("x", 2000))
	wiretest.Put(up.src, "b", "1")
	if l := st.Line(t); !strings.HasPrefix(l, `{"type":"ADDED"`) || !strings.Contains(l, `"name":"b"`) {
		t.Errorf("after a refused object: %.80s, want b's ADDED", l)
	}
	if err := testkit.Recv(t, reported, "the refused object's error"); !strings.Contains(err.Error(), "object a is 2") || !strings.Contains(err.Error(), "MaxObjectSize (1000)") {
		t.Errorf("reported %v", err)
	}
	if n := srv.Stats().TooLarge; n != 1 {
		t.Errorf("Stats.TooLarge = %d, want 1", n)
	}
	if b := wiretest.Body(t, wiretest.Get(t, nil, ts.URL, nil)); !strings.Contains(b, `{"name":"a","val":"1"}`) {
		t.Errorf("list after a refused object: %.200s, want a's previous state", b)
	}
}

// The largest object a Server serves by default reaches a Client with default options:
// its frame fits the Client's frame limit.
func TestServerLargestObjectReachesClient(t *testing.T) {
	if DefaultMaxObjectSize+wire.MaxEnvelope > httpsource.DefaultMaxFrameSize {
		t.Fatalf("DefaultMaxObjectSize %d + envelope %d > DefaultMaxFrameSize %d", DefaultMaxObjectSize, wire.MaxEnvelope, httpsource.DefaultMaxFrameSize)
	}
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{ErrorHandler: func(err error) { t.Error(err) }}})
	w, err := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Watch(context.Background(), informer.WatchOptions{Revision: rev(srv, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	val := strings.Repeat("x", DefaultMaxObjectSize-len(`{"name":"a","val":""}`)) // exactly the limit
	wiretest.Put(up.src, "a", val)
	ev, err := w.Next()
	if err != nil || ev.Type != informer.Modified || len(ev.Object.Val) != len(val) {
		t.Fatalf("the largest object: %v %v", ev.Type, err)
	}
	if n := srv.Stats().TooLarge; n != 0 {
		t.Errorf("Stats.TooLarge = %d", n)
	}
}

// A refusal says only "unauthorized" or "forbidden" unless the hook chose a message;
// a 401 carries a WWW-Authenticate challenge.
func TestServerRefusalText(t *testing.T) {
	_, _, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		Authorize: func(r *http.Request) error {
			switch r.Header.Get("Authorization") {
			case "":
				return fmt.Errorf("token store at 10.0.0.7:5432 unreachable: %w", ErrUnauthorized)
			case "Bearer reader":
				return ClientMessage(ErrForbidden, "readers may not watch")
			}
			return errors.New("lookup of user 42 in ldap://internal failed")
		},
	}}, "a")
	for _, tc := range []struct {
		token, want string
		code        int
	}{
		{"", `"message":"unauthorized"`, 401},
		{"Bearer reader", `"message":"readers may not watch"`, 403},
		{"Bearer bogus", `"message":"forbidden"`, 403},
	} {
		h := http.Header{}
		if tc.token != "" {
			h.Set("Authorization", tc.token)
		}
		resp := wiretest.Get(t, nil, ts.URL, h)
		b := wiretest.Body(t, resp)
		if resp.StatusCode != tc.code || !strings.Contains(b, tc.want) || strings.Contains(b, "10.0.0.7") || strings.Contains(b, "ldap") {
			t.Errorf("%q: %d %s, want %d with %s", tc.token, resp.StatusCode, b, tc.code, tc.want)
		}
		if got := resp.Header.Get("WWW-Authenticate"); (tc.code == 401) != (got == "Bearer") {
			t.Errorf("%q: WWW-Authenticate %q", tc.token, got)
		}
	}
}

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
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxLists: 2, MaxWatchers: 2}})
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
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{BookmarkInterval: interval})
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
