package memory_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/source/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type obj struct {
	Key, Val string
}

func (o *obj) String() string { return o.Key + "=" + o.Val }

func newSource(opts memory.Options) *memory.Source[string, *obj] {
	return memory.New(func(o *obj) string { return o.Key }, opts)
}

func put(s *memory.Source[string, *obj], key, val string) int64 {
	return s.Put(&obj{Key: key, Val: val})
}

// format renders an event as "Added a=1@3", "Bookmark@3" or "Bookmark(end)@3".
func format(ev informer.Event[*obj]) string {
	switch {
	case ev.Type == informer.Bookmark && ev.EndOfInitialEvents:
		return "Bookmark(end)@" + ev.Revision
	case ev.Type == informer.Bookmark:
		return "Bookmark@" + ev.Revision
	case ev.Object == nil:
		return fmt.Sprintf("%v <nil>@%s", ev.Type, ev.Revision)
	}
	return fmt.Sprintf("%v %v@%s", ev.Type, ev.Object, ev.Revision)
}

// ready reads n events that must already be available (Next does not block for them).
func ready(t *testing.T, w informer.Watch[*obj], n int) []string {
	t.Helper()
	var got []string
	for range n {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("Next after %q: %v", got, err)
		}
		got = append(got, format(ev))
	}
	return got
}

func expectEvents(t *testing.T, w informer.Watch[*obj], want ...string) {
	t.Helper()
	if got := ready(t, w, len(want)); !slices.Equal(got, want) {
		t.Fatalf("events\n got %q\nwant %q", got, want)
	}
}

type result struct {
	ev  informer.Event[*obj]
	err error
}

// nextAsync calls Next in a goroutine; the result arrives on the channel.
func nextAsync(w informer.Watch[*obj]) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ev, err := w.Next()
		ch <- result{ev, err}
	}()
	return ch
}

// await returns the result of nextAsync, failing the test after 10s (a hang, not a timing).
func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return within 10s")
		return result{}
	}
}

func watch(t *testing.T, s *memory.Source[string, *obj], opts informer.WatchOptions) informer.Watch[*obj] {
	t.Helper()
	w, err := s.Watch(context.Background(), opts)
	if err != nil {
		t.Fatalf("Watch(%+v): %v", opts, err)
	}
	t.Cleanup(w.Stop)
	return w
}

func keys(items []*obj) string {
	var b strings.Builder
	for i, o := range items {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(o.String())
	}
	return b.String()
}

func TestPutDeleteGet(t *testing.T) {
	s := newSource(memory.Options{})
	if s.Revision() != 0 || s.Len() != 0 || len(s.Items()) != 0 {
		t.Fatalf("new source: revision %d, len %d", s.Revision(), s.Len())
	}
	w := watch(t, s, informer.WatchOptions{})
	for i, step := range []struct {
		do   func() int64
		want int64
	}{
		{func() int64 { return put(s, "b", "1") }, 1},
		{func() int64 { return put(s, "a", "1") }, 2},
		{func() int64 { return put(s, "b", "2") }, 3},
		{func() int64 { r, _ := s.Delete("a"); return r }, 4},
		{func() int64 { return put(s, "a", "2") }, 5},
	} {
		if got := step.do(); got != step.want {
			t.Fatalf("step %d: revision %d, want %d", i, got, step.want)
		}
	}
	if rev, ok := s.Delete("missing"); ok || rev != 5 {
		t.Fatalf("Delete(missing) = %d, %v; want 5, false", rev, ok)
	}
	expectEvents(t, w, "Added b=1@1", "Added a=1@2", "Modified b=2@3", "Deleted a=1@4", "Added a=2@5")
	if o, ok := s.Get("b"); !ok || o.Val != "2" {
		t.Fatalf("Get(b) = %v, %v", o, ok)
	}
	if _, ok := s.Get("c"); ok {
		t.Fatal("Get(c) found an object")
	}
	items := s.Items()
	if got := keys(items); got != "a=2 b=2" || s.Len() != 2 || s.Revision() != 5 {
		t.Fatalf("Items %q, Len %d, Revision %d", got, s.Len(), s.Revision())
	}
	items[0] = nil // the slice is the caller's
	if got := keys(s.Items()); got != "a=2 b=2" {
		t.Fatalf("Items after changing the returned slice: %q", got)
	}
}

func TestListUnpaged(t *testing.T) {
	s := newSource(memory.Options{})
	l, err := s.List(context.Background(), informer.ListOptions{})
	if err != nil || len(l.Items) != 0 || l.Revision != "0" || l.Continue != "" {
		t.Fatalf("empty list = %+v, %v", l, err)
	}
	for _, k := range []string{"c", "a", "b"} {
		put(s, k, "1")
	}
	for _, opts := range []informer.ListOptions{
		{},
		{Consistent: true},
		{Revision: "1"},
		{Revision: "3"},
		{Limit: 3},
		{Limit: 10},
	} {
		l, err := s.List(context.Background(), opts)
		if err != nil || keys(l.Items) != "a=1 b=1 c=1" || l.Revision != "3" || l.Continue != "" {
			t.Fatalf("List(%+v) = %+v, %v", opts, l, err)
		}
	}
}

// A paged list reads one snapshot: changes made between pages are not in it, and every
// page reports the revision of the first.
func TestListPagesArePinned(t *testing.T) {
	s := newSource(memory.Options{})
	for i := range 10 {
		put(s, fmt.Sprintf("k%02d", i), "1")
	}
	ctx := context.Background()
	p1, err := s.List(ctx, informer.ListOptions{Limit: 4})
	if err != nil || keys(p1.Items) != "k00=1 k01=1 k02=1 k03=1" || p1.Revision != "10" || p1.Continue == "" {
		t.Fatalf("page 1 = %+v, %v", p1, err)
	}
	put(s, "k10", "1") // after the list's revision
	put(s, "k05", "2")
	s.Delete("k06")
	put(s, "k00", "2")

	p2, err := s.List(ctx, informer.ListOptions{Limit: 4, Continue: p1.Continue})
	if err != nil || keys(p2.Items) != "k04=1 k05=1 k06=1 k07=1" || p2.Revision != "10" || p2.Continue == "" {
		t.Fatalf("page 2 = %+v, %v", p2, err)
	}
	// A later page may ask for a different size.
	p3, err := s.List(ctx, informer.ListOptions{Limit: 1, Continue: p2.Continue})
	if err != nil || keys(p3.Items) != "k08=1" || p3.Revision != "10" || p3.Continue == "" {
		t.Fatalf("page 3 = %+v, %v", p3, err)
	}
	p4, err := s.List(ctx, informer.ListOptions{Limit: 4, Continue: p3.Continue})
	if err != nil || keys(p4.Items) != "k09=1" || p4.Revision != "10" || p4.Continue != "" {
		t.Fatalf("page 4 = %+v, %v", p4, err)
	}
	// The snapshot was dropped with the last page.
	if _, err := s.List(ctx, informer.ListOptions{Limit: 4, Continue: p2.Continue}); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("token of a finished list: %v, want ErrExpired", err)
	}
	// A fresh list sees the changes.
	l, err := s.List(ctx, informer.ListOptions{})
	if err != nil || keys(l.Items) != "k00=2 k01=1 k02=1 k03=1 k04=1 k05=2 k07=1 k08=1 k09=1 k10=1" || l.Revision != "14" {
		t.Fatalf("list after the changes = %+v, %v", l, err)
	}
}

// Two lists paged at the same revision do not share their snapshot's life.
func TestListConcurrentPagedLists(t *testing.T) {
	s := newSource(memory.Options{})
	for _, k := range []string{"a", "b", "c"} {
		put(s, k, "1")
	}
	ctx := context.Background()
	a1, _ := s.List(ctx, informer.ListOptions{Limit: 2})
	b1, _ := s.List(ctx, informer.ListOptions{Limit: 2})
	if a1.Continue == b1.Continue {
		t.Fatal("two lists got the same continue token")
	}
	if a2, err := s.List(ctx, informer.ListOptions{Limit: 2, Continue: a1.Continue}); err != nil || keys(a2.Items) != "c=1" {
		t.Fatalf("list A page 2 = %+v, %v", a2, err)
	}
	if b2, err := s.List(ctx, informer.ListOptions{Limit: 2, Continue: b1.Continue}); err != nil || keys(b2.Items) != "c=1" {
		t.Fatalf("list B page 2 after A finished = %+v, %v", b2, err)
	}
}

func TestListContinueAfterCompaction(t *testing.T) {
	s := newSource(memory.Options{})
	for _, k := range []string{"a", "b", "c"} {
		put(s, k, "1")
	}
	ctx := context.Background()
	p1, err := s.List(ctx, informer.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Compacting at the list's own revision keeps it: its history is not needed.
	s.Compact(3)
	if _, err := s.List(ctx, informer.ListOptions{Limit: 1, Continue: p1.Continue}); err != nil {
		t.Fatalf("continue after Compact(list revision): %v", err)
	}
	p1, _ = s.List(ctx, informer.ListOptions{Limit: 2})
	put(s, "d", "1")
	s.Compact(4)
	_, err = s.List(ctx, informer.ListOptions{Limit: 2, Continue: p1.Continue})
	if !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("continue after compaction past the list: %v, want ErrExpired", err)
	}
}

func TestListRevision(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	put(s, "b", "1")
	for _, tc := range []struct {
		rev     string
		expired bool
		bad     bool
	}{
		{rev: "0"},
		{rev: "2"},
		{rev: "3", expired: true}, // too large: the source has not reached it
		{rev: "9223372036854775807", expired: true},
		{rev: "x", bad: true},
		{rev: "-1", bad: true},
		{rev: "+1", bad: true},
		{rev: "01", bad: true},
		{rev: "9223372036854775808", bad: true},
	} {
		l, err := s.List(context.Background(), informer.ListOptions{Revision: tc.rev})
		switch {
		case tc.expired:
			if !errors.Is(err, informer.ErrExpired) || !strings.Contains(err.Error(), "too large") {
				t.Errorf("List(Revision %s): %v, want a too-large ErrExpired", tc.rev, err)
			}
		case tc.bad:
			if err == nil || errors.Is(err, informer.ErrExpired) || errors.Is(err, informer.ErrRetryable) {
				t.Errorf("List(Revision %q): %v, want a plain error", tc.rev, err)
			}
		default:
			if err != nil || l.Revision != "2" || len(l.Items) != 2 {
				t.Errorf("List(Revision %s) = %+v, %v", tc.rev, l, err)
			}
		}
	}
}

func TestListMalformedContinue(t *testing.T) {
	s := newSource(memory.Options{})
	for _, k := range []string{"a", "b", "c"} {
		put(s, k, "1")
	}
	p1, err := s.List(context.Background(), informer.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	// tok builds a token as the source does: the payload and its CRC-32, in base64.
	tok := func(payload string) string {
		b := binary.BigEndian.AppendUint32([]byte(payload), crc32.ChecksumIEEE([]byte(payload)))
		return base64.RawURLEncoding.EncodeToString(b)
	}
	damaged := []byte(p1.Continue)
	damaged[2] ^= 1
	for _, tok := range []string{
		"not base64!",
		"AA",
		base64.RawURLEncoding.EncodeToString([]byte("3.1.b")), // no checksum
		tok("3.1"),   // no key part
		tok("x.1.a"), // bad revision
		tok("3.0.a"), // list 0
		tok("3.x.a"), // bad list id
		tok("2.1.a"), // the right list at the wrong revision
		string(damaged),
	} {
		_, err := s.List(context.Background(), informer.ListOptions{Limit: 1, Continue: tok})
		if err == nil || errors.Is(err, informer.ErrExpired) || !strings.Contains(err.Error(), "malformed continue token") {
			t.Errorf("continue %q: %v, want a malformed-token error", tok, err)
		}
	}
	// The real token still works.
	if p2, err := s.List(context.Background(), informer.ListOptions{Limit: 5, Continue: p1.Continue}); err != nil || keys(p2.Items) != "b=1 c=1" {
		t.Fatalf("page 2 = %+v, %v", p2, err)
	}
}

// Keys of any ordered kind survive the continue token exactly.
func TestListContinueNumericKeys(t *testing.T) {
	type rec struct{ K float64 }
	s := memory.New(func(r rec) float64 { return r.K }, memory.Options{})
	want := []float64{-1e300, -0.1, 0, 1.0 / 3, 2, 1e300}
	for _, k := range want {
		s.Put(rec{k})
	}
	var got []float64
	opts := informer.ListOptions{Limit: 1}
	for {
		l, err := s.List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.Items {
			got = append(got, r.K)
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged %v, want %v", got, want)
	}

	type id uint8
	u := memory.New(func(v id) id { return v }, memory.Options{})
	for v := range id(255) {
		u.Put(v)
	}
	n := 0
	opts = informer.ListOptions{Limit: 100}
	for {
		l, err := u.List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range l.Items {
			if v != id(n) {
				t.Fatalf("item %d is %d", n, v)
			}
			n++
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	if n != 255 {
		t.Fatalf("paged %d items, want 255", n)
	}
}

func TestListContextCancelled(t *testing.T) {
	s := newSource(memory.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.List(ctx, informer.ListOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("List with a cancelled context: %v", err)
	}
	if _, err := s.Watch(ctx, informer.WatchOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch with a cancelled context: %v", err)
	}
}

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

var errOK = errors.New("no error")

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

func TestStreamingList(t *testing.T) {
	s := newSource(memory.Options{StreamingList: true})
	if !s.StreamingList() {
		t.Fatal("StreamingList() false")
	}
	put(s, "b", "1")
	put(s, "a", "1")
	put(s, "c", "1")
	s.Delete("c")
	for _, rev := range []string{"", "0", "4"} {
		w := watch(t, s, informer.WatchOptions{SendInitialEvents: true, Revision: rev})
		expectEvents(t, w, "Added a=1@4", "Added b=1@4", "Bookmark(end)@4")
		w.Stop()
	}
	w := watch(t, s, informer.WatchOptions{SendInitialEvents: true, AllowBookmarks: true})
	put(s, "d", "1") // made before the initial events are read: comes after them
	expectEvents(t, w, "Added a=1@4", "Added b=1@4", "Bookmark(end)@4", "Added d=1@5")
	if _, err := s.Watch(context.Background(), informer.WatchOptions{SendInitialEvents: true, Revision: "6"}); !errors.Is(err, informer.ErrExpired) {
		t.Fatalf("streaming list at a too-large revision: %v", err)
	}
	// An empty source streams just the bookmark.
	e := newSource(memory.Options{StreamingList: true})
	expectEvents(t, watch(t, e, informer.WatchOptions{SendInitialEvents: true}), "Bookmark(end)@0")

	off := newSource(memory.Options{})
	if off.StreamingList() {
		t.Fatal("StreamingList() true without the option")
	}
	if _, err := off.Watch(context.Background(), informer.WatchOptions{SendInitialEvents: true}); !errors.Is(err, informer.ErrNotSupported) {
		t.Fatalf("streaming list without the option: %v", err)
	}
}

func TestFailNext(t *testing.T) {
	s := newSource(memory.Options{})
	ctx := context.Background()
	boom := errors.New("boom")
	s.FailNext(2, memory.OpWatch, boom)
	s.FailNext(1, memory.OpAny, nil)
	s.FailNext(1, memory.OpList, informer.ErrTooManyRequests)
	s.FailNext(0, memory.OpList, boom) // nothing

	list := func() error { _, err := s.List(ctx, informer.ListOptions{}); return err }
	wat := func() error {
		w, err := s.Watch(ctx, informer.WatchOptions{})
		if err == nil {
			w.Stop()
		}
		return err
	}
	for i, step := range []struct {
		call func() error
		want error
	}{
		{list, informer.ErrUnavailable}, // the OpAny rule: the oldest that matches a list
		{wat, boom},
		{list, informer.ErrTooManyRequests},
		{wat, boom},
		{list, nil},
		{wat, nil},
	} {
		if err := step.call(); !errors.Is(err, step.want) || (step.want == nil && err != nil) {
			t.Fatalf("call %d: %v, want %v", i, err, step.want)
		}
	}
	reqs := s.Requests()
	var ops []string
	for _, r := range reqs {
		ops = append(ops, r.Op.String())
	}
	if want := []string{"List", "Watch", "List", "Watch", "List", "Watch"}; !slices.Equal(ops, want) {
		t.Fatalf("requests %q, want %q", ops, want)
	}
}

func TestRequestsRecordOptions(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	ctx := context.Background()
	lopts := informer.ListOptions{Revision: "1", Consistent: true, Limit: 5}
	wopts := informer.WatchOptions{Revision: "1", Timeout: 90 * time.Second, AllowBookmarks: true}
	s.List(ctx, lopts)
	w, _ := s.Watch(ctx, wopts)
	w.Stop()
	reqs := s.Requests()
	if len(reqs) != 2 || reqs[0] != (memory.Request{Op: memory.OpList, List: lopts}) ||
		reqs[1] != (memory.Request{Op: memory.OpWatch, Watch: wopts}) {
		t.Fatalf("requests %+v", reqs)
	}
	reqs[0].Op = memory.OpWatch // the slice is the caller's
	if s.Requests()[0].Op != memory.OpList {
		t.Fatal("Requests returned the source's own slice")
	}
}

// KeepRequests keeps the newest calls only, or none.
func TestRequestsKept(t *testing.T) {
	ctx := context.Background()
	for _, keep := range []int{-1, 1, 3} {
		s := newSource(memory.Options{KeepRequests: keep})
		for i := range 10 {
			w, err := s.Watch(ctx, informer.WatchOptions{Revision: "0", Timeout: time.Duration(i+1) * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			w.Stop()
		}
		var got []time.Duration
		for _, r := range s.Requests() {
			got = append(got, r.Watch.Timeout/time.Second)
		}
		var want []time.Duration
		for i := 10 - keep + 1; keep > 0 && i <= 10; i++ {
			want = append(want, time.Duration(i))
		}
		if !slices.Equal(got, want) {
			t.Errorf("KeepRequests %d: the calls kept have timeouts %v, want %v", keep, got, want)
		}
	}
}

func TestDropWatches(t *testing.T) {
	for _, tc := range []struct {
		err, want error
	}{
		{nil, io.EOF},
		{informer.ErrUnavailable, informer.ErrUnavailable},
	} {
		t.Run(fmt.Sprint(tc.want), func(t *testing.T) {
			s := newSource(memory.Options{})
			put(s, "a", "1")
			pending := watch(t, s, informer.WatchOptions{Revision: "0"})
			blocked := watch(t, s, informer.WatchOptions{})
			ch := nextAsync(blocked)
			if s.OpenWatches() != 2 {
				t.Fatalf("%d open watches", s.OpenWatches())
			}
			s.DropWatches(tc.err)
			// Pending events are abandoned.
			if _, err := pending.Next(); !errors.Is(err, tc.want) {
				t.Fatalf("Next of a dropped watch: %v, want %v", err, tc.want)
			}
			if r := await(t, ch); !errors.Is(r.err, tc.want) {
				t.Fatalf("blocked Next of a dropped watch: %v, want %v", r.err, tc.want)
			}
			if s.OpenWatches() != 0 {
				t.Fatalf("%d open watches after the drop", s.OpenWatches())
			}
			// The consumer watches again from its last revision and misses nothing.
			again := watch(t, s, informer.WatchOptions{Revision: "0"})
			put(s, "a", "2")
			expectEvents(t, again, "Added a=1@1", "Modified a=2@2")
		})
	}
}

func TestSetDelay(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	s := newSource(memory.Options{Clock: fc})
	put(s, "a", "1")
	s.SetDelay(time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := s.List(context.Background(), informer.ListOptions{})
		done <- err
	}()
	fc.WaitForWaiters(1, t.Context().Done())
	select {
	case err := <-done:
		t.Fatalf("List returned before the delay: %v", err)
	default:
	}
	fc.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A cancelled context ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := s.Watch(ctx, informer.WatchOptions{})
		done <- err
	}()
	fc.WaitForWaiters(1, t.Context().Done())
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch cancelled during the delay: %v", err)
	}
	if fc.Waiters() != 0 {
		t.Fatal("the delay timer was not released")
	}
	s.SetDelay(0)
	if _, err := s.List(context.Background(), informer.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Requests()); n != 3 {
		t.Fatalf("%d requests recorded, want 3", n)
	}
}

func TestInject(t *testing.T) {
	s := newSource(memory.Options{})
	put(s, "a", "1")
	w := watch(t, s, informer.WatchOptions{Revision: "0"})
	w2 := watch(t, s, informer.WatchOptions{})
	ch := nextAsync(w2)
	s.Inject(informer.Event[*obj]{Type: informer.Modified, Object: &obj{Key: "a", Val: "stale"}, Revision: "0"})
	s.Inject(informer.Event[*obj]{Type: informer.EventType(42), Revision: "x"})
	put(s, "b", "1")
	expectEvents(t, w, "Added a=1@1", "Modified a=stale@0", "EventType(42) <nil>@x", "Added b=1@2")
	if r := await(t, ch); r.err != nil || format(r.ev) != "Modified a=stale@0" {
		t.Fatalf("blocked watch got %s, %v", format(r.ev), r.err)
	}
	expectEvents(t, w2, "EventType(42) <nil>@x", "Added b=1@2")
	if s.Revision() != 2 || s.Len() != 2 {
		t.Fatalf("Inject changed the state: revision %d, len %d", s.Revision(), s.Len())
	}
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

func TestWaitForWatches(t *testing.T) {
	s := newSource(memory.Options{})
	done := make(chan error, 1)
	go func() { done <- s.WaitForWatches(context.Background(), 2) }()
	w1 := watch(t, s, informer.WatchOptions{})
	select {
	case err := <-done:
		t.Fatalf("WaitForWatches(2) returned with one watch: %v", err)
	default:
	}
	watch(t, s, informer.WatchOptions{})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w1.Stop()
	if s.OpenWatches() != 1 {
		t.Fatalf("OpenWatches %d", s.OpenWatches())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitForWatches(ctx, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForWatches with a cancelled context: %v", err)
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
