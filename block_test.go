package informer_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
)

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

// A stalled Block handler delays nobody but the source: while the informer waits for room
// in its queue, Handlers, AddHandler and RemoveHandler of other handlers, reads and a
// metrics scrape all return.
func TestInformer_StalledBlockHandlerDelaysOnlyTheSource(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		ErrorHandler: func(error) {},
		Name:         "stalled",
		MaxBatch:     1, // a notification a batch: the handler's queue must fill
	})
	if err != nil {
		t.Fatal(err)
	}
	stalled := newGated()
	reg, err := inf.AddHandler(stalled, informer.HandlerOptions{QueueLength: 2, Policy: informer.Block, Name: "stalled"})
	if err != nil {
		t.Fatal(err)
	}
	other := newEvents()
	otherReg, err := inf.AddHandler(other, informer.HandlerOptions{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	promReg := prometheus.NewRegistry()
	if _, err := metrics.RegisterInformer(promReg, inf); err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf, func() { close(stalled.allow) })
	if informer.WaitForCacheSync(ctx, inf) != nil {
		t.Fatal("no sync")
	}
	// Fill the stalled handler's queue: the informer then waits for room.
	for i := range 10 {
		src.Put(newObj("k"+strconv.Itoa(i), "", "v"))
	}
	waitUntil(t, func() bool { return reg.Stats().Blocked > 0 })

	within := func(what string, f func()) {
		t.Helper()
		ch := make(chan struct{})
		go func() { defer close(ch); f() }()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not return while a Block handler was stalled", what)
		}
	}
	within("Handlers", func() {
		if n := len(inf.Stats().Handlers); n != 2 {
			t.Errorf("Handlers: %d, want 2", n)
		}
	})
	within("Get", func() { inf.Get("k0") })
	within("All", func() { informer.ReadList(inf) })
	within("metrics gather", func() {
		if _, err := promReg.Gather(); err != nil {
			t.Errorf("gather: %v", err)
		}
	})
	var late *informer.Registration
	lateEvents := newEvents()
	within("AddHandler", func() {
		late, err = inf.AddHandler(lateEvents, informer.HandlerOptions{Name: "late"})
		if err != nil {
			t.Error(err)
		}
	})
	within("RemoveHandler of another handler", func() {
		if !inf.RemoveHandler(otherReg) {
			t.Error("RemoveHandler: not registered")
		}
	})
	within("RemoveHandler of the late handler", func() {
		if !inf.RemoveHandler(late) {
			t.Error("RemoveHandler: not registered")
		}
	})
}

// Only an add that comes from the first list is initial: an object of that list deleted
// and created again while the handler has not yet seen the list (it is stalled on its
// first call) is added the second time with initial false.
func TestInformer_InitialOnlyForTheFirstListsAdds(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	for _, k := range []string{"a", "b", "c", "d"} {
		src.Put(newObj(k, "", "1"))
	}
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		ErrorHandler: func(error) {},
		MaxBatch:     1,
	})
	if err != nil {
		t.Fatal(err)
	}
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
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
