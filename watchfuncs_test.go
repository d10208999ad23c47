package informer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/informer-go/informer"
)

// drain calls Next until it fails and returns the events' revisions and the error.
func drain(w informer.Watch[string]) ([]string, error) {
	var revs []string
	for {
		ev, err := w.Next()
		if err != nil {
			return revs, err
		}
		revs = append(revs, ev.Revision)
	}
}

// ChanWatch returns what was sent, in order, then io.EOF once the channel is closed;
// Stop calls the stop function once however often it is called.
func TestChanWatch_EventsThenEOF(t *testing.T) {
	ch := make(chan informer.Event[string], 3)
	for _, rev := range []string{"1", "2", "3"} {
		ch <- informer.Event[string]{Type: informer.Added, Object: "a", Revision: rev}
	}
	close(ch)
	stops := 0
	w := informer.ChanWatch(context.Background(), ch, func() { stops++ })
	revs, err := drain(w)
	if !slices.Equal(revs, []string{"1", "2", "3"}) || err != io.EOF {
		t.Fatalf("got %v, %v; want [1 2 3], io.EOF", revs, err)
	}
	if _, err := w.Next(); err != io.EOF {
		t.Fatalf("Next after the end: %v, want io.EOF", err)
	}
	w.Stop()
	w.Stop()
	if stops != 1 {
		t.Fatalf("stop function called %d times, want 1", stops)
	}
}

// After Stop, and once the context is done, Next returns at once, even with events
// waiting in the channel; a Next blocked on an empty channel returns when Stop is called
// from another goroutine.
func TestChanWatch_StopAndContext(t *testing.T) {
	full := make(chan informer.Event[string], 1)
	full <- informer.Event[string]{Type: informer.Added, Object: "a", Revision: "1"}

	w := informer.ChanWatch(context.Background(), full, nil)
	w.Stop()
	if _, err := w.Next(); err != io.EOF {
		t.Fatalf("Next after Stop: %v, want io.EOF", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w = informer.ChanWatch(ctx, full, nil)
	if _, err := w.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v, want context.Canceled", err)
	}

	w = informer.ChanWatch[string](context.Background(), nil, nil) // nil: never an event
	got := make(chan error, 1)
	go func() {
		_, err := w.Next()
		got <- err
	}()
	w.Stop()
	if err := <-got; err != io.EOF {
		t.Fatalf("blocked Next after Stop: %v, want io.EOF", err)
	}
}

// FuncWatch calls next for each Next, passes its errors through, and after Stop returns
// io.EOF without calling next again; Stop calls the stop function once.
func TestFuncWatch(t *testing.T) {
	calls, stops := 0, 0
	boom := errors.New("boom")
	w := informer.FuncWatch(func() (informer.Event[string], error) {
		calls++
		if calls == 3 {
			return informer.Event[string]{}, boom
		}
		return informer.Event[string]{Type: informer.Modified, Object: "a", Revision: fmt.Sprint(calls)}, nil
	}, func() { stops++ })
	revs, err := drain(w)
	if !slices.Equal(revs, []string{"1", "2"}) || err != boom {
		t.Fatalf("got %v, %v; want [1 2], boom", revs, err)
	}
	w.Stop()
	w.Stop()
	if _, err := w.Next(); err != io.EOF || calls != 3 || stops != 1 {
		t.Fatalf("after Stop: Next %v (want io.EOF), next called %d times (want 3), stop %d (want 1)", err, calls, stops)
	}
	// A nil stop function is allowed.
	w = informer.FuncWatch(func() (informer.Event[string], error) { return informer.Event[string]{}, io.EOF }, nil)
	w.Stop()
	if _, err := w.Next(); err != io.EOF {
		t.Fatalf("Next after Stop: %v, want io.EOF", err)
	}
}

// A source written as a goroutine that sends changes on a channel: ChanWatch makes its
// Watch, and the stop function ends the goroutine when the informer stops the watch.
func ExampleChanWatch() {
	changes := []informer.Event[string]{
		{Type: informer.Added, Object: "b", Revision: "2"},
		{Type: informer.Deleted, Object: "a", Revision: "3"},
	}
	lw := informer.ListerWatcherFuncs[string]{
		ListFunc: func(context.Context, informer.ListOptions) (informer.List[string], error) {
			return informer.List[string]{Items: []string{"a"}, Revision: "1"}, nil
		},
		WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[string], error) {
			ctx, cancel := context.WithCancel(ctx)
			events := make(chan informer.Event[string])
			go func() {
				defer close(events)
				for _, ev := range changes {
					if ev.Revision <= opts.Revision {
						continue // already seen: a watch starts after opts.Revision
					}
					select {
					case events <- ev:
					case <-ctx.Done():
						return
					}
				}
				<-ctx.Done() // the stream stays open until the watch is stopped
			}()
			return informer.ChanWatch(ctx, events, cancel), nil
		},
	}
	inf, _ := informer.New(lw, informer.Options[string, string]{
		Key: func(s string) (string, error) { return s, nil },
	})
	seen := make(chan string, 3)
	inf.AddHandler(informer.HandlerFuncs[string]{
		AddFunc:    func(s string, initial bool) { seen <- fmt.Sprint("add ", s, " initial=", initial) },
		DeleteFunc: func(s string, _ bool) { seen <- "delete " + s },
	}, informer.HandlerOptions{})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	for range 3 {
		fmt.Println(<-seen)
	}
	cancel()
	<-done
	// Output:
	// add a initial=true
	// add b initial=false
	// delete a
}
