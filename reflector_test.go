package informer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// listRequests returns the List requests src received, in order.
func listRequests(src *memory.Source[string, *obj]) []informer.ListOptions {
	var out []informer.ListOptions
	for _, r := range src.Requests() {
		if r.Op == memory.OpList {
			out = append(out, r.List)
		}
	}
	return out
}

// After a watch answered expired, the relist asks for a state at least as new as the last
// revision seen (which a cache can serve), not for a consistent list.
func TestReflector_RelistAfterExpiredWatchAsksLastRevision(t *testing.T) {
	f, ev := startWith(t, informer.Options[string, *obj]{}, newObj("a", "g", "1"))
	src := f.src
	src.WaitForWatches(context.Background(), 1)
	rev := src.Put(newObj("a", "g", "2"))
	ev.Expect(t, "add*a=1", "update a=1→2")
	src.DropWatches(fmt.Errorf("compacted: %w", informer.ErrExpired))
	waitUntil(t, func() bool { return f.inf.Stats().Relists == 2 })
	lists := listRequests(src)
	want := []informer.ListOptions{{Limit: 500}, {Revision: strconv.FormatInt(rev, 10), Limit: 500}}
	if !slices.Equal(lists, want) {
		t.Fatalf("list requests %+v, want %+v", lists, want)
	}
	if n := f.inf.Stats().ConsistentLists; n != 0 {
		t.Fatalf("ConsistentLists = %d, want 0", n)
	}
	assertCache(t, f)
}

// revisionLW wraps a memory source and lets a test answer some list requests itself.
type revisionLW struct {
	*memory.Source[string, *obj]
	list func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error, bool)

	mu    sync.Mutex
	lists []informer.ListOptions // every List request, answered here or by the source
}

func (l *revisionLW) requests() []informer.ListOptions {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lists)
}

func (l *revisionLW) List(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
	l.mu.Lock()
	l.lists = append(l.lists, opts)
	l.mu.Unlock()
	if page, err, ok := l.list(ctx, opts); ok {
		return page, err
	}
	return l.Source.List(ctx, opts)
}

// The cheapest correct relist, step by step: a continue token that expires makes the same
// list be asked again unpaged (at the same revision); a first page that answers expired
// makes the reflector ask for a consistent list, counted in Stats.ConsistentLists; a
// first page older than asked is bad input (reported) and answered the same way.
func TestReflector_RelistFallsBackStepByStep(t *testing.T) {
	cases := []struct {
		name      string
		answers   func(opts informer.ListOptions) bool // the relist requests the case answers
		list      informer.List[*obj]                  // its answer to them: list or err
		err       error
		wantOpts  func(rev string) []informer.ListOptions // the relist's requests
		consist   uint64
		badInput  bool
		wantError bool
	}{
		{
			name:    "expired continue token: same list unpaged",
			answers: func(opts informer.ListOptions) bool { return opts.Continue != "" },
			err:     fmt.Errorf("token gone: %w", informer.ErrExpired),
			wantOpts: func(rev string) []informer.ListOptions {
				return []informer.ListOptions{{Revision: rev, Limit: 2}, {Revision: rev, Continue: "*", Limit: 2}, {Revision: rev}}
			},
		},
		{
			name:    "revision not servable: consistent list",
			answers: func(opts informer.ListOptions) bool { return opts.Revision != "" },
			err:     fmt.Errorf("too old for me: %w", informer.ErrExpired),
			wantOpts: func(rev string) []informer.ListOptions {
				return []informer.ListOptions{{Revision: rev, Limit: 2}, {Consistent: true, Limit: 2}, {Consistent: true, Continue: "*", Limit: 2}}
			},
			consist: 1,
		},
		{
			name:    "stale answer: bad input, consistent list",
			answers: func(opts informer.ListOptions) bool { return opts.Revision != "" },
			list:    informer.List[*obj]{Items: []*obj{newObj("a", "g", "old")}, Revision: "1"},
			wantOpts: func(rev string) []informer.ListOptions {
				return []informer.ListOptions{{Revision: rev, Limit: 2}, {Consistent: true, Limit: 2}, {Consistent: true, Continue: "*", Limit: 2}}
			},
			consist:  1,
			badInput: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(memory.Options{})
			for _, k := range []string{"a", "b", "c"} {
				src.Put(newObj(k, "g", "1"))
			}
			relisting := make(chan struct{})
			var once sync.Once
			lw := &revisionLW{Source: src, list: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error, bool) {
				select {
				case <-relisting:
					if tc.answers(opts) {
						return tc.list, tc.err, true
					}
				default:
				}
				return informer.List[*obj]{}, nil, false
			}}
			var reported testkit.Errors
			inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{
				Key:          func(o *obj) (string, error) { return o.Key, nil },
				PageSize:     2,
				Backoff:      fastBackoff,
				ErrorHandler: reported.Report,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := informertest.Run(t, inf)
			if informer.WaitForCacheSync(ctx, inf) != nil {
				t.Fatal("no sync")
			}
			src.WaitForWatches(ctx, 1)
			rev := src.Put(newObj("d", "g", "1"))
			waitUntil(t, func() bool { return inf.Stats().ReceivedRevision == strconv.FormatInt(rev, 10) })
			before := len(lw.requests())
			once.Do(func() { close(relisting) })
			src.DropWatches(informer.ErrExpired)
			waitUntil(t, func() bool { return inf.Stats().Relists == 2 })
			got := lw.requests()[before:]
			for i := range got {
				if got[i].Continue != "" {
					got[i].Continue = "*"
				}
			}
			want := tc.wantOpts(strconv.FormatInt(rev, 10))
			if !slices.Equal(got, want) {
				t.Fatalf("relist requests %+v, want %+v", got, want)
			}
			if n := inf.Stats().ConsistentLists; n != tc.consist {
				t.Fatalf("ConsistentLists = %d, want %d", n, tc.consist)
			}
			if (len(reported.Matching(informer.ErrBadInput)) > 0) != tc.badInput {
				t.Fatalf("reported %v, want bad input %v", reported.All(), tc.badInput)
			}
			if got, want := len(informer.ReadList(inf)), src.Len(); got != want {
				t.Fatalf("cache has %d objects, source %d", got, want)
			}
		})
	}
}

// Repeated compactions: each round the watch is cut, two reconnects fail, the history is
// compacted meanwhile, and the third reconnect answers expired. The backoff during each
// cut starts again from Initial (1 s, 2 s, 4 s every round: the healthy watch between
// faults reset it), and the relist after the expiry follows at once, with no backoff (it
// came after progress): the catch-up, measured on the fake clock, is the same 7 s in
// every round.
func TestReflector_RepeatedCompactionsRecoverWithoutGrowth(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	src := newSource(memory.Options{}) // the source's watch timeouts on the wall clock
	src.Put(newObj("a", "g", "0"))
	inf, _ := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:     func(o *obj) (string, error) { return o.Key, nil },
		Clock:   fc,
		Backoff: informer.Backoff{Initial: time.Second, Max: time.Minute, Jitter: -1},
	})
	ctx := informertest.Run(t, inf)
	if informer.WaitForCacheSync(ctx, inf) != nil {
		t.Fatal("no sync")
	}
	watches := func() int { return countOps(src, memory.OpWatch) }
	revStr := func(r int64) string { return strconv.FormatInt(r, 10) }
	for round := range 7 {
		src.WaitForWatches(ctx, 1)
		rev := src.Put(newObj("a", "g", strconv.Itoa(round+1)))
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		if err := inf.WaitForRevision(wctx, revStr(rev)); err != nil {
			t.Fatalf("round %d: healthy watch: %v", round, err)
		}
		wcancel()
		start := fc.Now()
		src.FailNext(2, memory.OpWatch, informer.ErrUnavailable)
		src.DropWatches(informer.ErrUnavailable)
		src.Put(newObj("b", "g", strconv.Itoa(round)))
		src.Compact(src.Revision())
		for _, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			n := watches()
			fc.WaitForWaiters(1, ctx.Done())
			fc.Step(d - time.Millisecond)
			if watches() != n {
				t.Fatalf("round %d: re-watched before the backoff of %v elapsed", round, d)
			}
			fc.Step(time.Millisecond)
			waitUntil(t, func() bool { return watches() > n })
		}
		// The third reconnect answers expired: the relist follows with no wait on the clock.
		wctx, wcancel = context.WithTimeout(ctx, 10*time.Second)
		if err := inf.WaitForRevision(wctx, revStr(src.Revision())); err != nil {
			t.Fatalf("round %d: no prompt relist after the expiry: %v (relists %d)", round, err, inf.Stats().Relists)
		}
		wcancel()
		if took := fc.Since(start); took != 7*time.Second {
			t.Fatalf("round %d: catch-up took %v on the clock, want 7s", round, took)
		}
		if o, _ := inf.Get("b"); o == nil || o.Val != strconv.Itoa(round) {
			t.Fatalf("round %d: cache b = %+v", round, o)
		}
	}
	if n := inf.Stats().Relists; n != 8 {
		t.Fatalf("Relists = %d, want 8", n)
	}
	if n := inf.Stats().ConsistentLists; n != 0 {
		t.Fatalf("ConsistentLists = %d, want 0: a relist at the last revision is enough", n)
	}
}

// logRecords is a slog handler that keeps the records it is given.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}

func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *logRecords) WithGroup(string) slog.Handler { return h }

// warnings returns the messages and errors of the Warn records.
func (h *logRecords) warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level != slog.LevelWarn {
			continue
		}
		line := r.Message
		r.Attrs(func(a slog.Attr) bool {
			line += " " + a.Key + "=" + a.Value.String()
			return true
		})
		out = append(out, line)
	}
	return out
}

// A failing source is loud with no ErrorHandler: a Warn line per failure that names the
// informer once (quoted) and the operation, LastError tells why the cache did not sync,
// and it is cleared once the source recovers.
func TestReflector_FailuresLoggedAtWarnAndKeptAsLastError(t *testing.T) {
	fc := clock.NewFake(time.Unix(100, 0))
	src := newSource(memory.Options{Clock: fc})
	src.Put(newObj("a", "g", "1"))
	refused := fmt.Errorf("dial 127.0.0.1:1: %w", informer.ErrConnectionRefused)
	src.FailNext(2, memory.OpList, refused)
	logs := &logRecords{}
	inf, _ := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:     func(o *obj) (string, error) { return o.Key, nil },
		Name:    "payments",
		Clock:   fc,
		Logger:  slog.New(logs),
		Backoff: informer.Backoff{Initial: time.Second, Jitter: -1},
	})
	ctx := informertest.Run(t, inf)

	fc.WaitForWaiters(1, ctx.Done())
	sctx, scancel := context.WithTimeout(ctx, 10*time.Millisecond)
	synced := informer.WaitForCacheSync(sctx, inf) == nil
	scancel()
	st := inf.Stats()
	at, err := st.LastErrorAt, st.LastError
	if synced || !errors.Is(err, informer.ErrConnectionRefused) || !at.Equal(time.Unix(100, 0)) {
		t.Fatalf("synced %v, LastError %v at %v", synced, err, at)
	}
	want := `informer "payments": list: dial 127.0.0.1:1: connection refused`
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	if w := logs.warnings(); len(w) != 1 || !strings.Contains(w[0], want) || strings.Count(w[0], "payments") != 1 {
		t.Fatalf("Warn lines %q, want one with %q", w, want)
	}
	fc.Step(time.Second)
	waitUntil(t, func() bool { return countOps(src, memory.OpList) == 2 })
	fc.WaitForWaiters(1, ctx.Done())
	if w := logs.warnings(); len(w) != 2 {
		t.Fatalf("Warn lines %q, want one per failure", w)
	}
	fc.Step(2 * time.Second)
	sctx, scancel = context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if informer.WaitForCacheSync(sctx, inf) != nil {
		t.Fatal("no sync")
	}
	if st := inf.Stats(); st.LastError != nil || !st.LastErrorAt.IsZero() {
		t.Fatalf("LastError after the recovery: %v at %v", st.LastError, st.LastErrorAt)
	}
}

// panicky wraps a memory source and panics once in the named call: "List", "Watch",
// "Watch.Next" or "Watch.Stop".
type panicky struct {
	*memory.Source[string, *obj]
	call     string
	panicked atomic.Bool
}

func (p *panicky) once(call string) {
	if call == p.call && p.panicked.CompareAndSwap(false, true) {
		panic("boom in " + call)
	}
}

func (p *panicky) List(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
	p.once("List")
	return p.Source.List(ctx, opts)
}

func (p *panicky) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
	p.once("Watch")
	w, err := p.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &panickyWatch{Watch: w, p: p}, nil
}

type panickyWatch struct {
	informer.Watch[*obj]
	p *panicky
}

func (w *panickyWatch) Next() (informer.Event[*obj], error) {
	w.p.once("Watch.Next")
	return w.Watch.Next()
}

func (w *panickyWatch) Stop() { w.Watch.Stop(); w.p.once("Watch.Stop") }

// A panic in a source call is recovered and reported as bad input that names the
// informer and the call; the informer backs off, tries again and converges.
func TestReflector_SourcePanicIsBadInput(t *testing.T) {
	for _, call := range []string{"List", "Watch", "Watch.Next", "Watch.Stop"} {
		t.Run(call, func(t *testing.T) {
			src := &panicky{Source: memory.New[string, *obj](objKey, memory.Options{}), call: call}
			src.Put(newObj("a", "", "1"))
			e := &testkit.Errors{}
			inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
				Key:          objKeyErr,
				Name:         "panicky",
				Logger:       quiet,
				ErrorHandler: e.Report,
				Backoff:      fastBackoff,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := informertest.Run(t, inf)
			if call == "Watch.Stop" {
				// A watch is stopped when it ends: end the first one.
				if err := src.WaitForWatches(ctx, 1); err != nil {
					t.Fatal(err)
				}
				src.DropWatches(informer.ErrUnavailable)
			}
			waitUntil(t, src.panicked.Load)
			e.WaitFor(t, informer.ErrBadInput)
			bad := e.Matching(informer.ErrBadInput)
			msg := bad[len(bad)-1].Error()
			if !strings.Contains(msg, `"panicky"`) || !strings.Contains(msg, call+" panicked") || !strings.Contains(msg, "boom") {
				t.Fatalf("the error does not name the informer, the call and the panic: %v", msg)
			}
			t.Logf("reported: %v", msg)
			// Converges once the source behaves.
			src.Put(newObj("b", "", "2"))
			waitUntil(t, func() bool {
				_, ok := inf.Get("b")
				return ok && inf.Stats().Synced
			})
			if st := inf.Stats(); st.SourceErrors == 0 {
				t.Fatalf("the panic is not counted in Stats.SourceErrors: %+v", st)
			}
		})
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
