package httpsource

import (
	"bufio"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// recorder is a client informer's handler: it records the calls in informertest's
// notation ("add*a=1", "update a=1→2", "delete?a=1"), keeps the state they told of and
// the errors the informer reported, and signals ch after each.
type recorder struct {
	*informertest.Recorder[*obj]
	mu   sync.Mutex
	objs map[string]*obj // the state the handler was told of
	errs []error
	ch   chan struct{}
}

func newRecorder() *recorder {
	return &recorder{
		Recorder: informertest.NewRecorder(func(o *obj) (string, string) { return o.Name, o.Val }),
		ch:       make(chan struct{}, 1), objs: map[string]*obj{},
	}
}

// told keeps o as the state the handler was told of (none, if deleted) and signals.
func (r *recorder) told(o *obj, deleted bool) {
	r.mu.Lock()
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

func (r *recorder) OnAdd(o *obj, initial bool) { r.Recorder.OnAdd(o, initial); r.told(o, false) }
func (r *recorder) OnUpdate(old, new *obj)     { r.Recorder.OnUpdate(old, new); r.told(new, false) }
func (r *recorder) OnDelete(o *obj, unknown bool) {
	r.Recorder.OnDelete(o, unknown)
	r.told(o, true)
}

// onError records an informer's reported errors.
func (r *recorder) onError(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.signal()
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

func newTestClient(t testing.TB, url string, opts ClientOptions[*obj]) *Client[*obj] {
	t.Helper()
	c, err := NewClient(url, opts)
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

// converge waits until the informer's cache, and what its handler was told, equal want().
func converge(t testing.TB, d *downstream, want func() string) {
	t.Helper()
	until(t, "the client to converge", func() bool {
		w := want()
		return state(slices.Collect(maps.Values(maps.Collect(d.inf.All())))) == w && d.rec.state() == w
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

// eventually polls cond until it holds, failing the test after waitTimeout: for state that
// no channel announces.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	informertest.Eventually(t, waitTimeout, cond, "waiting for %s", what)
}
