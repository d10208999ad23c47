package informer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/source/memory"
)

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
