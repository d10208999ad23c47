package fanout

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	httpsource "github.com/informer-go/informer/source/http"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// TestMain checks that no goroutine is left when the tests end, with patience.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

// obj is the test object.
type obj struct {
	Name string `json:"name"`
	Val  string `json:"val"`
}

func objName(o *obj) string         { return o.Name }
func objKey(o *obj) (string, error) { return o.Name, nil }
func put(src *memory.Source[string, *obj], name, val string) int64 {
	return src.Put(&obj{Name: name, Val: val})
}

// waitTimeout bounds every wait of a test; a wait never sleeps, it waits on a channel.
const waitTimeout = 20 * time.Second

// testBackoff keeps client informers' retries quick.
var testBackoff = informer.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: -1}

// recorder is a handler that records its calls and signals every change.
type recorder struct {
	mu    sync.Mutex
	calls []string
	objs  map[string]*obj // the state the handler was told of
	errs  []error
	ch    chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1), objs: map[string]*obj{}} }

func (r *recorder) rec(s string, o *obj, deleted bool) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	if deleted {
		delete(r.objs, o.Name)
	} else {
		r.objs[o.Name] = o
	}
	r.mu.Unlock()
	r.signal()
}

// state is the state the handler was told of, as state renders it.
func (r *recorder) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	objs := make([]*obj, 0, len(r.objs))
	for _, o := range r.objs {
		objs = append(objs, o)
	}
	return state(objs)
}

func (r *recorder) signal() {
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *recorder) OnAdd(o *obj, initial bool) {
	if initial {
		r.rec("add* "+o.Name+"="+o.Val, o, false)
		return
	}
	r.rec("add "+o.Name+"="+o.Val, o, false)
}
func (r *recorder) OnUpdate(old, new *obj) {
	r.rec("update "+new.Name+"="+old.Val+"→"+new.Val, new, false)
}
func (r *recorder) OnDelete(o *obj, unknown bool) {
	if unknown {
		r.rec("delete? "+o.Name+"="+o.Val, o, true)
		return
	}
	r.rec("delete "+o.Name+"="+o.Val, o, true)
}

// onError records an informer's reported errors.
func (r *recorder) onError(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.signal()
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recorder) errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// hasError reports whether an error matching target was reported.
func (r *recorder) hasError(target error) bool {
	for _, err := range r.errors() {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// until waits for cond, re-checking it whenever signal receives.
func until(t testing.TB, what string, cond func() bool, signal <-chan struct{}) {
	t.Helper()
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for !cond() {
		select {
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-signal:
		}
	}
}

// upstream is a memory source and an informer over it: the process a Server runs in.
type upstream struct {
	src *memory.Source[string, *obj]
	inf *informer.Informer[string, *obj]
	rec *recorder
}

func newUpstream(t testing.TB, mopts memory.Options) *upstream {
	t.Helper()
	u := &upstream{src: memory.New(objName, mopts), rec: newRecorder()}
	// Unordered: a Server over it numbers its changes itself, one revision per change.
	// Servers of an ordered upstream are tested in fanout_revisions_test.go.
	inf, err := informer.New[string, *obj](unordered{u.src}, informer.Options[string, *obj]{
		Key: objKey, Name: "upstream", Backoff: testBackoff, ErrorHandler: u.rec.onError,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddHandler(u.rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	u.inf = inf
	run(t, inf)
	return u
}

// run runs an informer until the test ends.
func run[K comparable, V any](t testing.TB, inf *informer.Informer[K, V]) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// settle waits until the upstream informer holds the source's state, so that a server
// started next begins with all of it (in key order, one change each).
func (u *upstream) settle(t testing.TB) {
	t.Helper()
	converge(t, &downstream{inf: u.inf, rec: u.rec}, func() string { return state(u.src.Items()) })
}

// newServer makes a Server of the settled upstream.
func newServer(t testing.TB, u *upstream, opts ServerOptions[*obj]) (*Server[string, *obj], error) {
	t.Helper()
	u.settle(t)
	return NewServer(u.inf, opts)
}

// serve starts a Server of the settled upstream on a loopback httptest server.
func serve(t testing.TB, u *upstream, opts ServerOptions[*obj]) (*Server[string, *obj], *httptest.Server) {
	t.Helper()
	s, err := newServer(t, u, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		ts.Close()
	})
	waitSynced(t, s)
	return s, ts
}

func waitSynced(t testing.TB, s *Server[string, *obj]) {
	t.Helper()
	select {
	case <-s.Synced():
	case <-time.After(waitTimeout):
		t.Fatal("server never synced")
	}
}

// downstream is a client informer that mirrors a server.
type downstream struct {
	inf *informer.Informer[string, *obj]
	rec *recorder
}

func newDownstream(t testing.TB, lw informer.ListerWatcher[*obj], name string, mod func(*informer.Options[string, *obj])) *downstream {
	t.Helper()
	d := &downstream{rec: newRecorder()}
	opts := informer.Options[string, *obj]{Key: objKey, Name: name, Backoff: testBackoff, ErrorHandler: d.rec.onError}
	if mod != nil {
		mod(&opts)
	}
	inf, err := informer.New(lw, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddHandler(d.rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	d.inf = inf
	run(t, inf)
	return d
}

func newTestClient(t testing.TB, url string, opts httpsource.ClientOptions[*obj]) *httpsource.Client[*obj] {
	t.Helper()
	c, err := httpsource.NewClient(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// state renders objects as "name=val" in name order.
func state(objs []*obj) string {
	s := make([]string, 0, len(objs))
	for _, o := range objs {
		s = append(s, o.Name+"="+o.Val)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// cached returns the informer's objects in key order.
func cached(inf *informer.Informer[string, *obj]) []*obj {
	var objs []*obj
	for _, o := range inf.All() {
		objs = append(objs, o)
	}
	return objs
}

// converge waits until the informer's cache, and what its handler was told, equal want().
func converge(t testing.TB, d *downstream, want func() string) {
	t.Helper()
	until(t, "the client to converge", func() bool {
		w := want()
		return state(cached(d.inf)) == w && d.rec.state() == w
	}, d.rec.ch)
}

// rawWatch opens a watch with a plain HTTP request and returns a reader of its lines.
type rawStream struct {
	resp *http.Response
	r    *bufio.Reader
}

func rawGet(t testing.TB, client *http.Client, url string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func openRaw(t testing.TB, url string) *rawStream {
	t.Helper()
	resp := rawGet(t, nil, url, nil)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	st := &rawStream{resp: resp, r: bufio.NewReader(resp.Body)}
	t.Cleanup(st.close)
	return st
}

func (s *rawStream) close() { s.resp.Body.Close() }

// line returns the next line without its newline; "EOF" at the clean end of the stream.
func (s *rawStream) line(t testing.TB) string {
	t.Helper()
	l, err := s.r.ReadString('\n')
	if err == io.EOF && l == "" {
		return "EOF"
	}
	if err != nil {
		t.Fatalf("reading the watch: %v (after %q)", err, l)
	}
	return strings.TrimSuffix(l, "\n")
}

// body reads a whole response and closes it.
func body(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rev returns the wire revision of a log revision of s, a server of its own numbering.
func rev(s *Server[string, *obj], logRev int64) string {
	return fmt.Sprintf("%s.%d", s.revs.tag, logRev)
}

// eventually polls cond until it holds, failing the test after waitTimeout: for state that
// no channel announces.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	informertest.Eventually(t, waitTimeout, cond, "waiting for %s", what)
}

// serveFunc starts a loopback server with h.
func serveFunc(t testing.TB, h http.HandlerFunc) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts
}
