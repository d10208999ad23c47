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
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// Only an add that comes from the first list is initial: an object of that list deleted
// and created again while the handler has not yet seen the list (it is stalled on its
// first call) is added the second time with initial false.
func TestInformer_InitialOnlyForTheFirstListsAdds(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	for _, k := range []string{"a", "b", "c", "d"} {
		src.Put(newObj(k, "", "1"))
	}
	inf := newQuiet(t, src, informer.Options[string, *obj]{MaxBatch: 1})
	h := newGated()
	if _, err := inf.AddHandler(h, informer.HandlerOptions{QueueLength: 1, Policy: informer.Block}); err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(func() { close(h.allow) })
	informertest.Run(t, inf, release)
	// The list is in the cache, its adds queued to the handler, which holds a: d is
	// deleted and created again before the handler has seen the list's add of d. (Whether
	// the writer is then waiting for room in the handler's queue depends on how soon the
	// handler's goroutine took the list's adds; either way the calls are the same.)
	waitUntil(t, func() bool { return inf.Stats().Synced })
	src.Delete("d")
	rev := src.Put(newObj("d", "", "2"))
	waitUntil(t, func() bool { return inf.Stats().ReceivedRevision == strconv.FormatInt(rev, 10) })
	release()
	h.ev.Expect(t, "add*a=1", "add*b=1", "add*c=1", "add*d=1", "delete d=1", "add d=2")
}

// Errors read once and name what failed: the informer, the function, the object by key
// (or the object itself when its key failed), the handler; a malformed revision passed to
// WaitForRevision is the caller's error, not bad input from the source.
func TestInformer_ErrorsNameInformerAndObject(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	src.Put(&obj{Key: "nokey"})
	src.Put(newObj("badindex", "boom", "1"))
	src.Put(newObj("ok", "g", "1"))
	var mu sync.Mutex
	var got []error
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Name: "payments",
		Key: func(o *obj) (string, error) {
			if o.Key == "nokey" {
				return "", errors.New("no name")
			}
			return o.Key, nil
		},
		Indexers: informer.Indexers[*obj]{"group": informer.IndexBy(func(o *obj) (string, error) {
			if o.Group == "boom" {
				return "", errors.New("bad group")
			}
			return o.Group, nil
		})},
		ErrorHandler: func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	panicked := make(chan struct{})
	if _, err := inf.AddHandler(informer.HandlerFuncs[*obj]{AddFunc: func(o *obj, _ bool) {
		if o.Key == "ok" {
			defer close(panicked)
			panic("handler bug")
		}
	}}, informer.HandlerOptions{Name: "audit"}); err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	<-panicked
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })
	mu.Lock()
	var msgs []string
	for _, err := range got {
		msgs = append(msgs, err.Error())
	}
	mu.Unlock()
	want := []string{
		`informer "payments": key of object &{Key:nokey Group: Val: Rev:}: no name (the object is skipped until it changes)`,
		`informer "payments": index group of the object with key badindex: bad group (the object is skipped until it changes)`,
		`informer "payments": handler "audit" panicked on key ok (notification skipped): handler bug`,
	}
	if !slices.Equal(msgs, want) {
		t.Fatalf("errors:\n got  %q\n want %q", msgs, want)
	}
	var hp *informer.HandlerPanicError
	if !errors.As(got[2], &hp) || !strings.Contains(string(hp.Stack), "TestInformer_ErrorsNameInformerAndObject") {
		t.Fatalf("HandlerPanicError without the handler's stack: %v", got[2])
	}
	err = inf.WaitForRevision(ctx, "junk")
	if err == nil || errors.Is(err, informer.ErrBadInput) || !strings.HasPrefix(err.Error(), `informer "payments": WaitForRevision("junk"): not a revision of this source`) {
		t.Fatalf("WaitForRevision(junk) = %v", err)
	}
}

// Run returns within Options.StopTimeout after its context ends even if a handler never
// returns, and a Warn names the handler and the key of its call.
func TestInformer_RunReturnsDespiteStuckHandler(t *testing.T) {
	const bound = 100 * time.Millisecond
	src := memory.New[string, *obj](objKey, memory.Options{})
	src.Put(newObj("stuck-key", "", "1"))
	logs := &testkit.LogBuffer{}
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          objKeyErr,
		Name:         "stopping",
		StopTimeout:  bound,
		Logger:       logs.Logger(slog.LevelWarn),
		ErrorHandler: func(error) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) }) // the handler's goroutine ends with its call
	var once sync.Once
	h := informer.HandlerFuncs[*obj]{AddFunc: func(*obj, bool) {
		once.Do(func() { close(entered) })
		<-release
	}}
	if _, err := inf.AddHandler(h, informer.HandlerOptions{Name: "never-returns"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the handler was never called")
	}
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10 s after its context ended, with a stuck handler and StopTimeout 100 ms")
	}
	took := time.Since(start)
	out := logs.String()
	t.Logf("Run returned %v after cancel; log: %s", took, out)
	if took < bound {
		t.Fatalf("Run returned after %v, before StopTimeout (%v), while a handler was in a call", took, bound)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "handler=never-returns") || !strings.Contains(out, "key=stuck-key") || !strings.Contains(out, "informer=stopping") {
		t.Fatalf("no Warn naming the informer, the handler and its key: %q", out)
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
