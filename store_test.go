package informer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
)

// While readers read, the writer makes the snapshot of each batch as it publishes it: a
// reader finds the newest state without the writer's lock, even while the writer holds it
// for its next batch (before, the reader waited for that batch).
func TestStore_ReadsTakeNoLockWhileReadersRead(t *testing.T) {
	s := newPodStore(t)
	mustUpsert(t, s, &pod{name: "a", ns: "x"})
	if s.Snapshot().Len() != 1 { // a reader reads
		t.Fatal("first snapshot")
	}
	mustUpsert(t, s, &pod{name: "b", ns: "x"}) // the writer publishes a batch
	s.mu.Lock()                                // and is busy with the next one
	got := make(chan *Snapshot[string, *pod])
	go func() { got <- s.Snapshot() }()
	select {
	case sn := <-got:
		s.mu.Unlock()
		if keys := ReadKeys(sn); !slices.Equal(keys, []string{"a", "b"}) {
			t.Fatalf("the reader got keys %q, want the newest state [a b]", keys)
		}
	case <-time.After(10 * time.Second):
		s.mu.Unlock()
		<-got
		t.Fatal("the reader waited for the writer's lock")
	}
	// With no reader since, the writer makes no snapshot: a batch costs no clone.
	mustUpsert(t, s, &pod{name: "c", ns: "x"})
	mustUpsert(t, s, &pod{name: "d", ns: "x"})
	if sn := s.snap.Load().sn; sn.Len() != 3 {
		t.Fatalf("the newest snapshot made has %d objects, want 3 (made for the reader's last read, then no more)", sn.Len())
	}
	if sn := s.Snapshot(); sn.Len() != 4 {
		t.Fatalf("a read after the writes has %d objects, want 4", sn.Len())
	}
}

// Writes in key order leave the trees' nodes half full; compact rebuilds them nearly full
// (the informer compacts once the first list is in), with the same contents, and the
// store and the snapshots taken after go on as before.
func TestStore_CompactHalvesTrees(t *testing.T) {
	const n = 20000
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = &pod{name: fmt.Sprintf("p%06d", i), ns: fmt.Sprintf("ns%d", i%10), users: fmt.Sprintf("u%d", i%3)}
	}
	load := func() *store[string, *pod] {
		s := newPodStore(t)
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range pods { // in key order
			if _, _, err := s.upsertLocked(p.name, p, storeHint[*pod]{}); err != nil {
				t.Fatal(err)
			}
		}
		s.publishLocked("1")
		return s
	}
	h0 := testkit.LiveHeap()
	s := load()
	h1 := testkit.LiveHeap()
	s.Compact()
	h2 := testkit.LiveHeap()
	loaded, compacted := float64(h1-h0)/n, float64(h2-h0)/n
	t.Logf("trees: %.1f B/object loaded in key order, %.1f compacted", loaded, compacted)
	if compacted > 0.65*loaded {
		t.Errorf("compacted trees take %.1f B/object, loaded %.1f: want at most 65 %%", compacted, loaded)
	}
	want := podState(load().Snapshot())
	sn := s.Snapshot()
	if got := podState(sn); got != want {
		t.Fatal("compact changed the contents")
	}
	// Writes go on; a snapshot taken before them does not change.
	mustUpsert(t, s, &pod{name: "p000003", ns: "moved", users: "u9"})
	mustUpsert(t, s, &pod{name: "p999999", ns: "ns1"})
	s.mu.Lock()
	s.deleteLocked("p000004")
	s.publishLocked("")
	s.mu.Unlock()
	if got := podState(sn); got != want {
		t.Fatal("a snapshot changed with writes after compact")
	}
	after := s.Snapshot()
	if objs, _ := ReadByIndex(after, "ns", "moved"); len(objs) != 1 || objs[0].name != "p000003" {
		t.Fatalf("ByIndex(ns, moved) = %v", names(objs))
	}
	if objs, _ := ReadByIndex(after, "ns", "ns3"); len(objs) != n/10-1 {
		t.Fatalf("ByIndex(ns, ns3) has %d objects, want %d", len(objs), n/10-1)
	}
	if _, ok := after.Get("p000004"); ok || after.Len() != n {
		t.Fatalf("after a delete and an add: Len %d, p000004 present %v", after.Len(), ok)
	}
}

// podState renders a pod store's state: its keys, and every bucket of its two indexes.
func podState(sn *Snapshot[string, *pod]) string {
	var b strings.Builder
	fmt.Fprint(&b, ReadKeys(sn))
	for _, index := range []string{"ns", "byUser"} {
		values, _ := ReadIndexValues(sn, index)
		for _, v := range values {
			objs, _ := ReadByIndex(sn, index, v)
			fmt.Fprint(&b, index, v, names(objs))
		}
	}
	return b.String()
}

// The bulk load of a restored state: unsorted keys, a duplicate (the last wins, its
// index entries only), an object an index function rejects (reported, left out); the
// notifications are initial adds in key order and the state is exact at the revision.
func TestStoreLoad(t *testing.T) {
	s, err := newStore[string, *pod](nil, Indexers[*pod]{
		"byUser": IndexByValues(byUser),
		"ns": IndexBy(func(p *pod) (string, error) {
			if p.ns == "bad" {
				return "", errors.New("bad namespace")
			}
			return p.ns, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := []*pod{
		{name: "c", users: "ernie", ns: "a"},
		{name: "a", users: "bert,ernie", ns: "a"},
		{name: "x", ns: "bad"},
		{name: "b", users: "bert", ns: "b"},
		{name: "a", users: "elmo", ns: "b"}, // a duplicate of a: the last wins
	}
	keys := []string{"c", "a", "x", "b", "a"}
	var reported []error
	notes := s.Load(keys, objs, "42", func(err error) { reported = append(reported, err) }, nil)
	var got []string
	for _, n := range notes {
		if n.kind != notifyAdd || !n.initial {
			t.Fatalf("notification %+v, want an initial add", n)
		}
		got = append(got, n.key+"="+n.new.users)
	}
	if want := []string{"a=elmo", "b=bert", "c=ernie"}; !slices.Equal(got, want) {
		t.Fatalf("notifications %v, want %v", got, want)
	}
	var oe *ObjectError
	if len(reported) != 1 || !errors.As(reported[0], &oe) || oe.Key != "x" {
		t.Fatalf("reported %v, want one ObjectError for x", reported)
	}
	sn := s.Snapshot()
	if sn.Revision() != "42" || !sn.exact || sn.Len() != 3 {
		t.Fatalf("snapshot at %q (exact %v) with %d objects", sn.Revision(), sn.exact, sn.Len())
	}
	for _, q := range []struct{ index, value, want string }{
		{"byUser", "ernie", "c"}, {"byUser", "bert", "b"}, {"byUser", "elmo", "a"},
		{"ns", "a", "c"}, {"ns", "b", "a,b"},
	} {
		ks, err := ReadIndexKeys(sn, q.index, q.value)
		if err != nil || !slices.Equal(ks, strings.Split(q.want, ",")) {
			t.Errorf("%s=%s: %v %v, want %s", q.index, q.value, ks, err, q.want)
		}
	}
}

// A first list that comes sorted, in pages, is written densely: its trees take about what
// compacted ones do, with the same contents, and nothing is left to compact. An unsorted
// page is written in order and leaves the store to compact.
func TestStore_FirstListPagesWrittenDensely(t *testing.T) {
	const n, page = 20000, 3000
	pods := make([]*pod, n)
	keys := make([]string, n)
	for i := range pods {
		pods[i] = &pod{name: fmt.Sprintf("p%06d", i), ns: fmt.Sprintf("ns%d", i%10), users: fmt.Sprintf("u%d", i%3)}
		keys[i] = pods[i].name
	}
	h0 := testkit.LiveHeap()
	s := newPodStore(t)
	s.Configure(func(err error) { t.Error(err) }, nil, func(string, string) {})
	var notes []notification[string, *pod]
	for from := 0; from < n; from += page {
		to := min(from+page, n)
		notes, _, _ = s.Apply(&batch[string, *pod]{items: []popped[string, *pod]{{bulk: &firstList[string, *pod]{keys: keys[from:to], objs: pods[from:to]}}}}, "", notes)
	}
	if s.loose {
		t.Fatal("a sorted first list left the store to compact")
	}
	if len(notes) != n {
		t.Fatalf("%d notifications, want %d initial adds in the list's order", len(notes), n)
	}
	for i, note := range notes {
		if note.kind != notifyAdd || !note.initial || note.key != keys[i] || note.new != pods[i] {
			t.Fatalf("notification %d: %+v; want the initial add of %s", i, note, keys[i])
		}
	}
	notes = nil
	h1 := testkit.LiveHeap()
	dense := float64(h1-h0) / n
	ref := newPodStore(t)
	ref.mu.Lock()
	for i, p := range pods {
		if _, _, err := ref.upsertLocked(keys[i], p, storeHint[*pod]{}); err != nil {
			t.Fatal(err)
		}
	}
	ref.publishLocked("1")
	ref.mu.Unlock()
	t.Logf("trees: %.1f B/object written densely by pages", dense)
	if dense > 100 {
		t.Errorf("trees written densely by pages take %.1f B/object; compacted ones about 80", dense)
	}
	h4 := testkit.LiveHeap()
	s.Compact()
	h5 := testkit.LiveHeap()
	if after := dense + float64(h5-h4)/n; after < 0.9*dense {
		t.Errorf("compacting the densely written trees saved %.0f %% (%.1f → %.1f B/object): they were not dense", 100*(1-after/dense), dense, after)
	}
	if podState(s.Snapshot()) != podState(ref.Snapshot()) {
		t.Fatal("the densely written store differs from one written in order")
	}
	// A page out of order: written in order, the store is to be compacted.
	s2 := newPodStore(t)
	s2.Apply(&batch[string, *pod]{items: []popped[string, *pod]{{bulk: &firstList[string, *pod]{keys: []string{"b", "a"}, objs: []*pod{{name: "b"}, {name: "a"}}}}}}, "", nil)
	if !s2.loose {
		t.Fatal("an unsorted page did not leave the store to compact")
	}
}
