package informer

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeKnown is a cache for the queue's Replace and Resync.
type fakeKnown map[string]string

func (k fakeKnown) EachKnown(fn func(string, string)) {
	for key, v := range k {
		fn(key, v)
	}
}

// render pops one batch and renders it as "key:Type(obj)…" per key, in pop order.
func popAll(t *testing.T, f *deltaFIFO[string, string]) ([]string, watermark, bool) {
	t.Helper()
	batch, wm, synced, err := f.popBatch(nil, 1<<20, math.MaxInt)
	if err != nil {
		t.Fatalf("popBatch: %v", err)
	}
	var out []string
	for _, p := range batch {
		if b := p.bulk; b != nil {
			var parts []string
			for i, k := range b.keys {
				parts = append(parts, k+"="+b.objs[i])
			}
			at := "page"
			if b.last {
				at = "last page@" + b.rev
			}
			out = append(out, at+":"+strings.Join(parts, ","))
			continue
		}
		var parts []string
		for _, d := range p.list.deltas {
			s := fmt.Sprintf("%v(%s)", d.typ, d.object)
			if d.finalStateUnknown {
				s = "Tombstone(" + d.object + ")"
			}
			parts = append(parts, s)
		}
		out = append(out, p.key+":"+strings.Join(parts, ","))
	}
	f.finishBatch(batch)
	return out, wm, synced
}

func equal(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// A key already queued keeps its place; its later deltas come with the earlier ones.
func TestDeltaFIFO_KeyKeepsPlace(t *testing.T) {
	f := newDeltaFIFO[string, string](nil, nil, 0, false)
	f.add(deltaAdded, "a", "a1", "1")
	f.add(deltaAdded, "b", "b1", "2")
	f.add(deltaUpdated, "a", "a2", "3")
	got, wm, _ := popAll(t, f)
	equal(t, got, []string{"a:Added(a1),Updated(a2)", "b:Added(b1)"})
	if wm != (watermark{rev: "3", inclusive: true}) {
		t.Fatalf("watermark %+v", wm)
	}
}

// Only a trailing pair of deletes is merged, keeping the real delete over a tombstone.
func TestDeltaFIFO_Dedup(t *testing.T) {
	cases := []struct {
		name string
		run  func(f *deltaFIFO[string, string])
		want string
	}{
		{"real,real keeps older", func(f *deltaFIFO[string, string]) {
			f.add(deltaDeleted, "k", "d1", "1")
			f.add(deltaDeleted, "k", "d2", "2")
		}, "k:Deleted(d1)"},
		{"real,tombstone keeps real", func(f *deltaFIFO[string, string]) {
			f.add(deltaDeleted, "k", "d1", "1")
			f.mu.Lock()
			f.queueLocked("k", delta[string]{typ: deltaDeleted, finalStateUnknown: true, object: "t"})
			f.mu.Unlock()
		}, "k:Deleted(d1)"},
		{"tombstone,real keeps real", func(f *deltaFIFO[string, string]) {
			f.mu.Lock()
			f.queueLocked("k", delta[string]{typ: deltaDeleted, finalStateUnknown: true, object: "t"})
			f.mu.Unlock()
			f.add(deltaDeleted, "k", "d2", "2")
		}, "k:Deleted(d2)"},
		{"no other merging", func(f *deltaFIFO[string, string]) {
			f.add(deltaAdded, "k", "a", "1")
			f.add(deltaUpdated, "k", "b", "2")
			f.add(deltaUpdated, "k", "b", "3")
			f.add(deltaDeleted, "k", "b", "4")
		}, "k:Added(a),Updated(b),Updated(b),Deleted(b)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newDeltaFIFO[string, string](nil, nil, 0, false)
			c.run(f)
			got, _, _ := popAll(t, f)
			equal(t, got, []string{c.want})
		})
	}
}

// Replace queues Replaced for every item and a tombstone for every vanished key,
// whether known to the cache or only queued, with its last known object.
func TestDeltaFIFO_ReplaceTombstones(t *testing.T) {
	known := fakeKnown{"a": "a-cached", "gone": "gone-cached"}
	f := newDeltaFIFO[string, string](known, nil, 0, false)
	f.add(deltaAdded, "queued-only", "q1", "5")
	f.add(deltaAdded, "deleted-queued", "x", "6")
	f.add(deltaDeleted, "deleted-queued", "x", "7")
	if err := f.Replace([]string{"a", "new"}, []string{"a2", "n"}, "9"); err != nil {
		t.Fatal(err)
	}
	got, wm, synced := popAll(t, f)
	equal(t, got, []string{
		"queued-only:Added(q1),Tombstone(q1)",
		"deleted-queued:Added(x),Deleted(x)",
		"a:Replaced(a2)",
		"new:Replaced(n)",
		"gone:Tombstone(gone-cached)",
	})
	if !synced {
		t.Fatal("the pop that drains the initial population must report synced")
	}
	if wm != (watermark{rev: "9", inclusive: true}) {
		t.Fatalf("watermark %+v", wm)
	}
}

// Synced only after every key of the first Replace was popped; adds
// before it do not count; an empty first list syncs at once.
func TestDeltaFIFO_SyncedAfterInitialPopulation(t *testing.T) {
	f := newDeltaFIFO[string, string](fakeKnown{}, nil, 0, false)
	f.add(deltaAdded, "early", "e", "1")
	if f.HasSynced() {
		t.Fatal("an add before the first list must not mark the queue synced")
	}
	f.Replace([]string{"a", "b", "c"}, []string{"a", "b", "c"}, "2")
	batch, _, synced, _ := f.popBatch(nil, 2, math.MaxInt) // early, a
	if ds := batch[0].list.deltas; len(ds) != 2 || ds[0].initial || ds[1].initial {
		t.Fatalf("early key, not in the first list: an add and a tombstone, neither initial: %+v", ds)
	}
	if !batch[1].list.deltas[0].initial {
		t.Fatal("the objects of the first list are marked initial")
	}
	f.finishBatch(batch)
	if synced || f.HasSynced() {
		t.Fatal("synced before the whole initial population was popped")
	}
	f.add(deltaAdded, "late", "l", "3")
	batch, _, synced, _ = f.popBatch(nil, 2, math.MaxInt) // b, c
	f.finishBatch(batch)
	if !synced || !f.HasSynced() {
		t.Fatal("not synced after the initial population was popped")
	}
	batch, _, _, _ = f.popBatch(nil, 10, math.MaxInt)
	if batch[0].key != "late" || batch[0].list.deltas[0].initial {
		t.Fatalf("late key: %+v", batch[0])
	}
	f.finishBatch(batch)

	empty := newDeltaFIFO[string, string](fakeKnown{}, nil, 0, false)
	empty.Replace(nil, nil, "7")
	_, wm, synced := popAll(t, empty)
	if !synced || wm.rev != "7" {
		t.Fatalf("an empty first list syncs at once: synced=%v wm=%+v", synced, wm)
	}
}

// Resync queues Sync from the cache only for keys with nothing pending.
func TestDeltaFIFO_ResyncSkipsPending(t *testing.T) {
	known := fakeKnown{"a": "a-cached", "b": "b-cached"}
	f := newDeltaFIFO[string, string](known, nil, 0, false)
	f.add(deltaUpdated, "a", "a-new", "4")
	f.Resync()
	got, _, _ := popAll(t, f)
	equal(t, got, []string{"a:Updated(a-new)", "b:Sync(b-cached)"})
}

// Replace and Resync wait for the batch in flight to be applied, so they
// never read a cache older than what was popped.
func TestDeltaFIFO_ReplaceWaitsForBatchInFlight(t *testing.T) {
	known := fakeKnown{}
	var mu sync.Mutex
	f := newDeltaFIFO[string, string](lockedKnown{known, &mu}, nil, 0, false)
	f.add(deltaAdded, "a", "a1", "1")
	batch, _, _, _ := f.popBatch(nil, 10, math.MaxInt)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Replace([]string{"b"}, []string{"b1"}, "2")
	}()
	select {
	case <-done:
		t.Fatal("replace ran while a batch was in flight")
	case <-time.After(20 * time.Millisecond): // only bounds the negative check
	}
	mu.Lock()
	known["a"] = "a1" // the batch is applied
	mu.Unlock()
	f.finishBatch(batch)
	<-done
	got, _, _ := popAll(t, f)
	equal(t, got, []string{"b:Replaced(b1)", "a:Tombstone(a1)"})
}

type lockedKnown struct {
	m  fakeKnown
	mu *sync.Mutex
}

func (l lockedKnown) EachKnown(fn func(string, string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m.EachKnown(fn)
}

// The watermark of a partial pop is the oldest revision still queued, exclusive.
func TestDeltaFIFO_WatermarkOfPartialPop(t *testing.T) {
	f := newDeltaFIFO[string, string](nil, nil, 0, false)
	f.add(deltaAdded, "a", "a", "1")
	f.add(deltaAdded, "b", "b", "2")
	f.add(deltaUpdated, "a", "a", "3")
	batch, wm, _, _ := f.popBatch(nil, 1, math.MaxInt)
	if batch[0].key != "a" || wm != (watermark{rev: "2"}) {
		t.Fatalf("batch %v wm %+v, want a and everything before 2", batch[0].key, wm)
	}
	f.finishBatch(batch)
	f.Bookmark("8")
	_, wm, _ = popAll(t, f)
	if wm != (watermark{rev: "8", inclusive: true}) {
		t.Fatalf("after a bookmark: %+v", wm)
	}
}

// Backpressure: add blocks while MaxPending deltas are queued; close releases it.
func TestDeltaFIFO_BoundedAddBlocks(t *testing.T) {
	f := newDeltaFIFO[string, string](nil, nil, 2, false)
	f.add(deltaAdded, "a", "a", "1")
	f.add(deltaAdded, "b", "b", "2")
	added := make(chan error)
	go func() { added <- f.add(deltaAdded, "c", "c", "3") }()
	select {
	case <-added:
		t.Fatal("add did not wait for room")
	case <-time.After(20 * time.Millisecond): // only bounds the negative check
	}
	batch, _, _, _ := f.popBatch(nil, 1, math.MaxInt)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	f.finishBatch(batch)
	go func() { added <- f.add(deltaAdded, "d", "d", "4") }()
	f.Close()
	if err := <-added; !errors.Is(err, errFIFOClosed) {
		t.Fatalf("add after close: %v", err)
	}
	if _, _, _, err := f.popBatch(nil, 1, math.MaxInt); !errors.Is(err, errFIFOClosed) {
		t.Fatalf("pop after close: %v", err)
	}
}

// A first list that finds the queue and the cache empty is queued whole, as one unit popped
// alone, and the queue reports synced with it; keys queued after it pop after it, and a
// relist waits until it is applied, then works per key against the cache.
func TestDeltaFIFO_FirstListQueuedWhole(t *testing.T) {
	known := fakeKnown{}
	f := newDeltaFIFO[string, string](known, nil, 0, false)
	f.wholeFirst = true
	f.Replace([]string{"a", "b", "a"}, []string{"a1", "b1", "a2"}, "5")
	if f.HasSynced() {
		t.Fatal("synced before the whole first list was popped")
	}
	f.add(deltaUpdated, "b", "b2", "6")
	relisted := make(chan error)
	batch, wm, synced, err := f.popBatch(nil, 1<<20, math.MaxInt)
	if err != nil || len(batch) != 1 || batch[0].bulk == nil {
		t.Fatalf("first pop: %+v, %v; want the whole list alone", batch, err)
	}
	if b := batch[0].bulk; !b.last || b.rev != "5" || strings.Join(b.keys, ",") != "a,b,a" || strings.Join(b.objs, ",") != "a1,b1,a2" {
		t.Fatalf("first pop: %+v; want the list a=a1, b=b1, a=a2 as its last page at 5", *b)
	}
	if !synced || wm != (watermark{rev: "5", inclusive: true}) {
		t.Fatalf("first pop: synced %v, watermark %+v; want synced at 5 (the key queued after is not in)", synced, wm)
	}
	go func() { relisted <- f.Replace([]string{"a"}, []string{"a3"}, "7") }()
	// The store applies the batch: the relist must not read the cache before that.
	known["a"], known["b"] = "a2", "b1"
	f.finishBatch(batch)
	if !f.HasSynced() {
		t.Fatal("not synced once the whole first list was popped")
	}
	if err := <-relisted; err != nil {
		t.Fatal(err)
	}
	got, _, synced := popAll(t, f)
	equal(t, got, []string{"b:Updated(b2),Tombstone(b2)", "a:Replaced(a3)"})
	if synced {
		t.Fatal("a relist must not report the initial population again")
	}
}

// A first list into a cache that already holds objects (adds before any list) is queued
// per key, so that what the list lacks is deleted.
func TestDeltaFIFO_FirstListIntoNonEmptyCachePerKey(t *testing.T) {
	f := newDeltaFIFO[string, string](fakeKnown{"old": "o"}, nil, 0, false)
	f.wholeFirst = true
	f.Replace([]string{"a"}, []string{"a1"}, "3")
	got, wm, synced := popAll(t, f)
	equal(t, got, []string{"a:Replaced(a1)", "old:Tombstone(o)"})
	if !synced || wm != (watermark{rev: "3", inclusive: true}) {
		t.Fatalf("synced %v, watermark %+v", synced, wm)
	}
}

// A paged first list into an empty queue and cache is queued page by page, each popped
// alone; only the last page carries the revision and the sync. A page queued after an
// abort is refused, and the next list goes per key against what the pages left.
func TestDeltaFIFO_FirstListByPages(t *testing.T) {
	known := fakeKnown{}
	f := newDeltaFIFO[string, string](known, nil, 0, false)
	f.wholeFirst = true
	if !f.FirstPage([]string{"a", "b"}, []string{"a1", "b1"}) {
		t.Fatal("the first page of a first list into an empty queue and cache was refused")
	}
	got, wm, synced := popAll(t, f)
	equal(t, got, []string{"page:a=a1,b=b1"})
	if synced || wm != (watermark{}) || f.HasSynced() {
		t.Fatalf("a page that is not the last: synced %v, watermark %+v", synced, wm)
	}
	known["a"], known["b"] = "a1", "b1"
	if !f.FirstPage([]string{"c"}, []string{"c1"}) {
		t.Fatal("a later page of the same list was refused")
	}
	if err := f.Replace([]string{"d"}, []string{"d1"}, "4"); err != nil {
		t.Fatal(err)
	}
	got, _, synced = popAll(t, f)
	equal(t, got, []string{"page:c=c1"})
	if synced {
		t.Fatal("synced before the last page")
	}
	got, wm, synced = popAll(t, f)
	equal(t, got, []string{"last page@4:d=d1"})
	if !synced || wm != (watermark{rev: "4", inclusive: true}) || !f.HasSynced() {
		t.Fatalf("last page: synced %v, watermark %+v", synced, wm)
	}
	if f.FirstPage([]string{"e"}, []string{"e1"}) {
		t.Fatal("a page was queued whole after the first list")
	}
}

// A first list that fails after some pages were queued: the pages are applied, the next
// list is queued per key and deletes what it lacks.
func TestDeltaFIFO_FirstListAbortedAfterPages(t *testing.T) {
	known := fakeKnown{}
	f := newDeltaFIFO[string, string](known, nil, 0, false)
	f.wholeFirst = true
	f.FirstPage([]string{"a", "b"}, []string{"a1", "b1"})
	f.AbortFirst("1")
	got, _, _ := popAll(t, f)
	equal(t, got, []string{"page:a=a1,b=b1"})
	known["a"], known["b"] = "a1", "b1"
	if f.FirstPage([]string{"x"}, []string{"x1"}) {
		t.Fatal("a page was queued whole into a cache that holds the aborted list's pages")
	}
	f.Replace([]string{"a", "c"}, []string{"a2", "c1"}, "6")
	got, wm, synced := popAll(t, f)
	equal(t, got, []string{"a:Replaced(a2)", "c:Replaced(c1)", "b:Tombstone(b1)"})
	if !synced || wm != (watermark{rev: "6", inclusive: true}) {
		t.Fatalf("synced %v, watermark %+v", synced, wm)
	}
}

// A key that gets several changes while queued costs no allocation per change: its list's
// room past the inline delta is carved from a chunk shared by many lists, not grown one
// allocation at a time (two allocations for three deltas before).
func TestDeltaFIFO_QueuedChangesAllocateRarely(t *testing.T) {
	const keys = 4096
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("k%05d", i)
	}
	allocs := testing.AllocsPerRun(5, func() {
		f := newDeltaFIFO[string, string](nil, nil, 0, false)
		for round := range 3 {
			typ := deltaUpdated
			if round == 0 {
				typ = deltaAdded
			}
			for _, k := range names {
				f.add(typ, k, k, "")
			}
		}
	})
	if perKey := allocs / keys; perKey > 0.25 {
		t.Fatalf("queuing 3 changes for each of %d keys made %.0f allocations (%.2f per key), want at most 0.25 per key", keys, allocs, perKey)
	}
}

// Methods of the delta queue that only tests use.

// String returns the name of the delta type.
func (t deltaType) String() string {
	switch t {
	case deltaAdded:
		return "Added"
	case deltaUpdated:
		return "Updated"
	case deltaDeleted:
		return "Deleted"
	case deltaReplaced:
		return "Replaced"
	case deltaSync:
		return "Sync"
	}
	return "deltaType(?)"
}

// add queues one watch change. It blocks while the queue is full and returns
// errFIFOClosed once closed.
func (f *deltaFIFO[K, V]) add(typ deltaType, key K, obj V, rev string) error {
	return f.addPrepared(key, delta[V]{typ: typ, object: obj, revision: rev}, false, nil)
}

// HasSynced reports whether the initial population has been popped. The informer
// reports synced only once that batch is also applied.
func (f *deltaFIFO[K, V]) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.populated && f.initialCount == 0 && len(f.bulks) == 0
}

// watermark is what Pop reports, as one value.
type watermark struct {
	rev       string
	inclusive bool
}

// popBatch is Pop into buf, for tests that read the popped entries.
func (f *deltaFIFO[K, V]) popBatch(buf []popped[K, V], maxKeys, maxDeltas int) ([]popped[K, V], watermark, bool, error) {
	b := &batch[K, V]{items: buf}
	rev, inclusive, synced, err := f.Pop(b, maxKeys, maxDeltas)
	return b.items, watermark{rev: rev, inclusive: inclusive}, synced, err
}

// finishBatch is Done for entries popBatch returned.
func (f *deltaFIFO[K, V]) finishBatch(items []popped[K, V]) { f.Done(&batch[K, V]{items: items}) }

// A transaction's changes are popped whole: while the last change added says more of its
// revision follow, a pop that would drain the queue waits for them, and then reports the
// transaction's revision as reached.
func TestDeltaFIFO_TransactionPoppedWhole(t *testing.T) {
	f := newDeltaFIFO[string, string](nil, nil, 0, false)
	f.add(deltaAdded, "x", "x1", "4")
	if _, wm, _ := popAll(t, f); wm != (watermark{rev: "4", inclusive: true}) {
		t.Fatalf("watermark %+v", wm)
	}
	if err := f.Add(Event[string]{Type: Added, Object: "a1", Revision: "5"}, "a", true, nil); err != nil {
		t.Fatal(err)
	}
	type result struct {
		got []string
		wm  watermark
	}
	popped := make(chan result)
	go func() {
		got, wm, _ := popAll(t, f)
		popped <- result{got, wm}
	}()
	select {
	case r := <-popped:
		t.Fatalf("popped %q at %+v while the transaction at revision 5 was still arriving", r.got, r.wm)
	case <-time.After(20 * time.Millisecond): // only bounds the negative check
	}
	if err := f.Add(Event[string]{Type: Added, Object: "b1", Revision: "5"}, "b", false, nil); err != nil {
		t.Fatal(err)
	}
	r := <-popped
	equal(t, r.got, []string{"a:Added(a1)", "b:Added(b1)"})
	if r.wm != (watermark{rev: "5", inclusive: true}) {
		t.Fatalf("watermark %+v, want 5 reached", r.wm)
	}
}

// A transaction larger than a batch (or than MaxPending) is popped in parts, none of
// which reports a revision as reached: the last change taken said more follow.
func TestDeltaFIFO_TransactionLargerThanABatch(t *testing.T) {
	f := newDeltaFIFO[string, string](nil, nil, 0, false)
	f.add(deltaAdded, "x", "x1", "4")
	popAll(t, f)
	f.Add(Event[string]{Type: Added, Object: "a1", Revision: "5"}, "a", true, nil)
	f.Add(Event[string]{Type: Added, Object: "b1", Revision: "5"}, "b", true, nil)
	for _, key := range []string{"a", "b"} {
		batch, wm, _, err := f.popBatch(nil, 1, math.MaxInt)
		if err != nil || len(batch) != 1 || batch[0].key != key || wm.inclusive {
			t.Fatalf("popped %d keys, err %v, at %+v; want %s alone and no revision reached", len(batch), err, wm, key)
		}
		f.finishBatch(batch)
	}
	f.Add(Event[string]{Type: Added, Object: "c1", Revision: "5"}, "c", false, nil)
	if got, wm, _ := popAll(t, f); len(got) != 1 || wm != (watermark{rev: "5", inclusive: true}) {
		t.Fatalf("popped %q at %+v, want c and 5 reached", got, wm)
	}

	bounded := newDeltaFIFO[string, string](nil, nil, 2, false)
	bounded.Add(Event[string]{Type: Added, Object: "a1", Revision: "5"}, "a", true, nil)
	bounded.Add(Event[string]{Type: Added, Object: "b1", Revision: "5"}, "b", true, nil) // the queue is full: a pop must not wait
	if got, wm, _ := popAll(t, bounded); len(got) != 2 || wm.inclusive {
		t.Fatalf("full queue: popped %q at %+v; want a and b, no revision reached", got, wm)
	}
}

// A bookmark or a list ends a transaction the queue was told more of would follow.
func TestDeltaFIFO_TransactionEndedByBookmarkOrList(t *testing.T) {
	f := newDeltaFIFO[string, string](nil, nil, 0, false)
	f.Add(Event[string]{Type: Added, Object: "a1", Revision: "5"}, "a", true, nil)
	f.Bookmark("5")
	if got, wm, _ := popAll(t, f); len(got) != 1 || wm != (watermark{rev: "5", inclusive: true}) {
		t.Fatalf("after a bookmark: popped %q at %+v", got, wm)
	}
	f.Add(Event[string]{Type: Added, Object: "b1", Revision: "6"}, "b", true, nil)
	f.Replace([]string{"c"}, []string{"c1"}, "9")
	if got, wm, _ := popAll(t, f); len(got) != 2 || wm != (watermark{rev: "9", inclusive: true}) {
		t.Fatalf("after a list: popped %q at %+v", got, wm)
	}
}
