package informer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

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

// New refuses a source that would crash the informer at its first call.
func TestNew_RefusesNilSourceFunctions(t *testing.T) {
	list := func(context.Context, informer.ListOptions) (informer.List[*obj], error) {
		return informer.List[*obj]{}, nil
	}
	watch := func(context.Context, informer.WatchOptions) (informer.Watch[*obj], error) {
		return nil, nil
	}
	for name, lw := range map[string]informer.ListerWatcher[*obj]{
		"nil":              nil,
		"no functions":     informer.ListerWatcherFuncs[*obj]{},
		"no WatchFunc":     informer.ListerWatcherFuncs[*obj]{ListFunc: list},
		"no ListFunc":      informer.ListerWatcherFuncs[*obj]{WatchFunc: watch},
		"pointer, no func": &informer.ListerWatcherFuncs[*obj]{ListFunc: list},
		"nil pointer":      (*informer.ListerWatcherFuncs[*obj])(nil),
	} {
		t.Run(name, func(t *testing.T) {
			inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{Key: objKeyErr})
			if err == nil || inf != nil {
				t.Fatalf("New accepted %s: informer %v, error %v", name, inf, err)
			}
			t.Logf("%s: %v", name, err)
		})
	}
	if _, err := informer.New[string, *obj](informer.ListerWatcherFuncs[*obj]{ListFunc: list, WatchFunc: watch},
		informer.Options[string, *obj]{Key: objKeyErr}); err != nil {
		t.Fatalf("New refused complete ListerWatcherFuncs: %v", err)
	}
}
