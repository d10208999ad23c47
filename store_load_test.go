package informer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

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
