// Package wiretest holds what the tests of both sides of the wire share — source/http's
// Client and fanout's Server and PassThrough: a test object, a handler that records what
// it is told in the repository's test notation (testkit.Recorder) and keeps the state and
// errors, an informer that mirrors a server, and raw HTTP reads of a response.
package wiretest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// Obj is the test object.
type Obj struct {
	// Name is the key.
	Name string `json:"name"`
	// Val is the state.
	Val string `json:"val"`
}

// ObjName is the key of an Obj in a memory.Source.
func ObjName(o *Obj) string { return o.Name }

// ObjKey is the key of an Obj in an informer.
func ObjKey(o *Obj) (string, error) { return o.Name, nil }

// Put writes name=val to src and returns its revision.
func Put(src *memory.Source[string, *Obj], name, val string) int64 {
	return src.Put(&Obj{Name: name, Val: val})
}

// WaitTimeout bounds every wait of a test; a wait never sleeps, it waits on a channel.
const WaitTimeout = 20 * time.Second

// TestBackoff keeps client informers' retries quick.
var TestBackoff = informer.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: -1}

// Recorder is a handler that records its calls as testkit.Recorder does ("add*a=1",
// "update a=1→2", "delete?a=2"), and keeps the state it was told of and the errors its
// informer reported (OnError as Options.ErrorHandler). Changed receives, without
// blocking, after each call and error.
type Recorder struct {
	*testkit.Recorder[*Obj]
	// Changed receives, without blocking, after each call and error.
	Changed chan struct{}

	mu   sync.Mutex
	objs map[string]*Obj // the state the handler was told of
	errs []error
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{
		Recorder: testkit.NewRecorder(func(o *Obj) (string, string) { return o.Name, o.Val }).WithTimeout(WaitTimeout),
		Changed:  make(chan struct{}, 1),
		objs:     map[string]*Obj{},
	}
}

func (r *Recorder) set(o *Obj, deleted bool) {
	r.mu.Lock()
	if deleted {
		delete(r.objs, o.Name)
	} else {
		r.objs[o.Name] = o
	}
	r.mu.Unlock()
}

func (r *Recorder) signal() {
	select {
	case r.Changed <- struct{}{}:
	default:
	}
}

// OnAdd records the call and the object's state.
func (r *Recorder) OnAdd(o *Obj, initial bool) {
	r.set(o, false)
	r.Recorder.OnAdd(o, initial)
	r.signal()
}

// OnUpdate records the call and the object's new state.
func (r *Recorder) OnUpdate(old, new *Obj) {
	r.set(new, false)
	r.Recorder.OnUpdate(old, new)
	r.signal()
}

// OnDelete records the call and forgets the object.
func (r *Recorder) OnDelete(o *Obj, unknown bool) {
	r.set(o, true)
	r.Recorder.OnDelete(o, unknown)
	r.signal()
}

// OnError records an error the informer reported.
func (r *Recorder) OnError(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.signal()
}

// State is the state the handler was told of, as State renders it.
func (r *Recorder) State() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	objs := make([]*Obj, 0, len(r.objs))
	for _, o := range r.objs {
		objs = append(objs, o)
	}
	return State(objs)
}

// Errors returns the errors reported so far, in a new slice.
func (r *Recorder) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// HasError reports whether an error matching target was reported.
func (r *Recorder) HasError(target error) bool {
	for _, err := range r.Errors() {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// Until waits for cond, re-checking it whenever signal receives.
func Until(t testing.TB, what string, cond func() bool, signal <-chan struct{}) {
	t.Helper()
	timeout := time.NewTimer(WaitTimeout)
	defer timeout.Stop()
	for !cond() {
		select {
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-signal:
		}
	}
}

// Eventually polls cond until it holds, failing the test after WaitTimeout: for state
// that no channel announces.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	informertest.Eventually(t, WaitTimeout, cond, "waiting for %s", what)
}

// Run runs an informer until the test ends.
func Run[K comparable, V any](t testing.TB, inf *informer.Informer[K, V]) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// Mirror is an informer with a Recorder.
type Mirror struct {
	// Inf is the informer.
	Inf *informer.Informer[string, *Obj]
	// Rec is its handler, and its ErrorHandler.
	Rec *Recorder
}

// NewMirror runs an informer over lw, recording its handler's calls and its errors, until
// the test ends; mod, if set, changes its options first.
func NewMirror(t testing.TB, lw informer.ListerWatcher[*Obj], name string, mod func(*informer.Options[string, *Obj])) *Mirror {
	t.Helper()
	m := &Mirror{Rec: NewRecorder()}
	opts := informer.Options[string, *Obj]{Key: ObjKey, Name: name, Backoff: TestBackoff, ErrorHandler: m.Rec.OnError}
	if mod != nil {
		mod(&opts)
	}
	inf, err := informer.New(lw, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddHandler(m.Rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	m.Inf = inf
	Run(t, inf)
	return m
}

// SyncedThenStopped builds an informer over lw with a Recorder as its handler and error
// handler, runs it until it has synced and the handler has had the list, checks that the
// handler was told want (State), stops the informer and drops it. It returns a weak
// pointer to it, for the test to check that it is collected, and the Recorder, which the
// test may keep.
func SyncedThenStopped(t testing.TB, lw informer.ListerWatcher[*Obj], want string) (weak.Pointer[informer.Informer[string, *Obj]], *Recorder) {
	t.Helper()
	rec := NewRecorder()
	inf, err := informer.New(lw, informer.Options[string, *Obj]{Key: ObjKey, Name: "first", Backoff: TestBackoff, ErrorHandler: rec.OnError})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := inf.AddHandler(rec, informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testkit.SyncThenStop(t, inf, reg)
	if got := rec.State(); got != want {
		t.Fatalf("the first informer's handler was told %q, want %s", got, want)
	}
	return weak.Make(inf), rec
}

// Watched opens a watch of lw with opts and returns its next n events as Event renders
// them; the watch is stopped before it returns.
func Watched(t testing.TB, lw informer.ListerWatcher[*Obj], opts informer.WatchOptions, n int) []string {
	t.Helper()
	w, err := lw.Watch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got := make([]string, 0, n)
	for range n {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, Event(ev))
	}
	return got
}

// Event renders an event as "Added a=1 @5" (a bookmark: "Bookmark @5"), with " end" when
// it ends the initial events.
func Event(ev informer.Event[*Obj]) string {
	s := ev.Type.String()
	if ev.Object != nil {
		s += " " + ev.Object.Name + "=" + ev.Object.Val
	}
	s += " @" + ev.Revision
	if ev.EndOfInitialEvents {
		s += " end"
	}
	return s
}

// State renders objects as "name=val" in name order.
func State(objs []*Obj) string {
	s := make([]string, 0, len(objs))
	for _, o := range objs {
		s = append(s, o.Name+"="+o.Val)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// Cached returns the informer's objects in key order.
func Cached(inf *informer.Informer[string, *Obj]) []*Obj {
	var objs []*Obj
	for _, o := range inf.All() {
		objs = append(objs, o)
	}
	return objs
}

// Converge waits until the informer's cache, and what its handler was told, equal want().
func Converge(t testing.TB, m *Mirror, want func() string) {
	t.Helper()
	Until(t, "the client to converge", func() bool {
		w := want()
		return State(Cached(m.Inf)) == w && m.Rec.State() == w
	}, m.Rec.Changed)
}

// ServeFunc starts a loopback server with h, closed (its connections first) when the test
// ends.
func ServeFunc(t testing.TB, h http.HandlerFunc) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts
}

// Get sends a GET with the header given (nil client: http.DefaultClient).
func Get(t testing.TB, client *http.Client, url string, header http.Header) *http.Response {
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

// Stream is a response read line by line.
type Stream struct {
	resp *http.Response
	r    *bufio.Reader
}

// Open GETs url, which must answer 200, and returns a reader of its lines, closed when
// the test ends.
func Open(t testing.TB, url string) *Stream {
	t.Helper()
	resp := Get(t, nil, url, nil)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	st := &Stream{resp: resp, r: bufio.NewReader(resp.Body)}
	t.Cleanup(st.Close)
	return st
}

// Close closes the response.
func (s *Stream) Close() { s.resp.Body.Close() }

// Line returns the next line without its newline; "EOF" at the clean end of the stream.
func (s *Stream) Line(t testing.TB) string {
	t.Helper()
	return ReadLine(t, s.r)
}

// ReadLine returns r's next line without its newline; "EOF" at the clean end of r. Any
// other error fails t.
func ReadLine(t testing.TB, r *bufio.Reader) string {
	t.Helper()
	l, err := r.ReadString('\n')
	if err == io.EOF && l == "" {
		return "EOF"
	}
	if err != nil {
		t.Fatalf("reading the watch: %v (after %q)", err, l)
	}
	return strings.TrimSuffix(l, "\n")
}

// Body reads a whole response and closes it.
func Body(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// NewStream reads resp line by line.
func NewStream(resp *http.Response) *Stream {
	return &Stream{resp: resp, r: bufio.NewReader(resp.Body)}
}

// Header is the response's header.
func (s *Stream) Header() http.Header { return s.resp.Header }
