package informer_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
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

// Initial list as initial adds, then live changes in order, the
// cache level with or ahead of every notification.
func TestInformer_InitialListThenLiveChanges(t *testing.T) {
	f, ev := startWith(t, informer.Options[string, *obj]{}, newObj("a", "g1", "1"), newObj("b", "g2", "1"))
	src := f.src
	ev.Expect(t, "add*a=1", "add*b=1")

	src.Put(newObj("a", "g1", "2"))
	src.Put(newObj("c", "g1", "1"))
	src.Delete("b")
	ev.Expect(t, "add*a=1", "add*b=1", "update a=1→2", "add c=1", "delete b=1")
	assertCache(t, f)
	got, err := informer.ReadByIndex(f.inf, "group", "g1")
	if err != nil || len(got) != 2 || got[0].Key != "a" || got[1].Key != "c" {
		t.Fatalf("ByIndex(group, g1) = %v, %v", got, err)
	}
}

// The list is paged at one revision, then the watch starts from the
// list's revision with a timeout in [min, 2·min) and bookmarks allowed.
func TestReflector_PagedListThenWatchFromListRevision(t *testing.T) {
	src := newSource(memory.Options{})
	for i := range 1200 {
		src.Put(newObj(fmt.Sprintf("k%04d", i), "g", "v"))
	}
	listRev := strconv.FormatInt(src.Revision(), 10)
	f := start(t, src, informer.Options[string, *obj]{PageSize: 500, MinWatchTimeout: time.Minute})
	if err := src.WaitForWatches(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if f.inf.Len() != 1200 {
		t.Fatalf("cache has %d", f.inf.Len())
	}
	reqs := src.Requests()
	var lists []informer.ListOptions
	var watch *informer.WatchOptions
	for _, r := range reqs {
		switch r.Op {
		case memory.OpList:
			lists = append(lists, r.List)
		case memory.OpWatch:
			if watch == nil {
				w := r.Watch
				watch = &w
			}
		}
	}
	if len(lists) != 3 || lists[0].Continue != "" || lists[1].Continue == "" || lists[2].Continue == "" {
		t.Fatalf("want 3 pages with continue tokens, got %+v", lists)
	}
	for _, l := range lists {
		if l.Limit != 500 {
			t.Fatalf("page limit %d", l.Limit)
		}
	}
	if watch == nil || watch.Revision != listRev || !watch.AllowBookmarks ||
		watch.Timeout < time.Minute || watch.Timeout >= 2*time.Minute {
		t.Fatalf("watch options %+v, want revision %s, bookmarks, timeout in [1m,2m)", watch, listRev)
	}
	if got := f.inf.Stats().ReceivedRevision; got != listRev {
		t.Fatalf("LastSyncRevision %q, want %q", got, listRev)
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

// A watch that ends normally is reopened from the last revision, without a relist.
func TestReflector_WatchEndReopensWithoutRelist(t *testing.T) {
	f, ev := startWith(t, informer.Options[string, *obj]{}, newObj("a", "g", "1"))
	src := f.src
	src.WaitForWatches(context.Background(), 1)
	src.Put(newObj("a", "g", "2"))
	ev.Expect(t, "add*a=1", "update a=1→2")
	src.DropWatches(nil) // io.EOF after events were received: a normal end
	src.Put(newObj("a", "g", "3"))
	ev.Expect(t, "add*a=1", "update a=1→2", "update a=2→3")
	if n := countOps(src, memory.OpList); n != 1 {
		t.Fatalf("%d lists, want 1 (no relist)", n)
	}
	last := src.Requests()[len(src.Requests())-1]
	if last.Op != memory.OpWatch || last.Watch.Revision != "2" {
		t.Fatalf("re-watch %+v, want from revision 2", last)
	}
	assertCache(t, f)
}

// A retryable failure backs off and re-watches from the same revision without
// a relist; Retry-After is honoured as a floor.
func TestReflector_RetryableErrorRewatchesWithoutRelist(t *testing.T) {
	for _, err := range []error{
		informer.ErrConnectionRefused,
		informer.RetryAfter(informer.ErrTooManyRequests, 2*time.Millisecond),
		fmt.Errorf("wrapped: %w", informer.ErrUnavailable),
	} {
		t.Run(err.Error(), func(t *testing.T) {
			f, ev := startWith(t, informer.Options[string, *obj]{}, newObj("a", "g", "1"))
			src := f.src
			src.WaitForWatches(context.Background(), 1)
			src.FailNext(2, memory.OpWatch, err)
			src.DropWatches(err)
			src.Put(newObj("a", "g", "2"))
			ev.Expect(t, "add*a=1", "update a=1→2")
			if n := countOps(src, memory.OpList); n != 1 {
				t.Fatalf("%d lists, want 1", n)
			}
			f.errs.WaitFor(t, informer.ErrRetryable)
		})
	}
}

// An expired revision leads to a relist at the last revision seen; objects deleted
// meanwhile reach OnDelete typed, with their last known state and finalStateUnknown.
func TestReflector_ExpiredRelistsWithTombstones(t *testing.T) {
	f, ev := startWith(t, informer.Options[string, *obj]{}, newObj("a", "g", "1"), newObj("b", "g", "1"))
	src := f.src
	ev.Expect(t, "add*a=1", "add*b=1")
	src.WaitForWatches(context.Background(), 1)

	// While the informer cannot watch: b is deleted, c added, a changed, history compacted.
	src.FailNext(1, memory.OpWatch, informer.ErrUnavailable)
	src.DropWatches(informer.ErrUnavailable)
	src.Delete("b")
	src.Put(newObj("c", "g", "1"))
	src.Put(newObj("a", "g", "2"))
	src.Compact(src.Revision())
	ev.Expect(t, "add*a=1", "add*b=1", "update a=1→2", "add c=1", "delete?b=1")
	var relist *informer.ListOptions
	for _, r := range src.Requests() {
		if r.Op == memory.OpList {
			relist = &r.List
		}
	}
	if relist == nil || relist.Consistent || relist.Revision != "2" {
		t.Fatalf("relist after expiry %+v, want one at least as new as revision 2 (the last seen), not a consistent one", relist)
	}
	if f.inf.Stats().Expirations == 0 {
		t.Fatal("expiration not counted")
	}
	assertCache(t, f)
}

// Bad input: an event older than one already seen, or of an unknown type, is reported
// (ErrBadInput, counted) and leads to a relist; the cache converges.
func TestReflector_BadInputRelists(t *testing.T) {
	for name, bad := range map[string]informer.Event[*obj]{
		"revision back in time": {Type: informer.Modified, Object: newObj("a", "g", "stale"), Revision: "1"},
		"unknown event type":    {Type: informer.EventType(42), Object: newObj("a", "g", "x"), Revision: "99"},
	} {
		t.Run(name, func(t *testing.T) {
			f, ev := startWith(t, informer.Options[string, *obj]{}, newObj("a", "g", "1"), newObj("b", "g", "1"), newObj("a", "g", "2"))
			src := f.src
			src.WaitForWatches(context.Background(), 1)
			src.Inject(bad)
			f.errs.WaitFor(t, informer.ErrBadInput)
			waitUntil(t, func() bool { return countOps(src, memory.OpList) >= 2 })
			src.Put(newObj("a", "g", "3"))
			ev.Expect(t, "add*a=2", "add*b=1", "update a=2→3")
			if f.inf.Stats().SourceErrors == 0 {
				t.Fatal("bad input not counted")
			}
			assertCache(t, f)
		})
	}
}

// A key function that fails for one object: reported, counted, skipped; others go on.
func TestInformer_KeyErrorSkipsObject(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("bad", "g", "1"))
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{
		Key: func(o *obj) (string, error) {
			if o.Key == "bad" {
				return "", errors.New("no key")
			}
			if o.Val == "panic" {
				panic("key function panicked")
			}
			return o.Key, nil
		},
	}, ev)
	src.Put(newObj("c", "g", "panic"))
	src.Put(newObj("d", "g", "1"))
	ev.Expect(t, "add*a=1", "add d=1")
	if n := f.inf.Stats().KeyErrors; n != 2 {
		t.Fatalf("KeyErrors = %d, want 2", n)
	}
	var oe *informer.ObjectError
	if reported := f.errs.All(); len(reported) == 0 || !errors.As(reported[0], &oe) || oe.Op != "key" {
		t.Fatalf("reported %v", reported)
	}
}

// With no ErrorHandler a failing key function still shows: a Warn line that names the
// informer and the object, at most one per kind per 10 s on the informer's clock, which
// counts the ones left out.
func TestInformer_KeyErrorWarnsWithoutErrorHandler(t *testing.T) {
	src := newSource(memory.Options{})
	var log testkit.LogBuffer
	fc := clock.NewFake(time.Unix(1000, 0))
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Name: "items", Logger: log.Logger(slog.LevelInfo), Clock: fc,
		Key: func(o *obj) (string, error) {
			if strings.HasPrefix(o.Key, "bad") {
				return "", errors.New("no key")
			}
			return o.Key, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvents()
	inf.AddHandler(ev, informer.HandlerOptions{})
	ctx := informertest.Run(t, inf)
	_ = informer.WaitForCacheSync(ctx, inf)
	warns := func() []string {
		var ws []string
		for l := range strings.Lines(log.String()) {
			if strings.Contains(l, "level=WARN") {
				ws = append(ws, strings.TrimSpace(l))
			}
		}
		return ws
	}
	for i := range 5 {
		src.Put(newObj(fmt.Sprintf("bad%d", i), "g", "1"))
	}
	src.Put(newObj("ok1", "g", "1")) // a barrier: the failures before it are reported
	ev.Expect(t, "add ok1=1")
	fc.Step(10 * time.Second)
	src.Put(newObj("bad5", "g", "1"))
	src.Put(newObj("ok2", "g", "1"))
	ev.Expect(t, "add ok1=1", "add ok2=1")
	ws := warns()
	if len(ws) != 2 {
		t.Fatalf("Warn lines:\n%s\nwant 2", strings.Join(ws, "\n"))
	}
	for i, want := range []string{`key of object &{Key:bad0 `, `key of object &{Key:bad5 `} {
		for _, w := range []string{`msg="informer error (set Options.ErrorHandler to handle these)"`, "kind=key", `informer \"items\"`, want, fmt.Sprintf("suppressed=%d", 4*i)} {
			if !strings.Contains(ws[i], w) {
				t.Errorf("Warn line %d lacks %s:\n%s", i, w, ws[i])
			}
		}
	}
}

// An index function that fails for one object: the object is skipped and reported.
func TestInformer_IndexErrorSkipsObject(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("b", "", "1"))
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{Indexers: informer.Indexers[*obj]{
		"group": informer.IndexBy(func(o *obj) (string, error) {
			if o.Group == "" {
				return "", errors.New("no group")
			}
			return o.Group, nil
		}),
	}}, ev)
	src.Put(newObj("c", "g", "1"))
	ev.Expect(t, "add*a=1", "add c=1")
	if f.inf.Stats().IndexErrors != 1 {
		t.Fatalf("IndexErrors = %d", f.inf.Stats().IndexErrors)
	}
}

// Transform runs before anything is stored; a failing transform skips the object.
func TestInformer_Transform(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(&obj{Key: "a", Group: "g", Val: "secret"})
	src.Put(&obj{Key: "b", Group: "g", Val: "fail"})
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{Transform: func(o *obj) (*obj, error) {
		if o.Val == "fail" {
			return nil, errors.New("cannot transform")
		}
		c := *o
		c.Val = strings.ToUpper(c.Val)
		return &c, nil
	}}, ev)
	src.Put(&obj{Key: "c", Group: "g", Val: "x"})
	ev.Expect(t, "add*a=SECRET", "add c=X")
	if f.inf.Stats().TransformErrors != 1 {
		t.Fatal("transform error not counted")
	}
}

// A handler added to a running informer gets the cache replayed as initial
// adds, then live changes; its own Synced closes after the replay.
func TestInformer_LateHandlerReplayAndPerHandlerSync(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("b", "g", "1"))
	f := start(t, src, informer.Options[string, *obj]{})
	late := newEvents()
	reg, err := f.inf.AddHandler(late, informer.HandlerOptions{Name: "late"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("late handler never synced")
	}
	if got := late.Calls(); !slices.Equal(got, []string{"add*a=1", "add*b=1"}) {
		t.Fatalf("replay %q", got)
	}
	src.Put(newObj("a", "g", "2"))
	late.Expect(t, "add*a=1", "add*b=1", "update a=1→2")
	if reg.Name() != "late" {
		t.Fatal(reg.Name())
	}
}

// RemoveHandler waits for the handler's goroutine; the handler gets nothing afterwards.
func TestInformer_RemoveHandler(t *testing.T) {
	src := newSource(memory.Options{})
	keep, gone := newEvents(), newEvents()
	f := start(t, src, informer.Options[string, *obj]{})
	regKeep, _ := f.inf.AddHandler(keep, informer.HandlerOptions{})
	reg, _ := f.inf.AddHandler(gone, informer.HandlerOptions{})
	src.Put(newObj("a", "g", "1"))
	gone.Expect(t, "add a=1")
	if !f.inf.RemoveHandler(reg) || f.inf.RemoveHandler(reg) {
		t.Fatal("RemoveHandler must report true once")
	}
	src.Put(newObj("b", "g", "1"))
	keep.Expect(t, "add a=1", "add b=1")
	if got := gone.Calls(); !slices.Equal(got, []string{"add a=1"}) {
		t.Fatalf("removed handler got %q", got)
	}
	_ = regKeep
}

// A panicking handler does not affect another handler or the informer.
func TestInformer_HandlerPanicIsolated(t *testing.T) {
	src := newSource(memory.Options{})
	good := newEvents()
	bad := informer.HandlerFuncs[*obj]{AddFunc: func(o *obj, _ bool) { panic("handler bug") }}
	f := start(t, src, informer.Options[string, *obj]{}, bad, good)
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("b", "g", "1"))
	good.Expect(t, "add a=1", "add b=1")
	waitUntil(t, func() bool { return f.inf.Stats().HandlerPanics == 2 })
	var pe *informer.HandlerPanicError
	if reported := f.errs.All(); !errors.As(reported[0], &pe) || pe.Value != "handler bug" {
		t.Fatalf("reported %v", reported)
	}
}

// WaitForRevision: read-your-writes for a source with ordered revisions.
func TestInformer_WaitForRevisionReadYourWrites(t *testing.T) {
	src := newSource(memory.Options{})
	f := start(t, src, informer.Options[string, *obj]{})
	for i := range 50 {
		rev := src.Put(newObj("k", "g", strconv.Itoa(i)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f.inf.WaitForRevision(ctx, strconv.FormatInt(rev, 10))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := f.inf.Get("k"); !ok || o.Val != strconv.Itoa(i) {
			t.Fatalf("after WaitForRevision(%d): %+v", rev, o)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.inf.WaitForRevision(ctx, "1000000"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a future revision must wait: %v", err)
	}
}

// Bookmarks advance the revision without an object change.
func TestReflector_BookmarkAdvancesRevision(t *testing.T) {
	src := newSource(memory.Options{})
	other := newSource(memory.Options{}) // to bump revisions without changing src's objects
	_ = other
	src.Put(newObj("a", "g", "1"))
	f := start(t, src, informer.Options[string, *obj]{})
	src.WaitForWatches(context.Background(), 1)
	src.Put(newObj("b", "g", "1"))
	src.Delete("b")
	rev := strconv.FormatInt(src.Revision(), 10)
	src.Bookmark()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.inf.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return f.inf.Stats().Bookmarks >= 1 })
	if f.inf.Stats().ReceivedRevision != rev {
		t.Fatalf("LastSyncRevision %s, want %s", f.inf.Stats().ReceivedRevision, rev)
	}
}

// Streaming lists: used when the source offers them; the result is the same.
func TestReflector_StreamingList(t *testing.T) {
	src := newSource(memory.Options{StreamingList: true})
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("b", "g", "1"))
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{}, ev)
	src.Put(newObj("c", "g", "1"))
	ev.Expect(t, "add*a=1", "add*b=1", "add c=1")
	if countOps(src, memory.OpList) != 0 {
		t.Fatal("a streaming source must not be listed")
	}
	reqs := src.Requests()
	if !reqs[0].Watch.SendInitialEvents {
		t.Fatalf("first request %+v", reqs[0])
	}
	assertCache(t, f)
}

// A watch that ends within a second with nothing received is an error and leads to
// a relist; its Warn names it (kind="watch: very short").
func TestReflector_VeryShortWatchRelists(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	logs := &testkit.LogBuffer{}
	f := start(t, src, informer.Options[string, *obj]{Logger: logs.Logger(slog.LevelWarn)})
	src.WaitForWatches(context.Background(), 1)
	src.DropWatches(nil)
	waitUntil(t, func() bool { return countOps(src, memory.OpList) >= 2 })
	reported := f.errs.All()
	found := false
	for _, err := range reported {
		found = found || strings.Contains(err.Error(), "very short watch")
	}
	if !found {
		t.Fatalf("errors %v", reported)
	}
	if out := logs.String(); !strings.Contains(out, `kind="watch: very short"`) {
		t.Fatalf("no Warn of kind \"watch: very short\":\n%s", out)
	}
}

// A stop during a slow list returns promptly.
func TestReflector_StopDuringList(t *testing.T) {
	src := newSource(memory.Options{})
	src.SetDelay(time.Hour)
	inf, _ := informer.New[string, *obj](src, informer.Options[string, *obj]{Key: func(o *obj) (string, error) { return o.Key, nil }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	waitUntil(t, func() bool { return len(src.Requests()) > 0 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel during a list")
	}
	if inf.Stats().Synced {
		t.Fatal("synced without a list")
	}
	if _, err := inf.AddHandler(newEvents(), informer.HandlerOptions{}); !errors.Is(err, informer.ErrStopped) {
		t.Fatalf("AddHandler after stop: %v", err)
	}
	if err := inf.Run(context.Background()); !errors.Is(err, informer.ErrAlreadyStarted) {
		t.Fatalf("second Run: %v", err)
	}
}

// Per-handler resync periods on a fake clock; a resync is
// OnUpdate(obj, obj), only to the handlers that are due.
func TestInformer_PerHandlerResync(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	src := newSource(memory.Options{Clock: fc})
	src.Put(newObj("a", "g", "1"))
	fast, slow, never := newEvents(), newEvents(), newEvents()
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		ResyncPeriod: 10 * time.Second,
		Clock:        fc,
	})
	if err != nil {
		t.Fatal(err)
	}
	inf.AddHandler(fast, informer.HandlerOptions{ResyncPeriod: 2 * time.Second})
	inf.AddHandler(slow, informer.HandlerOptions{})
	inf.AddHandler(never, informer.HandlerOptions{ResyncPeriod: -1})
	ctx := informertest.Run(t, inf)
	_ = informer.WaitForCacheSync(ctx, inf)
	fast.Expect(t, "add*a=1")
	slow.Expect(t, "add*a=1")
	// Timers armed: the watch timeout and the resync timer (period lowered to the shortest handler's, 2s).
	fc.WaitForWaiters(2, ctx.Done())
	for i := 1; i <= 5; i++ {
		fc.Step(2 * time.Second)
		want := []string{"add*a=1"}
		for range i {
			want = append(want, "resync a=1")
		}
		fast.Expect(t, want...)
		fc.WaitForWaiters(2, ctx.Done())
	}
	slow.Expect(t, "add*a=1", "resync a=1")
	never.Expect(t, "add*a=1") // waits for its own goroutine's call; fails on any resync
}

// On an informer with resync 0, no handler ever resyncs.
func TestInformer_NoResyncWhenInformerHasNone(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	src := newSource(memory.Options{Clock: fc})
	src.Put(newObj("a", "g", "1"))
	ev := newEvents()
	inf, _ := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key: func(o *obj) (string, error) { return o.Key, nil }, Clock: fc,
	})
	inf.AddHandler(ev, informer.HandlerOptions{ResyncPeriod: time.Second})
	ctx := informertest.Run(t, inf)
	ev.Expect(t, "add*a=1")
	fc.WaitForWaiters(1, ctx.Done()) // the watch timeout only
	fc.Step(5 * time.Second)
	src.Put(newObj("b", "g", "1"))
	ev.Expect(t, "add*a=1", "add b=1")
}

// With an object-revision function, an object listed again unchanged is a resync
// (not sent to handlers that are not syncing), and a changed one is an update.
func TestInformer_ReplacedWithSameRevisionIsResync(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(&obj{Key: "a", Group: "g", Val: "1", Rev: "r1"})
	src.Put(&obj{Key: "b", Group: "g", Val: "1", Rev: "r1"})
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{Revision: func(o *obj) string { return o.Rev }}, ev)
	ev.Expect(t, "add*a=1", "add*b=1")
	src.WaitForWatches(context.Background(), 1)
	src.Put(&obj{Key: "b", Group: "g", Val: "2", Rev: "r2"})
	ev.Expect(t, "add*a=1", "add*b=1", "update b=1→2")
	// Force a relist: a and b are unchanged, so they are resyncs, which reach only handlers
	// due for a resync (unlike client-go, on purpose): this handler hears nothing of them.
	src.FailNext(1, memory.OpWatch, informer.ErrExpired)
	src.DropWatches(informer.ErrExpired)
	waitUntil(t, func() bool { return countOps(src, memory.OpList) >= 2 })
	src.Put(&obj{Key: "c", Group: "g", Val: "1", Rev: "r1"})
	got := ev.WaitFor(t, 4)
	want := []string{"add*a=1", "add*b=1", "update b=1→2", "add c=1"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	assertCache(t, f)
}

// Factory: one informer per id, Start idempotent, late registrations run at the next
// Start, WaitForCacheSync over the started informers, Shutdown waits.
func TestFactory_SharedInformers(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	f := informer.NewFactory()
	defer f.Shutdown()
	builds := 0
	build := func() (*informer.Informer[string, *obj], error) {
		builds++
		return informer.New[string, *obj](src, informer.Options[string, *obj]{Key: func(o *obj) (string, error) { return o.Key, nil }})
	}
	i1, err := informer.InformerFor(f, "objs", build)
	i2, _ := informer.InformerFor(f, "objs", build)
	if err != nil || i1 != i2 || builds != 1 {
		t.Fatalf("same id must share one informer (builds=%d, err=%v)", builds, err)
	}
	if _, err := informer.InformerFor(f, "objs", func() (*informer.Informer[int, *obj], error) { return nil, nil }); err == nil {
		t.Fatal("same id with other type parameters must be an error")
	}
	ctx := context.Background()
	f.Start(ctx)
	f.Start(ctx) // Idempotent
	late, _ := informer.InformerFor(f, "late", func() (*informer.Informer[string, *obj], error) {
		return informer.New[string, *obj](src, informer.Options[string, *obj]{Key: objKeyErr, Name: "late"})
	})
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := f.WaitForCacheSync(sctx); err != nil || !i1.Stats().Synced {
		t.Fatalf("started informers synced: %v", err)
	}
	if late.Stats().Synced {
		t.Fatal("an informer registered after Start must not run before the next Start")
	}
	// The package function over an informer that cannot sync (not started) names it.
	done, stop := context.WithCancel(ctx)
	stop()
	err = informer.WaitForCacheSync(done, i1, late)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `not synced: "late": context canceled`) {
		t.Fatalf("WaitForCacheSync over a synced and an unstarted informer: %v", err)
	}
	f.Start(ctx)
	if err := f.WaitForCacheSync(sctx); err != nil || !late.Stats().Synced {
		t.Fatalf("after second Start: %v", err)
	}
	f.Shutdown()
	if _, err := informer.InformerFor(f, "x", build); !errors.Is(err, informer.ErrFactoryShutdown) {
		t.Fatalf("after Shutdown: %v", err)
	}
}

// AddIndexers on a running informer builds the index from the cache.
func TestInformer_AddIndexersWhileRunning(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "x", "1"))
	src.Put(newObj("b", "y", "2"))
	f := start(t, src, informer.Options[string, *obj]{})
	if err := f.inf.AddIndexers(informer.Indexers[*obj]{
		"val": informer.IndexBy(func(o *obj) (string, error) { return o.Val, nil }),
	}); err != nil {
		t.Fatal(err)
	}
	got, err := informer.ReadByIndex(f.inf, "val", "2")
	if err != nil || len(got) != 1 || got[0].Key != "b" {
		t.Fatalf("ByIndex(val, 2) = %v, %v", got, err)
	}
	if err := f.inf.AddIndexers(informer.Indexers[*obj]{"group": informer.IndexBy(func(o *obj) (string, error) { return "", nil })}); !errors.Is(err, informer.ErrIndexExists) {
		t.Fatalf("clash: %v", err)
	}
}

// Shutdown returns the first error a Run returned: here, the factory's Run of an informer
// the program had already run by hand.
func TestFactory_ShutdownReturnsRunError(t *testing.T) {
	src := newSource(memory.Options{})
	f := informer.NewFactory()
	inf, err := informer.InformerFor(f, "objs", func() (*informer.Informer[string, *obj], error) {
		return informer.New[string, *obj](src, informer.Options[string, *obj]{Key: objKeyErr})
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := runStoppable(t, inf)
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx)
	err = f.Shutdown()
	if !errors.Is(err, informer.ErrAlreadyStarted) || !strings.Contains(err.Error(), `"objs"`) {
		t.Fatalf("Shutdown = %v, want ErrAlreadyStarted naming objs", err)
	}
	stop()
}

// An informer keyed by a struct of strings needs no CompareKeys: keys are ordered as
// tuples (Group, then Key), in every read, and index reads follow that order.
func TestInformer_StructKey(t *testing.T) {
	type groupKey struct{ Group, Key string }
	src := newSource(memory.Options{})
	for _, o := range []*obj{newObj("b", "g2", "1"), newObj("a", "g2", "1"), newObj("c", "g1", "1"), newObj("d", "g1", "1")} {
		src.Put(o)
	}
	inf, err := informer.New[groupKey, *obj](src, informer.Options[groupKey, *obj]{
		Key: func(o *obj) (groupKey, error) { return groupKey{o.Group, o.Key}, nil },
		Indexers: informer.Indexers[*obj]{
			"val": informer.IndexBy(func(o *obj) (string, error) { return o.Val, nil }),
		},
		Backoff: fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	rev := src.Put(newObj("c", "g1", "2"))
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := inf.WaitForRevision(wctx, strconv.FormatInt(rev, 10)); err != nil {
		t.Fatal(err)
	}
	want := []groupKey{{"g1", "c"}, {"g1", "d"}, {"g2", "a"}, {"g2", "b"}}
	if got := informer.ReadKeys(inf); !slices.Equal(got, want) {
		t.Fatalf("Keys() = %v, want %v", got, want)
	}
	if o, ok := inf.Get(groupKey{"g1", "c"}); !ok || o.Val != "2" {
		t.Fatalf("Get(g1/c) = %+v, %v", o, ok)
	}
	var inRange []groupKey
	for k := range inf.Range(groupKey{"g1", "d"}, groupKey{"g2", "b"}) {
		inRange = append(inRange, k)
	}
	if !slices.Equal(inRange, want[1:3]) {
		t.Fatalf("Range(g1/d, g2/b) = %v, want %v", inRange, want[1:3])
	}
	seq, err := inf.ByIndex("val", "1")
	if err != nil {
		t.Fatal(err)
	}
	var byVal []groupKey
	for k := range seq {
		byVal = append(byVal, k)
	}
	if wantVal := []groupKey{{"g1", "d"}, {"g2", "a"}, {"g2", "b"}}; !slices.Equal(byVal, wantVal) {
		t.Fatalf("ByIndex(val, 1) = %v, want %v", byVal, wantVal)
	}
}

// Options.CompareKeys set by the user orders the cache, also for the key types the
// informer has a natural order for (a string, a struct of two strings): iteration, ranges
// and index reads follow it.
func TestInformer_CompareKeysOrdersNaturalKeyTypes(t *testing.T) {
	reverse := func(a, b string) int { return strings.Compare(b, a) }
	objs := []*obj{newObj("b", "g2", "1"), newObj("a", "g2", "1"), newObj("c", "g1", "1"), newObj("d", "g1", "1")}
	run := func(t *testing.T, inf interface{ Run(context.Context) error }) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	t.Run("key=string", func(t *testing.T) {
		src := newSource(memory.Options{})
		var rev int64
		for _, o := range objs {
			rev = src.Put(o)
		}
		inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
			Key:         func(o *obj) (string, error) { return o.Key, nil },
			CompareKeys: reverse,
			Indexers: informer.Indexers[*obj]{
				"group": informer.IndexBy(func(o *obj) (string, error) { return o.Group, nil }),
			},
			Backoff: fastBackoff,
		})
		if err != nil {
			t.Fatal(err)
		}
		run(t, inf)
		waitRev(t, inf, rev)
		if got, want := informer.ReadKeys(inf), []string{"d", "c", "b", "a"}; !slices.Equal(got, want) {
			t.Fatalf("Keys() = %q, want %q", got, want)
		}
		var inRange []string
		for k := range inf.Range("c", "a") {
			inRange = append(inRange, k)
		}
		if want := []string{"c", "b"}; !slices.Equal(inRange, want) {
			t.Fatalf("Range(c, a) = %q, want %q", inRange, want)
		}
		if got, _ := informer.ReadIndexKeys(inf, "group", "g2"); !slices.Equal(got, []string{"b", "a"}) {
			t.Fatalf("ByIndex(group, g2) keys = %q, want [b a]", got)
		}
	})
	t.Run("key=struct", func(t *testing.T) {
		type groupKey struct{ Group, Key string }
		src := newSource(memory.Options{})
		var rev int64
		for _, o := range objs {
			rev = src.Put(o)
		}
		inf, err := informer.New[groupKey, *obj](src, informer.Options[groupKey, *obj]{
			Key: func(o *obj) (groupKey, error) { return groupKey{o.Group, o.Key}, nil },
			// By Key first, then Group: not the field order.
			CompareKeys: func(a, b groupKey) int {
				return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Group, b.Group))
			},
			Backoff: fastBackoff,
		})
		if err != nil {
			t.Fatal(err)
		}
		run(t, inf)
		waitRev(t, inf, rev)
		want := []groupKey{{"g2", "a"}, {"g2", "b"}, {"g1", "c"}, {"g1", "d"}}
		if got := informer.ReadKeys(inf); !slices.Equal(got, want) {
			t.Fatalf("Keys() = %v, want %v", got, want)
		}
	})
}

func waitRev[K comparable](t *testing.T, inf *informer.Informer[K, *obj], rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := inf.WaitForRevision(ctx, strconv.FormatInt(rev, 10)); err != nil {
		t.Fatal(err)
	}
}

// A key type without a natural order needs Options.CompareKeys, and New says so.
func TestInformer_KeyWithoutOrderNeedsCompareKeys(t *testing.T) {
	type ref struct{ p *obj }
	src := newSource(memory.Options{})
	_, err := informer.New[ref, *obj](src, informer.Options[ref, *obj]{Key: func(o *obj) (ref, error) { return ref{o}, nil }})
	if err == nil || err.Error() != "informer: New: key type informer_test.ref has no natural order; set Options.CompareKeys" {
		t.Fatalf("New = %v", err)
	}
	inf, err := informer.New[ref, *obj](src, informer.Options[ref, *obj]{
		Key:         func(o *obj) (ref, error) { return ref{o}, nil },
		CompareKeys: func(a, b ref) int { return strings.Compare(a.p.Key, b.p.Key) },
	})
	if err != nil || inf == nil {
		t.Fatalf("New with CompareKeys = %v", err)
	}
}

// Plain handlers (no OnRevision) added to a running, synced informer get the replay and
// the live changes, and nothing is reported: no panic, no error.
func TestInformer_LatePlainHandlers(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	f := start(t, src, informer.Options[string, *obj]{})
	var mu sync.Mutex
	var calls []string
	record := func(s string) { mu.Lock(); calls = append(calls, s); mu.Unlock() }
	var regs []*informer.Registration
	for i := range 3 {
		name := fmt.Sprintf("late%d", i)
		reg, err := f.inf.AddHandler(informer.HandlerFuncs[*obj]{
			AddFunc:    func(o *obj, initial bool) { record(fmt.Sprintf("%s add %s=%s %v", name, o.Key, o.Val, initial)) },
			UpdateFunc: func(_, o *obj) { record(fmt.Sprintf("%s update %s=%s", name, o.Key, o.Val)) },
		}, informer.HandlerOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	src.Put(newObj("a", "g", "2"))
	waitUntil(t, func() bool {
		for _, reg := range regs {
			if st := reg.Stats(); !st.Synced || st.Delivered < 2 || st.Queued > 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	got := slices.Clone(calls)
	mu.Unlock()
	for i := range regs {
		name := fmt.Sprintf("late%d", i)
		var mine []string
		for _, c := range got {
			if strings.HasPrefix(c, name+" ") {
				mine = append(mine, c)
			}
		}
		if want := []string{name + " add a=1 true", name + " update a=2"}; !slices.Equal(mine, want) {
			t.Errorf("%s got %q, want %q", name, mine, want)
		}
		if p := regs[i].Stats().Panics; p != 0 {
			t.Errorf("%s: %d panics", name, p)
		}
	}
	if n := f.inf.Stats().HandlerPanics; n != 0 {
		t.Errorf("Stats().HandlerPanics = %d", n)
	}
	if reported := f.errs.All(); len(reported) != 0 {
		t.Errorf("errors reported: %v", reported)
	}
}

// fixedState is a Persister that holds one saved state in memory and saves nothing.
type fixedState struct {
	objs []*obj
	rev  string
}

func (p *fixedState) Load(_ context.Context, _ informer.PersistedCache, add func(*obj)) (string, error) {
	for _, o := range p.objs {
		add(o)
	}
	return p.rev, nil
}
func (p *fixedState) Save(context.Context, informer.PersistedCache, *informer.Snapshot[string, *obj]) error {
	return nil
}
func (p *fixedState) Interval() time.Duration { return 0 }
func (p *fixedState) Equal(a, b *obj) bool    { return *a == *b }

// A warm start publishes its revision with its sync: right after WaitForCacheSync (and
// Synced) LastSyncRevision is the restored state's revision, not "", even while a Block
// handler holds the restore's delivery of the initial adds.
func TestInformer_WarmStartRevisionBeforeSync(t *testing.T) {
	for i := range 5 {
		src := memory.New[string, *obj](objKey, memory.Options{})
		var objs []*obj
		for j := range 5 {
			o := newObj("k"+strconv.Itoa(j), "", "v")
			src.Put(o)
			objs = append(objs, o)
		}
		rev := strconv.FormatInt(src.Revision(), 10)
		inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
			Key:          objKeyErr,
			ErrorHandler: func(error) {},
			Persist:      &fixedState{objs: objs, rev: rev},
		})
		if err != nil {
			t.Fatal(err)
		}
		h := &stalledHandler{allow: make(chan struct{}), last: map[string]string{}}
		if _, err := inf.AddHandler(h, informer.HandlerOptions{QueueLength: 1, Policy: informer.Block}); err != nil {
			t.Fatal(err)
		}
		ctx, stop := runStoppable(t, inf)
		if err := informer.WaitForCacheSync(ctx, inf); err != nil {
			t.Fatal(err)
		}
		got := inf.Stats().ReceivedRevision
		close(h.allow)
		stop()
		if !inf.Stats().Restored {
			t.Fatalf("run %d: not restored", i)
		}
		if got != rev {
			t.Fatalf("run %d: LastSyncRevision right after a warm sync = %q, want %q", i, got, rev)
		}
	}
}

// The informer's list, watch and apply counters after a known sequence: one list of three
// objects, four changes, one dropped watch.
func TestInformer_StatsListsWatchesApplied(t *testing.T) {
	src := newSource(memory.Options{})
	for _, k := range []string{"a", "b", "c"} {
		src.Put(newObj(k, "g", "1"))
	}
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{}, ev)
	st := f.inf.Stats()
	if s := st.ListDuration; s.Count != 1 {
		t.Fatalf("ListDuration count %d after one list, want 1", s.Count)
	}
	items := st.ListItems
	if items.Count != 1 || items.Sum != 3 || items.Counts[1] != 1 { // bucket 1 is (1, 4]
		t.Fatalf("ListItems %+v, want one list of 3 objects in the (1, 4] bucket", items)
	}
	if err := src.WaitForWatches(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	src.Put(newObj("d", "g", "1"))
	src.Put(newObj("a", "g", "2"))
	src.Delete("b")
	src.Put(newObj("e", "g", "1"))
	ev.WaitFor(t, 7)
	st = f.inf.Stats()
	if got := st.Applied; got != 7 {
		t.Fatalf("Applied = %d, want 7 (3 listed + 4 changes)", got)
	}
	if got := st.WatchDuration.Count; got != 0 {
		t.Fatalf("WatchDuration count %d while the only watch is open, want 0", got)
	}
	src.DropWatches(nil)
	waitUntil(t, func() bool { return f.inf.Stats().WatchDuration.Count == 1 })
	f.stop()
	st = f.inf.Stats()
	if got := st.ListDuration.Count; got != st.Lists {
		t.Fatalf("ListDuration count %d, Lists %d: every list attempt is timed", got, st.Lists)
	}
}

// Done closes once Run has returned, not before.
func TestInformer_Done(t *testing.T) {
	src := newSource(memory.Options{})
	f := start(t, src, informer.Options[string, *obj]{})
	select {
	case <-f.inf.Done():
		t.Fatal("Done closed while running")
	default:
	}
	f.stop() // returns once Run has returned
	select {
	case <-f.inf.Done():
	default:
		t.Fatal("Done not closed after Run returned")
	}
}

func TestInformer_Handlers(t *testing.T) {
	inf, err := informer.New[string, *obj](newSource(memory.Options{}), informer.Options[string, *obj]{Key: func(o *obj) (string, error) { return o.Key, nil }})
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := inf.AddHandler(newEvents(), informer.HandlerOptions{Name: "one"})
	r2, _ := inf.AddHandler(newEvents(), informer.HandlerOptions{})
	names := func() (out []string) {
		for _, r := range inf.Stats().Handlers {
			out = append(out, r.Name())
		}
		return out
	}
	if got := names(); !slices.Equal(got, []string{"one", "handler-2"}) || inf.Stats().Handlers[0] != r1 || inf.Stats().Handlers[1] != r2 {
		t.Fatalf("Handlers = %q, want the registrations in order", got)
	}
	inf.RemoveHandler(r1)
	if got := names(); !slices.Equal(got, []string{"handler-2"}) {
		t.Fatalf("after RemoveHandler: %q", got)
	}
}

// gate is a handler whose OnAdd of key "a" waits until released.
type gate struct {
	*events
	release chan struct{}
}

func (g gate) OnAdd(o *obj, initial bool) {
	if o.Key == "a" {
		<-g.release
	}
	g.events.OnAdd(o, initial)
}

// MeasureLatency: a notification that waited two (fake) seconds behind a blocked call is
// recorded in the 2.5 s bucket; one delivered at once in the first bucket.
func TestHandler_MeasureLatency(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	src := newSource(memory.Options{})
	g := gate{events: newEvents(), release: make(chan struct{})}
	f := start(t, src, informer.Options[string, *obj]{Clock: fc})
	reg, err := f.inf.AddHandler(g, informer.HandlerOptions{MeasureLatency: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := f.inf.AddHandler(newEvents(), informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.Put(newObj("a", "g", "1")) // the handler blocks in OnAdd(a)
	src.Put(newObj("b", "g", "1"))
	waitUntil(t, func() bool { return reg.Stats().Queued == 2 && reg.Stats().Delivered == 1 })
	fc.Step(2 * time.Second)
	close(g.release)
	g.Expect(t, "add a=1", "add b=1")
	lat := reg.Stats().Latency
	bucket := slices.Index(lat.Bounds, 2.5)
	if lat.Count != 2 || lat.Counts[0] != 1 || lat.Counts[bucket] != 1 || lat.Sum != 2 {
		t.Fatalf("latency %+v: want a at 0 s (first bucket) and b at 2 s (2.5 s bucket)", lat)
	}
	if s := plain.Stats().Latency; s.Bounds != nil {
		t.Fatalf("a handler without MeasureLatency has a latency histogram: %+v", s)
	}
}

// ReportError: a source's non-fatal errors reach the error handler and are counted by
// class; ErrDecode is a kind of ErrBadInput, counted apart.
func TestInformer_ReportErrorCountsByClass(t *testing.T) {
	if !errors.Is(informer.ErrDecode, informer.ErrBadInput) {
		t.Fatal("ErrDecode does not match ErrBadInput")
	}
	var got []error
	inf, err := informer.New[string, *obj](newSource(memory.Options{}), informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		ErrorHandler: func(err error) { got = append(got, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	decode := fmt.Errorf("src: %w: key a: %w", informer.ErrDecode, errors.New("bad json"))
	bad := fmt.Errorf("src: %w: odd frame", informer.ErrBadInput)
	inf.ReportError(decode)
	inf.ReportError(bad)
	inf.ReportError(nil) // ignored
	st := inf.Stats()
	if len(got) != 2 || got[0] != decode || got[1] != bad {
		t.Fatalf("error handler got %v", got)
	}
	if st.DecodeErrors != 1 || st.SourceErrors != 1 || st.OtherErrors != 0 {
		t.Fatalf("decode %d source %d other %d, want 1 1 0", st.DecodeErrors, st.SourceErrors, st.OtherErrors)
	}
}

// WaitForCacheSync over an informer nobody runs returns within a second or so
// (NeverStartedAfter), naming it and saying what to do, instead of waiting for its
// context; an informer that runs is waited for as before.
func TestWaitForCacheSync_NeverStartedSaidWithinASecond(t *testing.T) {
	idle, err := informer.New[string, *obj](newSource(memory.Options{}), informer.Options[string, *obj]{Name: "idle", Key: objKeyErr})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := startWith(t, informer.Options[string, *obj]{Name: "running"}, newObj("a", "", "1"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	err = informer.WaitForCacheSync(ctx, f.inf, idle)
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("returned after %v, want about %v", took, informer.NeverStartedAfter)
	}
	if want := `informer: never started: "idle": add it to the manager, or call its Run (or Factory.Start)`; err == nil || err.Error() != want {
		t.Fatalf("WaitForCacheSync: %v, want %q", err, want)
	}
	if st := idle.Stats(); st.Started {
		t.Errorf("Stats.Started of an informer never run: true")
	}
	if st := f.inf.Stats(); !st.Started {
		t.Errorf("Stats.Started of a running informer: false")
	}
}
