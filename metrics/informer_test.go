package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
)

// item is the object the tests mirror.
type item struct {
	Name  string
	Value int
}

func itemName(it *item) string { return it.Name }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newInformer returns an informer named name over src that fails the key function for
// objects named "bad-key" and the transform for objects named "bad-transform", and retries
// at once after a failure.
func newInformer(t *testing.T, src *memory.Source[string, *item], name string) *informer.Informer[string, *item] {
	t.Helper()
	inf, err := informer.New(src, informer.Options[string, *item]{
		Name: name,
		Key: func(it *item) (string, error) {
			if it.Name == "bad-key" {
				return "", errors.New("no key")
			}
			return it.Name, nil
		},
		Transform: func(it *item) (*item, error) {
			if it.Name == "bad-transform" {
				return nil, errors.New("cannot transform")
			}
			return it, nil
		},
		Backoff: informer.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Jitter: -1},
		Logger:  quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// registered returns newInformer's informer over src, named "items", registered in a
// new registry, and its metrics.
func registered(t *testing.T, src *memory.Source[string, *item]) (*prometheus.Registry, *informer.Informer[string, *item], *metrics.InformerMetrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	inf := newInformer(t, src, "items")
	im, err := metrics.RegisterInformer(reg, inf)
	if err != nil {
		t.Fatal(err)
	}
	return reg, inf, im
}

// run starts inf and returns a function that stops it and waits until Run has returned.
func run(t *testing.T, inf interface{ Run(context.Context) error }) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// newRecorder records a handler's calls in informertest's notation ("add a=0", …).
func newRecorder() *informertest.Recorder[*item] {
	return informertest.NewRecorder(func(it *item) (string, string) { return it.Name, strconv.Itoa(it.Value) })
}

// panicky is a handler that records its calls as newRecorder's does, and panics in every
// update once it has recorded it.
type panicky struct{ *informertest.Recorder[*item] }

func (p panicky) OnUpdate(old, new *item) {
	p.Recorder.OnUpdate(old, new)
	panic("handler bug")
}

// TestInformerSeries runs an informer through a known sequence — a failed list, a failed
// watch, objects whose key or transform fails, an update that panics in one handler, an
// add, a bookmark and a delete — and checks every series once it has stopped, then that
// Unregister leaves none.
func TestInformerSeries(t *testing.T) {
	src := memory.New(itemName, memory.Options{})
	for _, name := range []string{"a", "b", "c", "bad-key", "bad-transform"} {
		src.Put(&item{Name: name}) // revisions 1 to 5
	}
	src.FailNext(1, memory.OpList, nil)  // ErrUnavailable: listed again after the backoff
	src.FailNext(1, memory.OpWatch, nil) // ErrUnavailable: retryable, watched again

	reg, inf, im := registered(t, src)
	logH, panicH := newRecorder(), newRecorder()
	for _, h := range []struct {
		name string
		h    informer.Handler[*item]
	}{{"log", logH}, {"panicky", panicky{panicH}}} {
		if _, err := inf.AddHandler(h.h, informer.HandlerOptions{Name: h.name, Policy: informer.Block}); err != nil {
			t.Fatal(err)
		}
	}

	// Before Run: nothing listed yet, no revision.
	expectSeries(t, reg, exposition(
		`informer_lists_total{name="items"} 0`,
		`informer_synced{name="items"} 0`,
		`informer_handler_synced{handler="log",name="items"} 0`,
		`informer_handler_synced{handler="panicky",name="items"} 0`,
	), "informer_lists_total", "informer_synced", "informer_handler_synced", "informer_last_sync_revision")

	stop := run(t, inf)
	for _, r := range []*informertest.Recorder[*item]{logH, panicH} {
		r.ExpectNextUnordered(t, "add*a=0", "add*b=0", "add*c=0")
	}
	ctx := context.Background()
	if err := src.WaitForWatches(ctx, 1); err != nil { // the second watch: the first failed
		t.Fatal(err)
	}
	src.Put(&item{Name: "a", Value: 1}) // 6: modified; the panicky handler panics
	src.Put(&item{Name: "d"})           // 7: added
	src.Bookmark()                      //    a bookmark at 7
	src.Delete("b")                     // 8: deleted
	for _, r := range []*informertest.Recorder[*item]{logH, panicH} {
		r.ExpectNext(t, "update a=0→1", "add d=0", "delete b=0")
	}
	// Every counter is final once both handlers have returned from their last call.
	waitUntil(t, func() bool {
		for _, h := range inf.Stats().Handlers {
			if h.Stats().Queued != 0 {
				return false
			}
		}
		return true
	})

	expectSeries(t, reg, exposition(slices.Concat([]string{
		`informer_lists_total{name="items"} 2`,
		`informer_list_errors_total{name="items"} 1`,
		`informer_relists_total{name="items"} 1`,
		`informer_watches_total{name="items"} 2`,
		`informer_watch_errors_total{name="items"} 1`,
		`informer_expirations_total{name="items"} 0`,
		`informer_watch_events_total{name="items",type="added"} 1`,
		`informer_watch_events_total{name="items",type="bookmark"} 1`,
		`informer_watch_events_total{name="items",type="deleted"} 1`,
		`informer_watch_events_total{name="items",type="modified"} 1`,
		`informer_errors_total{kind="decode",name="items"} 0`,
		`informer_errors_total{kind="handler_panic",name="items"} 1`,
		`informer_errors_total{kind="index",name="items"} 0`,
		`informer_errors_total{kind="key",name="items"} 1`,
		`informer_errors_total{kind="other",name="items"} 2`,
		`informer_errors_total{kind="source",name="items"} 0`,
		`informer_errors_total{kind="transform",name="items"} 1`,
		`informer_store_objects{name="items"} 3`,
		`informer_synced{name="items"} 1`,
		`informer_last_sync_revision{name="items"} 8`,
		`informer_handler_queue_depth{handler="log",name="items"} 0`,
		`informer_handler_queue_depth{handler="panicky",name="items"} 0`,
		`informer_handler_delivered_total{handler="log",name="items"} 6`,
		`informer_handler_delivered_total{handler="panicky",name="items"} 6`,
		`informer_handler_coalesced_total{handler="log",name="items"} 0`,
		`informer_handler_coalesced_total{handler="panicky",name="items"} 0`,
		`informer_handler_blocked_total{handler="log",name="items"} 0`,
		`informer_handler_blocked_total{handler="panicky",name="items"} 0`,
		`informer_handler_panics_total{handler="log",name="items"} 0`,
		`informer_handler_panics_total{handler="panicky",name="items"} 1`,
		`informer_handler_synced{handler="log",name="items"} 1`,
		`informer_handler_synced{handler="panicky",name="items"} 1`,
		`informer_applied_total{name="items"} 6`,
		`informer_duplicates_total{name="items"} 0`,
	}, histogramSamples("informer_list_items", `name="items"`,
		[]string{"1", "4", "16", "64", "256", "1024", "4096", "16384", "65536", "262144", "1.048576e+06"},
		[]int{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, "4"))...), "informer_lists_total", "informer_list_errors_total", "informer_relists_total",
		"informer_watches_total", "informer_watch_errors_total", "informer_expirations_total",
		"informer_watch_events_total", "informer_errors_total", "informer_store_objects",
		"informer_synced", "informer_last_sync_revision", "informer_handler_queue_depth",
		"informer_handler_delivered_total", "informer_handler_coalesced_total",
		"informer_handler_blocked_total", "informer_handler_panics_total",
		"informer_handler_synced", "informer_applied_total", "informer_duplicates_total", "informer_list_items")
	// The durations vary; their counts do not: two lists (one failed), no watch ended yet
	// (the first failed to open, the second is open). The list saw 4 objects: the one
	// whose transform fails was dropped before, the one whose key fails after.
	if n, _ := histogram(t, reg, "informer_list_duration_seconds"); n != 2 {
		t.Errorf("informer_list_duration_seconds count %d, want 2", n)
	}
	if n, _ := histogram(t, reg, "informer_watch_duration_seconds"); n != 0 {
		t.Errorf("informer_watch_duration_seconds count %d, want 0", n)
	}
	lint(t, reg)

	stop() // the series go away with the informer
	expectNoSeries(t, reg)
	if im.Unregister() {
		t.Error("Unregister after the stop removed the series: true, want false")
	}
}

// waitUntil polls cond with a deadline, for state that has no event to wait on.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	testkit.Until(t, "the condition", time.Millisecond, cond)
}

// TestInformerHandlers: the handlers' series follow the informer's handlers as they are
// added and removed; two handlers of one name stay apart; a handler that measures its
// latency has a latency histogram; a name is free again once unregistered.
func TestInformerHandlers(t *testing.T) {
	src := memory.New(itemName, memory.Options{})
	reg, inf, im := registered(t, src)
	add := func(opts informer.HandlerOptions) *informer.Registration {
		hr, err := inf.AddHandler(newRecorder(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return hr
	}
	one := add(informer.HandlerOptions{Name: "one"})
	add(informer.HandlerOptions{Name: "two", MeasureLatency: true})
	add(informer.HandlerOptions{})            // named handler-3 by the informer
	add(informer.HandlerOptions{Name: "one"}) // a second "one": one#2
	expectSeries(t, reg, exposition(slices.Concat([]string{
		`informer_handler_delivered_total{handler="handler-3",name="items"} 0`,
		`informer_handler_delivered_total{handler="one",name="items"} 0`,
		`informer_handler_delivered_total{handler="one#2",name="items"} 0`,
		`informer_handler_delivered_total{handler="two",name="items"} 0`,
	}, histogramSamples("informer_handler_delivery_latency_seconds", `handler="two",name="items"`,
		[]string{"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "120"},
		[]int{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, "0"))...), "informer_handler_delivered_total", "informer_handler_delivery_latency_seconds")

	if !inf.RemoveHandler(one) {
		t.Fatal("RemoveHandler(one): false")
	}
	expectSeries(t, reg, exposition(
		`informer_handler_delivered_total{handler="handler-3",name="items"} 0`,
		`informer_handler_delivered_total{handler="one",name="items"} 0`,
		`informer_handler_delivered_total{handler="two",name="items"} 0`,
	), "informer_handler_delivered_total")

	im.Unregister()
	expectNoSeries(t, reg)
	// A second informer of the same name is refused; another name is fine; once
	// unregistered the name is free again.
	expectNames(t, reg, func(reg prometheus.Registerer, name string) (*metrics.InformerMetrics, error) {
		return metrics.RegisterInformer(reg, newInformer(t, src, name))
	}, "items", "others", "informer_store_objects")
}

// fakeInformer reports a chosen revision; it stops when done is closed (never if nil).
type fakeInformer struct {
	rev  string
	done chan struct{}
}

func (f *fakeInformer) Name() string          { return "fake" }
func (f *fakeInformer) Stats() informer.Stats { return informer.Stats{ReceivedRevision: f.rev} }
func (f *fakeInformer) Done() <-chan struct{} { return f.done }

// TestInformerStopFreesName: once an informer has stopped, a gather yields none of its
// series and an informer of the same name registers at once, whether or not the stopped
// one's series were removed from the registry yet; removing the old registration later
// leaves the new one's series in place.
func TestInformerStopFreesName(t *testing.T) {
	reg := prometheus.NewRegistry()
	old := &fakeInformer{rev: "1", done: make(chan struct{})}
	oldM, err := metrics.RegisterInformer(reg, old)
	if err != nil {
		t.Fatal(err)
	}
	close(old.done)
	expectNoSeries(t, reg)
	next := &fakeInformer{rev: "2", done: make(chan struct{})}
	nextM, err := metrics.RegisterInformer(reg, next)
	if err != nil {
		t.Fatalf("registering an informer of a stopped one's name: %v", err)
	}
	if oldM.Unregister() {
		t.Error("Unregister of the stopped informer: true, want false")
	}
	want := exposition(
		`informer_last_sync_revision{name="fake"} 2`,
	)
	expectSeries(t, reg, want, "informer_last_sync_revision")
	if !nextM.Unregister() {
		t.Error("Unregister of the running informer: false, want true")
	}
	expectNoSeries(t, reg)
}

// TestLastSyncRevision: a decimal received revision is exported as its 15 least significant
// digits; any other revision leaves the series out.
func TestLastSyncRevision(t *testing.T) {
	for _, tc := range []struct {
		rev  string
		want string // the series, or "" for none
	}{
		{"", ""},
		{"0", "0"},
		{"42", "42"},
		{"999999999999999", "9.99999999999999e+14"},
		{"1234567890123456789", "5.67890123456789e+14"},
		{"-1", ""},
		{"12a", ""},
		{"CAE=", ""},
	} {
		t.Run(tc.rev, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			im, err := metrics.RegisterInformer(reg, &fakeInformer{rev: tc.rev})
			if err != nil {
				t.Fatal(err)
			}
			defer im.Unregister()
			want := ""
			if tc.want != "" {
				want = exposition(`informer_last_sync_revision{name="fake"} ` + tc.want)
			}
			expectSeries(t, reg, want, "informer_last_sync_revision")
		})
	}
}

// TestGatherWhileRunning gathers, and adds and removes a handler, while the
// informer applies changes: run it with -race.
func TestGatherWhileRunning(t *testing.T) {
	src := memory.New(itemName, memory.Options{})
	reg, inf, im := registered(t, src)
	defer im.Unregister()
	r := newRecorder()
	_, err := inf.AddHandler(r, informer.HandlerOptions{Name: "h"})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, inf)
	defer stop()
	// Synced first, so that "last" reaches the handler as a live add, not in the list.
	ctx, cancel := context.WithTimeout(context.Background(), informertest.DefaultTimeout)
	defer cancel()
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}

	gathered := make(chan error)
	var extra *informer.Registration
	go func() {
		for i := range 100 {
			if i%2 == 0 {
				hr2, err := inf.AddHandler(informer.HandlerFuncs[*item]{}, informer.HandlerOptions{Name: "h2", MeasureLatency: true})
				if err != nil {
					gathered <- err
					return
				}
				extra = hr2
			} else {
				inf.RemoveHandler(extra)
			}
			if _, err := reg.Gather(); err != nil {
				gathered <- err
				return
			}
		}
		gathered <- nil
	}()
	for i := range 200 {
		src.Put(&item{Name: "x", Value: i})
	}
	src.Put(&item{Name: "last"})
	r.WaitForLine(t, "add last=0")
	if err := <-gathered; err != nil {
		t.Fatal(err)
	}
}

// A key listed twice in one list is counted in informer_duplicates_total, and reported
// once as bad input from the source.
func TestInformerDuplicatesSeries(t *testing.T) {
	lw := informer.ListerWatcherFuncs[*item]{
		ListFunc: func(context.Context, informer.ListOptions) (informer.List[*item], error) {
			return informer.List[*item]{Items: []*item{{Name: "a"}, {Name: "b"}, {Name: "a", Value: 1}}, Revision: "3"}, nil
		},
		WatchFunc: func(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*item], error) {
			return informer.ChanWatch[*item](ctx, nil, nil), nil
		},
	}
	inf, err := informer.New(lw, informer.Options[string, *item]{Name: "dups", Key: func(it *item) (string, error) { return it.Name, nil }, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.RegisterInformer(reg, inf); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	waitUntil(t, func() bool { return inf.Stats().Synced })
	expectSeries(t, reg, exposition(`informer_duplicates_total{name="dups"} 1`, `informer_store_objects{name="dups"} 2`),
		"informer_duplicates_total", "informer_store_objects")
	if n := inf.Stats().SourceErrors; n != 1 {
		t.Errorf("SourceErrors %d, want 1: the list's repeated key reported once", n)
	}
}
