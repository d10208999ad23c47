package informer_test

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

// An informer keyed by a struct of strings needs no CompareKeys: keys are ordered as
// tuples (Group, then Key), in every read, and index reads follow that order.
func TestInformer_StructKey(t *testing.T) {
	type groupKey struct{ Group, Key string }
	src := newSource(memory.Options{})
	for _, o := range []*obj{newObj("b", "g2", "1"), newObj("a", "g2", "1"), newObj("c", "g1", "1"), newObj("d", "g1", "1")} {
		src.Put(o)
	}
	inf, err := informer.New[groupKey, *obj](src, informer.Options[groupKey, *obj]{
		Key: func(o *obj) (groupKey, error) { return groupKey{o.Group, o.Key}, nil },
		Indexers: informer.Indexers[*obj]{
			"val": informer.IndexBy(func(o *obj) (string, error) { return o.Val, nil }),
		},
		Backoff: fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	rev := src.Put(newObj("c", "g1", "2"))
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := inf.WaitForRevision(wctx, strconv.FormatInt(rev, 10)); err != nil {
		t.Fatal(err)
	}
	want := []groupKey{{"g1", "c"}, {"g1", "d"}, {"g2", "a"}, {"g2", "b"}}
	if got := informer.ReadKeys(inf); !slices.Equal(got, want) {
		t.Fatalf("Keys() = %v, want %v", got, want)
	}
	if o, ok := inf.Get(groupKey{"g1", "c"}); !ok || o.Val != "2" {
		t.Fatalf("Get(g1/c) = %+v, %v", o, ok)
	}
	var inRange []groupKey
	for k := range inf.Range(groupKey{"g1", "d"}, groupKey{"g2", "b"}) {
		inRange = append(inRange, k)
	}
	if !slices.Equal(inRange, want[1:3]) {
		t.Fatalf("Range(g1/d, g2/b) = %v, want %v", inRange, want[1:3])
	}
	seq, err := inf.ByIndex("val", "1")
	if err != nil {
		t.Fatal(err)
	}
	var byVal []groupKey
	for k := range seq {
		byVal = append(byVal, k)
	}
	if wantVal := []groupKey{{"g1", "d"}, {"g2", "a"}, {"g2", "b"}}; !slices.Equal(byVal, wantVal) {
		t.Fatalf("ByIndex(val, 1) = %v, want %v", byVal, wantVal)
	}
}

// Options.CompareKeys set by the user orders the cache, also for the key types the
// informer has a natural order for (a string, a struct of two strings): iteration, ranges
// and index reads follow it.
func TestInformer_CompareKeysOrdersNaturalKeyTypes(t *testing.T) {
	reverse := func(a, b string) int { return strings.Compare(b, a) }
	objs := []*obj{newObj("b", "g2", "1"), newObj("a", "g2", "1"), newObj("c", "g1", "1"), newObj("d", "g1", "1")}
	run := func(t *testing.T, inf interface{ Run(context.Context) error }) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	t.Run("key=string", func(t *testing.T) {
		src := newSource(memory.Options{})
		var rev int64
		for _, o := range objs {
			rev = src.Put(o)
		}
		inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
			Key:         func(o *obj) (string, error) { return o.Key, nil },
			CompareKeys: reverse,
			Indexers: informer.Indexers[*obj]{
				"group": informer.IndexBy(func(o *obj) (string, error) { return o.Group, nil }),
			},
			Backoff: fastBackoff,
		})
		if err != nil {
			t.Fatal(err)
		}
		run(t, inf)
		waitRev(t, inf, rev)
		if got, want := informer.ReadKeys(inf), []string{"d", "c", "b", "a"}; !slices.Equal(got, want) {
			t.Fatalf("Keys() = %q, want %q", got, want)
		}
		var inRange []string
		for k := range inf.Range("c", "a") {
			inRange = append(inRange, k)
		}
		if want := []string{"c", "b"}; !slices.Equal(inRange, want) {
			t.Fatalf("Range(c, a) = %q, want %q", inRange, want)
		}
		if got, _ := informer.ReadIndexKeys(inf, "group", "g2"); !slices.Equal(got, []string{"b", "a"}) {
			t.Fatalf("ByIndex(group, g2) keys = %q, want [b a]", got)
		}
	})
	t.Run("key=struct", func(t *testing.T) {
		type groupKey struct{ Group, Key string }
		src := newSource(memory.Options{})
		var rev int64
		for _, o := range objs {
			rev = src.Put(o)
		}
		inf, err := informer.New[groupKey, *obj](src, informer.Options[groupKey, *obj]{
			Key: func(o *obj) (groupKey, error) { return groupKey{o.Group, o.Key}, nil },
			// By Key first, then Group: not the field order.
			CompareKeys: func(a, b groupKey) int {
				return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Group, b.Group))
			},
			Backoff: fastBackoff,
		})
		if err != nil {
			t.Fatal(err)
		}
		run(t, inf)
		waitRev(t, inf, rev)
		want := []groupKey{{"g2", "a"}, {"g2", "b"}, {"g1", "c"}, {"g1", "d"}}
		if got := informer.ReadKeys(inf); !slices.Equal(got, want) {
			t.Fatalf("Keys() = %v, want %v", got, want)
		}
	})
}

func waitRev[K comparable](t *testing.T, inf *informer.Informer[K, *obj], rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := inf.WaitForRevision(ctx, strconv.FormatInt(rev, 10)); err != nil {
		t.Fatal(err)
	}
}

// A key type without a natural order needs Options.CompareKeys, and New says so.
func TestInformer_KeyWithoutOrderNeedsCompareKeys(t *testing.T) {
	type ref struct{ p *obj }
	src := newSource(memory.Options{})
	_, err := informer.New[ref, *obj](src, informer.Options[ref, *obj]{Key: func(o *obj) (ref, error) { return ref{o}, nil }})
	if err == nil || err.Error() != "informer: New: key type informer_test.ref has no natural order; set Options.CompareKeys" {
		t.Fatalf("New = %v", err)
	}
	inf, err := informer.New[ref, *obj](src, informer.Options[ref, *obj]{
		Key:         func(o *obj) (ref, error) { return ref{o}, nil },
		CompareKeys: func(a, b ref) int { return strings.Compare(a.p.Key, b.p.Key) },
	})
	if err != nil || inf == nil {
		t.Fatalf("New with CompareKeys = %v", err)
	}
}
