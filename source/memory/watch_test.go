package memory_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/source/memory"
)

func TestWatchFromRevision(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	put(s, "b", "1")
	put(s, "a", "2")
	s.Delete("b")
	w := watch(t, s, informer.WatchOptions{Revision: "2"})
	expectEvents(t, w, "Modified a=2@3", "Deleted b=1@4")
	ch := nextAsync(w)
	put(s, "c", "1")
	if r := await(t, ch); r.err != nil || format(r.ev) != "Added c=1@5" {
		t.Fatalf("live event %s, %v", format(r.ev), r.err)
	}

	// From the current revision and from "": only later changes.
	w0 := watch(t, s, informer.WatchOptions{Revision: "5"})
	wNow := watch(t, s, informer.WatchOptions{})
	// From 0: the whole history.
	wAll := watch(t, s, informer.WatchOptions{Revision: "0"})
	put(s, "d", "1")
	expectEvents(t, w0, "Added d=1@6")
	expectEvents(t, wNow, "Added d=1@6")
	expectEvents(t, wAll, "Added a=1@1", "Added b=1@2", "Modified a=2@3", "Deleted b=1@4", "Added c=1@5", "Added d=1@6")
}

func TestWatchRevisionErrors(t *testing.T) {
	s := newSource(memory.Options{})
	for i := range 5 {
		put(s, "a", fmt.Sprint(i))
	}
	s.Compact(3)
	if got := s.CompactedRevision(); got != 3 {
		t.Fatalf("CompactedRevision %d", got)
	}
	for _, tc := range []struct {
		rev  string
		want error // nil: a plain error; errOK: no error
	}{
		{"0", informer.ErrExpired},
		{"2", informer.ErrExpired},
		{"3", errOK},
		{"5", errOK},
		{"6", informer.ErrExpired}, // too large
		{"x", nil},
		{"-3", nil},
	} {
		w, err := s.Watch(context.Background(), informer.WatchOptions{Revision: tc.rev})
		switch {
		case tc.want == errOK:
			if err != nil {
				t.Errorf("Watch(%s): %v", tc.rev, err)
				continue
			}
			w.Stop()
		case tc.want != nil:
			if !errors.Is(err, tc.want) {
				t.Errorf("Watch(%s): %v, want %v", tc.rev, err, tc.want)
			}
		default:
			if err == nil || errors.Is(err, informer.ErrExpired) {
				t.Errorf("Watch(%q): %v, want a plain error", tc.rev, err)
			}
		}
	}
	if n := s.OpenWatches(); n != 0 {
		t.Fatalf("%d watches open after failed and stopped ones", n)
	}
}

// A watch whose next event is compacted away fails with ErrExpired, and keeps failing.
func TestWatchFallsBehindCompaction(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	w := watch(t, s, informer.WatchOptions{Revision: "0"})
	put(s, "a", "2")
	put(s, "a", "3")
	expectEvents(t, w, "Added a=1@1")
	s.Compact(2)
	for range 2 {
		if _, err := w.Next(); !errors.Is(err, informer.ErrExpired) {
			t.Fatalf("Next after compaction: %v, want ErrExpired", err)
		}
	}
	if s.OpenWatches() != 0 {
		t.Fatal("an expired watch still counts as open")
	}
	// A watch that already read past the compacted revision is unaffected.
	w2 := watch(t, s, informer.WatchOptions{Revision: "2"})
	expectEvents(t, w2, "Modified a=3@3")
	s.Compact(3)
	put(s, "a", "4")
	expectEvents(t, w2, "Modified a=4@4")
}

func TestHistoryLimit(t *testing.T) {
	s := newSource(memory.Options{HistoryLimit: 3})
	w := watch(t, s, informer.WatchOptions{Revision: "0"})
	for i := range 5 {
		put(s, "a", fmt.Sprint(i))
	}
	if got := s.CompactedRevision(); got != 2 {
		t.Fatalf("CompactedRevision %d, want 2", got)
	}
	if _, err := w.Next(); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("a watch behind the history limit: %v", err)
	}
	if _, err := s.Watch(context.Background(), informer.WatchOptions{Revision: "1"}); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("Watch(1): %v", err)
	}
	w2 := watch(t, s, informer.WatchOptions{Revision: "2"})
	expectEvents(t, w2, "Modified a=2@3", "Modified a=3@4", "Modified a=4@5")
}

func TestCompactClampsAndIgnoresOld(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	put(s, "a", "2")
	s.Compact(100)
	if got := s.CompactedRevision(); got != 2 {
		t.Fatalf("Compact(100) at revision 2 compacted up to %d", got)
	}
	s.Compact(1)
	if got := s.CompactedRevision(); got != 2 {
		t.Fatalf("Compact(1) moved the compacted revision to %d", got)
	}
	w := watch(t, s, informer.WatchOptions{Revision: "2"})
	put(s, "a", "3")
	expectEvents(t, w, "Modified a=3@3")
}

// The watch timeout is measured on the Options clock and ends the stream with io.EOF.
func TestWatchTimeout(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	s := newSource(memory.Options{Clock: fc})
	put(s, "a", "1")
	w := watch(t, s, informer.WatchOptions{Timeout: time.Minute})
	if !fc.WaitForWaiters(1, t.Context().Done()) {
		t.Fatal("no timer armed")
	}
	ch := nextAsync(w)
	fc.Step(59 * time.Second)
	put(s, "a", "2")
	if r := await(t, ch); r.err != nil || format(r.ev) != "Modified a=2@2" {
		t.Fatalf("before the timeout: %s, %v", format(r.ev), r.err)
	}
	ch = nextAsync(w)
	fc.Step(time.Second)
	if r := await(t, ch); r.err != io.EOF {
		t.Fatalf("after the timeout: %s, %v; want io.EOF", format(r.ev), r.err)
	}
	if fc.Waiters() != 0 || s.OpenWatches() != 0 {
		t.Fatalf("after the timeout: %d timers, %d open watches", fc.Waiters(), s.OpenWatches())
	}

	// A timeout that passed while events were pending ends the stream all the same.
	w2 := watch(t, s, informer.WatchOptions{Revision: "0", Timeout: time.Second})
	fc.Step(time.Second)
	if _, err := w2.Next(); err != io.EOF {
		t.Fatalf("Next after the timeout passed: %v, want io.EOF", err)
	}
	if _, err := w2.Next(); err != io.EOF {
		t.Fatalf("Next again: %v, want io.EOF", err)
	}
}

func TestPeriodicBookmarks(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	s := newSource(memory.Options{Clock: fc, BookmarkInterval: 10 * time.Second})
	put(s, "a", "1")
	quiet := watch(t, s, informer.WatchOptions{}) // did not allow bookmarks: no timer
	if fc.Waiters() != 0 {
		t.Fatalf("%d timers for a watch without bookmarks", fc.Waiters())
	}
	w := watch(t, s, informer.WatchOptions{AllowBookmarks: true})
	if fc.Waiters() != 1 {
		t.Fatalf("%d timers, want the bookmark timer", fc.Waiters())
	}
	ch := nextAsync(w)
	fc.Step(10 * time.Second)
	if r := await(t, ch); r.err != nil || format(r.ev) != "Bookmark@1" {
		t.Fatalf("idle watch got %s, %v; want Bookmark@1", format(r.ev), r.err)
	}
	put(s, "b", "1")
	expectEvents(t, w, "Added b=1@2")
	fc.WaitForWaiters(1, t.Context().Done()) // re-armed after the bookmark
	ch = nextAsync(w)
	fc.Step(10 * time.Second)
	if r := await(t, ch); r.err != nil || format(r.ev) != "Bookmark@2" {
		t.Fatalf("second bookmark %s, %v; want Bookmark@2", format(r.ev), r.err)
	}
	// A tick that came while events were pending gives way to them.
	put(s, "c", "1")
	fc.Step(10 * time.Second)
	expectEvents(t, w, "Added c=1@3")
	expectEvents(t, quiet, "Added b=1@2", "Added c=1@3")
}

func TestManualBookmark(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	w := watch(t, s, informer.WatchOptions{Revision: "0", AllowBookmarks: true})
	quiet := watch(t, s, informer.WatchOptions{Revision: "0"})
	s.Bookmark()
	put(s, "b", "1")
	// The bookmark comes after the events that were pending when it was made.
	expectEvents(t, w, "Added a=1@1", "Bookmark@1", "Added b=1@2")
	expectEvents(t, quiet, "Added a=1@1", "Added b=1@2")
}

func TestStopUnblocksNext(t *testing.T) {
	s := newSource(memory.Options{})
	w, err := s.Watch(context.Background(), informer.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch := nextAsync(w)
	if err := s.WaitForWatches(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if r := await(t, ch); !errors.Is(r.err, memory.ErrWatchStopped) {
		t.Fatalf("Next after Stop: %v", r.err)
	}
	w.Stop() // twice is fine
	put(s, "a", "1")
	if _, err := w.Next(); !errors.Is(err, memory.ErrWatchStopped) {
		t.Fatalf("Next after Stop with an event: %v", err)
	}
	if s.OpenWatches() != 0 {
		t.Fatal("a stopped watch counts as open")
	}
}

func TestContextCancelUnblocksNext(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	s := newSource(memory.Options{Clock: fc, BookmarkInterval: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := s.Watch(ctx, informer.WatchOptions{Timeout: time.Minute, AllowBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ch := nextAsync(w)
	cancel()
	if r := await(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", r.err)
	}
	if _, err := w.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next again: %v", err)
	}
	if fc.Waiters() != 0 || s.OpenWatches() != 0 {
		t.Fatalf("after cancel: %d timers, %d open watches", fc.Waiters(), s.OpenWatches())
	}
}

func TestCompareRevisions(t *testing.T) {
	s := newSource(memory.Options{})
	for _, tc := range []struct {
		a, b string
		want int
		err  bool
	}{
		{"1", "2", -1, false},
		{"2", "1", 1, false},
		{"10", "9", 1, false},
		{"0", "0", 0, false},
		{"9223372036854775807", "1", 1, false},
		{"", "1", 0, true},
		{"1", "a", 0, true},
		{"-1", "1", 0, true},
		{"01", "1", 0, true},
		{"1.5", "1", 0, true},
	} {
		got, err := s.CompareRevisions(tc.a, tc.b)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("CompareRevisions(%q, %q) = %d, %v", tc.a, tc.b, got, err)
		}
	}
}

// Many concurrent writers and watchers: every watcher sees every change, in order.
func TestConcurrentPutAndWatch(t *testing.T) {
	s := newSource(memory.Options{HistoryLimit: 100000})
	const writers, perWriter, watchers = 4, 500, 4
	errs := make(chan error, watchers)
	for range watchers {
		w, err := s.Watch(context.Background(), informer.WatchOptions{Revision: "0"})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for want := 1; want <= writers*perWriter; want++ {
				ev, err := w.Next()
				if err != nil {
					errs <- err
					return
				}
				if ev.Revision != fmt.Sprint(want) {
					errs <- fmt.Errorf("revision %s, want %d", ev.Revision, want)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range writers {
		go func() {
			for j := range perWriter {
				put(s, fmt.Sprintf("w%d-%d", i, j%10), fmt.Sprint(j))
			}
		}()
	}
	for range watchers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
