package memory_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

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
	s := sourceOf("a", "b", "c")
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
	s := sourceOf("a", "b", "c")
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
	s := sourceOf("a", "b", "c")
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
