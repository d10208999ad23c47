package informer_test

// This file holds the fixture the external tests share: the test object, an informer over
// source/memory run until its cache syncs, and waits with a deadline.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// obj is the test object: a key, a group (indexed), a value and a revision.
type obj struct {
	Key   string
	Group string
	Val   string
	Rev   string
}

func newObj(key, group, val string) *obj { return &obj{Key: key, Group: group, Val: val} }

func objKey(o *obj) string { return o.Key }

func objKeyErr(o *obj) (string, error) { return o.Key, nil }

// events records a handler's calls in informertest's notation ("add a=1", "update
// a=1→2", …), an object's state being its Val.
type events = informertest.Recorder[*obj]

func newEvents() *events {
	return informertest.NewRecorder(func(o *obj) (string, string) { return o.Key, o.Val })
}

// waitUntil polls cond with a deadline, for state that has no event to wait on.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	informertest.Eventually(t, 10*time.Second, cond, "condition not reached")
}

type fixture struct {
	src  *memory.Source[string, *obj]
	inf  *informer.Informer[string, *obj]
	errs *testkit.Errors
	stop func()
}

var fastBackoff = informer.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Jitter: -1}

// start builds an informer over src, adds the handlers, runs it and waits for sync.
func start(t *testing.T, src *memory.Source[string, *obj], opts informer.Options[string, *obj], handlers ...informer.Handler[*obj]) *fixture {
	t.Helper()
	f := &fixture{src: src, errs: &testkit.Errors{}}
	if opts.Key == nil {
		opts.Key = func(o *obj) (string, error) { return o.Key, nil }
	}
	if opts.Indexers == nil {
		opts.Indexers = informer.Indexers[*obj]{
			"group": informer.IndexBy(func(o *obj) (string, error) { return o.Group, nil }),
		}
	}
	if opts.Revision == nil {
		// The tests' objects change Val on every write: it serves as their revision.
		opts.Revision = func(o *obj) string { return o.Val }
	}
	if opts.Backoff == (informer.Backoff{}) {
		opts.Backoff = fastBackoff
	}
	opts.ErrorHandler = f.errs.Report
	inf, err := informer.New[string, *obj](src, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.inf = inf
	for _, h := range handlers {
		if _, err := inf.AddHandler(h, informer.HandlerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var ctx context.Context
	ctx, f.stop = runStoppable(t, inf)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if informer.WaitForCacheSync(sctx, inf) != nil {
		t.Fatal("informer did not sync")
	}
	return f
}

// runStoppable starts r.Run and returns the context it runs under and a stop that cancels
// it, waits for Run to return and fails the test if Run returned an error. stop may be
// called more than once, and is called at the test's cleanup. Unlike informertest.Run, it
// lets a test stop the informer before its end.
func runStoppable(t *testing.T, r interface{ Run(context.Context) error }) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return ctx, stop
}

func newSource(opts memory.Options) *memory.Source[string, *obj] {
	return memory.New[string, *obj](objKey, opts)
}

// startWith puts objs in a new source and starts an informer over it with one recording
// handler, whose events it returns.
func startWith(t *testing.T, opts informer.Options[string, *obj], objs ...*obj) (*fixture, *events) {
	t.Helper()
	src := newSource(memory.Options{})
	for _, o := range objs {
		src.Put(o)
	}
	ev := newEvents()
	return start(t, src, opts, ev), ev
}

// assertCache checks that the cache equals the source's state.
func assertCache(t *testing.T, f *fixture) {
	t.Helper()
	want := f.src.Items()
	got := informer.ReadList(f.inf)
	if len(got) != len(want) {
		t.Fatalf("cache has %d objects, source %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || got[i].Val != want[i].Val {
			t.Fatalf("cache[%d] = %+v, source %+v", i, got[i], want[i])
		}
	}
}

func countOps(src *memory.Source[string, *obj], op memory.Op) int {
	n := 0
	for _, r := range src.Requests() {
		if r.Op == op {
			n++
		}
	}
	return n
}

// gatedHandler records calls as events does, each once it takes a token from allow (or
// allow is closed).
type gatedHandler struct {
	allow chan struct{}
	ev    *events
}

func newGated() *gatedHandler { return &gatedHandler{allow: make(chan struct{}), ev: newEvents()} }

func (h *gatedHandler) OnAdd(o *obj, initial bool) { <-h.allow; h.ev.OnAdd(o, initial) }
func (h *gatedHandler) OnUpdate(old, new *obj)     { <-h.allow; h.ev.OnUpdate(old, new) }
func (h *gatedHandler) OnDelete(o *obj, unknown bool) {
	<-h.allow
	h.ev.OnDelete(o, unknown)
}

// newQuiet returns an informer over src with opts, its Key and a silent ErrorHandler set
// here.
func newQuiet(t *testing.T, src *memory.Source[string, *obj], opts informer.Options[string, *obj]) *informer.Informer[string, *obj] {
	t.Helper()
	opts.Key = objKeyErr
	opts.ErrorHandler = func(error) {}
	inf, err := informer.New[string, *obj](src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// stalledHandler blocks in each call until allowed; it counts the calls it completed and
// records each key's last state.
type stalledHandler struct {
	allow     chan struct{}
	processed atomic.Int64
	mu        sync.Mutex
	last      map[string]string
}

func (h *stalledHandler) see(key, val string) {
	<-h.allow
	h.mu.Lock()
	h.last[key] = val
	h.mu.Unlock()
	h.processed.Add(1)
}
func (h *stalledHandler) OnAdd(o *obj, _ bool)    { h.see(o.Key, o.Val) }
func (h *stalledHandler) OnUpdate(_, o *obj)      { h.see(o.Key, o.Val) }
func (h *stalledHandler) OnDelete(o *obj, _ bool) { h.see(o.Key, "<deleted>") }
