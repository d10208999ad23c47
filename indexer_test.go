package informer

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

type pod struct {
	name  string
	users string
	ns    string
}

func byUser(p *pod) ([]string, error) {
	if p.users == "" {
		return nil, nil
	}
	return strings.Split(p.users, ","), nil
}

func newPodStore(t *testing.T) *store[string, *pod] {
	t.Helper()
	s, err := newStore[string, *pod](nil, Indexers[*pod]{
		"byUser": IndexByValues(byUser),
		"ns":     IndexBy(func(p *pod) (string, error) { return p.ns, nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func names(ps []*pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.name)
	}
	return out
}

func mustUpsert(t *testing.T, s *store[string, *pod], p *pod) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, _, err := s.upsertLocked(p.name, p, storeHint[*pod]{}); err != nil {
		t.Fatal(err)
	}
	s.publishLocked("")
}

// The worked "byUser" example, with the removal of empty buckets.
func TestIndexer_ByUser(t *testing.T) {
	s := newPodStore(t)
	pod1 := &pod{name: "one", users: "ernie,bert"}
	pod2 := &pod{name: "two", users: "bert,oscar"}
	pod3 := &pod{name: "tre", users: "ernie,elmo"}
	for _, p := range []*pod{pod1, pod2, pod3} {
		mustUpsert(t, s, p)
	}
	sn := s.Snapshot()
	for user, want := range map[string][]string{
		"ernie": {"one", "tre"}, "bert": {"one", "two"}, "oscar": {"two"}, "elmo": {"tre"},
	} {
		got, err := ReadByIndex(sn, "byUser", user)
		if err != nil || !slices.Equal(names(got), want) {
			t.Fatalf("ByIndex(byUser, %s) = %v, %v; want %v", user, names(got), err, want)
		}
	}
	vals, _ := ReadIndexValues(sn, "byUser")
	if !slices.Equal(vals, []string{"bert", "elmo", "ernie", "oscar"}) {
		t.Fatalf("IndexValues = %v", vals)
	}
	if got := names(ReadList(sn)); !slices.Equal(got, []string{"one", "tre", "two"}) {
		t.Fatalf("List = %v", got)
	}
	if p, ok := sn.Get("one"); !ok || p != pod1 {
		t.Fatal("Get(one)")
	}

	s.mu.Lock()
	s.deleteLocked("tre")
	s.publishLocked("")
	s.mu.Unlock()
	sn2 := s.Snapshot()
	if got, _ := ReadByIndex(sn2, "byUser", "ernie"); !slices.Equal(names(got), []string{"one"}) {
		t.Fatalf("after delete ernie = %v", names(got))
	}
	if vals, _ := ReadIndexValues(sn2, "byUser"); slices.Contains(vals, "elmo") {
		t.Fatalf("empty bucket elmo left behind: %v", vals)
	}
	// The old snapshot is unchanged (copy-on-write).
	if got, _ := ReadByIndex(sn, "byUser", "elmo"); !slices.Equal(names(got), []string{"tre"}) {
		t.Fatalf("old snapshot changed: %v", names(got))
	}
}

// An update moves the key between index values.
func TestIndexer_UpdateMovesKey(t *testing.T) {
	s := newPodStore(t)
	mustUpsert(t, s, &pod{name: "p", ns: "a", users: "x"})
	mustUpsert(t, s, &pod{name: "p", ns: "b", users: "x,y"})
	sn := s.Snapshot()
	if got, _ := ReadIndexKeys(sn, "ns", "a"); len(got) != 0 {
		t.Fatalf("ns a still has %v", got)
	}
	if got, _ := ReadIndexKeys(sn, "ns", "b"); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("ns b = %v", got)
	}
	if got, _ := ReadIndexKeys(sn, "byUser", "y"); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("byUser y = %v", got)
	}
	if vals, _ := ReadIndexValues(sn, "ns"); !slices.Equal(vals, []string{"b"}) {
		t.Fatalf("ns values %v", vals)
	}
}

// Unknown index names are errors; unknown values are empty.
func TestIndexer_QueriesAndErrors(t *testing.T) {
	s := newPodStore(t)
	mustUpsert(t, s, &pod{name: "one", users: "ernie,bert"})
	mustUpsert(t, s, &pod{name: "two", users: "bert,oscar"})
	mustUpsert(t, s, &pod{name: "tre", users: "elmo"})
	sn := s.Snapshot()
	for _, call := range []func() error{
		func() error { _, err := ReadByIndex(sn, "nope", "x"); return err },
		func() error { _, err := ReadIndexKeys(sn, "nope", "x"); return err },
		func() error { _, err := ReadIndexValues(sn, "nope"); return err },
	} {
		if err := call(); !errors.Is(err, ErrUnknownIndex) {
			t.Fatalf("want ErrUnknownIndex, got %v", err)
		}
	}
	if got, err := ReadByIndex(sn, "byUser", "nobody"); err != nil || len(got) != 0 {
		t.Fatalf("unknown value: %v %v", got, err)
	}
}

// An index is found by name, and its Values index an object as the cache does; an
// unknown name is ErrUnknownIndex naming the indexes there are.
func TestIndexer_IndexByName(t *testing.T) {
	s := newPodStore(t)
	ix, err := s.Index("byUser")
	if err != nil {
		t.Fatal(err)
	}
	if vals, err := ix.Values(&pod{users: "ernie,bert"}); err != nil || !slices.Equal(vals, []string{"ernie", "bert"}) {
		t.Errorf("byUser values %v, %v", vals, err)
	}
	ns, _ := s.Index("ns")
	if vals, err := ns.Values(&pod{ns: "a"}); err != nil || !slices.Equal(vals, []string{"a"}) {
		t.Errorf("ns values %v, %v", vals, err)
	}
	panicky := IndexBy(func(*pod) (string, error) { panic("boom") })
	if _, err := panicky.Values(&pod{}); err == nil || err.Error() != "index function panicked: boom" {
		t.Errorf("a panicking index function: %v", err)
	}
	_, err = s.Index("owner")
	if !errors.Is(err, ErrUnknownIndex) || err.Error() != `informer: no such index: "owner" (the informer's indexes: byUser, ns)` {
		t.Errorf("an unknown index: %v", err)
	}
}

// A failing or panicking index function is an error for that object;
// the store is unchanged and nothing panics.
func TestIndexer_IndexErrorSkipsObject(t *testing.T) {
	s, _ := newStore[string, *pod](nil, Indexers[*pod]{
		"ns": IndexBy(func(p *pod) (string, error) {
			switch p.ns {
			case "bad":
				return "", errors.New("no namespace")
			case "panic":
				panic("boom")
			}
			return p.ns, nil
		}),
	})
	mustUpsert(t, s, &pod{name: "p", ns: "a"})
	for _, ns := range []string{"bad", "panic"} {
		s.mu.Lock()
		_, _, err := s.upsertLocked("p", &pod{name: "p", ns: ns}, storeHint[*pod]{})
		s.mu.Unlock()
		var oe *ObjectError
		if !errors.As(err, &oe) || oe.Key != "p" {
			t.Fatalf("%s: want an ObjectError for p, got %v", ns, err)
		}
	}
	if p, _ := s.Snapshot().Get("p"); p.ns != "a" {
		t.Fatalf("store changed by a failed upsert: %+v", p)
	}
}

// AddIndexers builds the new index from existing data; a clash is an error.
func TestIndexer_AddIndexersOnData(t *testing.T) {
	s := newPodStore(t)
	mustUpsert(t, s, &pod{name: "one", ns: "a"})
	mustUpsert(t, s, &pod{name: "two", ns: "b"})
	s.mu.Lock()
	err := s.indexes.Add(Indexers[*pod]{"upper": IndexBy(func(p *pod) (string, error) { return strings.ToUpper(p.ns), nil })}, s.items, s.kit)
	clash := s.indexes.Add(Indexers[*pod]{"ns": IndexBy(func(p *pod) (string, error) { return "", nil })}, s.items, s.kit)
	s.publishLocked("")
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(clash, ErrIndexExists) {
		t.Fatalf("clash: %v", clash)
	}
	if got, _ := ReadByIndex(s.Snapshot(), "upper", "B"); !slices.Equal(names(got), []string{"two"}) {
		t.Fatalf("new index = %v", names(got))
	}
}

// Ordered iteration, ranges and prefixes.
func TestIndexer_OrderedScans(t *testing.T) {
	s := newPodStore(t)
	for _, n := range []string{"b/2", "a/1", "b/1", "c/1", "a/2"} {
		mustUpsert(t, s, &pod{name: n})
	}
	sn := s.Snapshot()
	if got := ReadKeys(sn); !slices.Equal(got, []string{"a/1", "a/2", "b/1", "b/2", "c/1"}) {
		t.Fatalf("Keys = %v", got)
	}
	var got []string
	for k := range sn.Range("a/2", "c/1") {
		got = append(got, k)
	}
	if !slices.Equal(got, []string{"a/2", "b/1", "b/2"}) {
		t.Fatalf("range = %v", got)
	}
}

// WithPrefix yields the keys that start with the prefix, in order, also where the prefix
// has no upper bound (empty, or ending in 0xff bytes), and stops when the loop does.
func TestWithPrefix(t *testing.T) {
	s := newPodStore(t)
	keys := []string{"", "a", "b/1", "b/2", "b\xff", "b\xff\xff", "b\xff\xffz", "c", "\xff", "\xffa", "\xff\xff"}
	for _, n := range keys {
		mustUpsert(t, s, &pod{name: n})
	}
	sn := s.Snapshot()
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"b/", []string{"b/1", "b/2"}},
		{"b", []string{"b/1", "b/2", "b\xff", "b\xff\xff", "b\xff\xffz"}},
		{"b\xff", []string{"b\xff", "b\xff\xff", "b\xff\xffz"}},
		{"b\xff\xff", []string{"b\xff\xff", "b\xff\xffz"}},
		{"\xff", []string{"\xff", "\xffa", "\xff\xff"}},
		{"\xff\xff", []string{"\xff\xff"}},
		{"", keys},
		{"d", nil},
	} {
		var got []string
		for k := range WithPrefix(sn, c.prefix) {
			got = append(got, k)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("WithPrefix(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
	n := 0
	for range WithPrefix(sn, "") {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("a loop that breaks got %d keys", n)
	}
}

// Snapshots are reused while nothing changes and never see later writes.
func TestIndexer_SnapshotIsolation(t *testing.T) {
	s := newPodStore(t)
	mustUpsert(t, s, &pod{name: "a"})
	s1 := s.Snapshot()
	if s.Snapshot() != s1 {
		t.Fatal("a snapshot with no write in between must be reused")
	}
	mustUpsert(t, s, &pod{name: "b"})
	if s1.Len() != 1 || s.Snapshot().Len() != 2 {
		t.Fatalf("lens %d %d", s1.Len(), s.Snapshot().Len())
	}
}

// Index reads against a plain model, across snapshots: random upserts and deletes
// with a multi-valued and a single-valued index, snapshots taken now and then and checked
// at the end, after every later write, against the model as it was when each was taken.
// An update that keeps an object's values must still show the new object (in the new
// state) and the old one (in older snapshots).
func TestIndexer_SnapshotsMatchModel(t *testing.T) {
	for seed := range uint64(20) {
		s := newPodStore(t)
		rng := rand.New(rand.NewPCG(seed, 7))
		type held struct {
			sn    *Snapshot[string, *pod]
			model map[string]*pod
		}
		model := map[string]*pod{}
		var snaps []held
		users := []string{"", "u1", "u2", "u1,u2", "u2,u3", "u3,u3"}
		for op := range 400 {
			name := fmt.Sprintf("k%02d", rng.IntN(30))
			if rng.IntN(5) == 0 {
				s.mu.Lock()
				s.deleteLocked(name)
				s.publishLocked("")
				s.mu.Unlock()
				delete(model, name)
			} else {
				p := &pod{name: name, users: users[rng.IntN(len(users))], ns: fmt.Sprintf("ns%d", rng.IntN(3))}
				mustUpsert(t, s, p)
				model[name] = p
			}
			if rng.IntN(7) == 0 || op == 399 {
				snaps = append(snaps, held{s.Snapshot(), maps.Clone(model)})
			}
		}
		for i, h := range snaps {
			checkSnapshot(t, fmt.Sprintf("seed %d snapshot %d", seed, i), h.sn, h.model)
		}
	}
}

// checkSnapshot compares every index query of sn with what model implies.
func checkSnapshot(t *testing.T, where string, sn *Snapshot[string, *pod], model map[string]*pod) {
	t.Helper()
	want := map[string]map[string][]*pod{} // index → value → objects in key order
	keys := slices.Sorted(maps.Keys(model))
	for _, k := range keys {
		p := model[k]
		us, _ := byUser(p)
		for _, v := range slices.Compact(slices.Sorted(slices.Values(us))) {
			addTo(want, "byUser", v, p)
		}
		addTo(want, "ns", p.ns, p)
	}
	for _, index := range []string{"byUser", "ns"} {
		vals, _ := ReadIndexValues(sn, index)
		if wantVals := slices.Sorted(maps.Keys(want[index])); !slices.Equal(vals, wantVals) {
			t.Fatalf("%s: IndexValues(%s) = %v, want %v", where, index, vals, wantVals)
		}
		for _, v := range append(vals, "absent") {
			got, err := ReadByIndex(sn, index, v)
			if err != nil || !slices.Equal(got, want[index][v]) {
				t.Fatalf("%s: ByIndex(%s, %s) = %v, want %v", where, index, v, names(got), names(want[index][v]))
			}
			gotKeys, _ := ReadIndexKeys(sn, index, v)
			if !slices.Equal(gotKeys, names(want[index][v])) {
				t.Fatalf("%s: IndexKeys(%s, %s) = %v", where, index, v, gotKeys)
			}
		}
	}
	if sn.Len() != len(model) {
		t.Fatalf("%s: Len = %d, want %d", where, sn.Len(), len(model))
	}
}

func addTo(m map[string]map[string][]*pod, index, value string, p *pod) {
	if m[index] == nil {
		m[index] = map[string][]*pod{}
	}
	m[index][value] = append(m[index][value], p)
}

// An index function that is not a pure function of the object (its value for
// the stored object changed, or it now fails for it) leaves no stale entry behind when the
// object is updated or deleted.
func TestIndexer_ImpureIndexFunc(t *testing.T) {
	c, _ := defaultCompare[string]()
	salt, fail := "1", false
	s, err := newStore[string, *pod](c, Indexers[*pod]{
		"one": IndexBy(func(p *pod) (string, error) {
			if fail && p.users == "old" {
				return "", errors.New("fails for the old object now")
			}
			return p.ns + salt, nil
		}),
		"many": IndexByValues(func(p *pod) ([]string, error) {
			if fail && p.users == "old" {
				panic("panics for the old object now")
			}
			return []string{p.ns + salt, "all"}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	mustUpsert(t, s, &pod{name: "a", ns: "x", users: "old"})
	mustUpsert(t, s, &pod{name: "b", ns: "x", users: "old"})
	salt = "2" // the stored objects are now under x1 but would compute x2
	mustUpsert(t, s, &pod{name: "a", ns: "x"})
	fail = true // computing the old object's values now fails
	mustUpsert(t, s, &pod{name: "b", ns: "y"})
	for _, index := range []string{"one", "many"} {
		vals, _ := ReadIndexValues(s.Snapshot(), index)
		want := []string{"x2", "y2"}
		if index == "many" {
			want = []string{"all", "x2", "y2"}
		}
		if !slices.Equal(vals, want) {
			t.Fatalf("IndexValues(%s) = %v, want %v", index, vals, want)
		}
	}
	s.mu.Lock()
	s.deleteLocked("a")
	s.deleteLocked("b")
	s.publishLocked("")
	s.mu.Unlock()
	for _, index := range []string{"one", "many"} {
		if vals, _ := ReadIndexValues(s.Snapshot(), index); len(vals) != 0 {
			t.Fatalf("after deleting everything, IndexValues(%s) = %v", index, vals)
		}
	}
}

// ByIndex yields the index's (key, object) pairs in key order and stops when the loop
// does; an unknown value yields nothing and an unknown index is an error with an iterator
// that yields nothing. A read allocates no slice.
func TestSnapshot_ByIndex(t *testing.T) {
	s := newPodStore(t)
	for _, p := range []*pod{
		{name: "c", users: "ann,bob", ns: "x"},
		{name: "a", users: "bob", ns: "x"},
		{name: "b", users: "ann", ns: "y"},
		{name: "d", users: "", ns: "x"},
	} {
		mustUpsert(t, s, p)
	}
	sn := s.Snapshot()
	for _, c := range []struct{ index, value, want string }{
		{"ns", "x", "a c d"},
		{"ns", "y", "b"},
		{"byUser", "bob", "a c"},
		{"byUser", "ann", "b c"},
		{"byUser", "nobody", ""},
		{"ns", "", ""},
	} {
		seq, err := sn.ByIndex(c.index, c.value)
		if err != nil {
			t.Fatalf("ByIndex(%s, %s): %v", c.index, c.value, err)
		}
		var got []string
		for k, p := range seq {
			if k != p.name {
				t.Fatalf("ByIndex(%s, %s) yielded key %q with object %q", c.index, c.value, k, p.name)
			}
			got = append(got, k)
		}
		slice, _ := ReadByIndex(sn, c.index, c.value)
		if strings.Join(got, " ") != c.want || !slices.Equal(got, names(slice)) {
			t.Errorf("ByIndex(%s, %s) = %q, ByIndex %q, want %q", c.index, c.value, got, names(slice), c.want)
		}
	}
	seq, _ := sn.ByIndex("ns", "x")
	n := 0
	for range seq {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("a loop that breaks got %d objects", n)
	}
	unknown, err := sn.ByIndex("nope", "x")
	if !errors.Is(err, ErrUnknownIndex) {
		t.Fatalf("unknown index: %v", err)
	}
	for k := range unknown {
		t.Fatalf("an unknown index yielded %q", k)
	}
	values, err := sn.IndexValues("nope")
	if !errors.Is(err, ErrUnknownIndex) {
		t.Fatalf("IndexValues of an unknown index: %v", err)
	}
	for v := range values {
		t.Fatalf("IndexValues of an unknown index yielded %q", v)
	}
	// A read costs a few small allocations (the iterator and the loop's closures), however
	// many objects it yields.
	for i := range 200 {
		mustUpsert(t, s, &pod{name: fmt.Sprintf("n%03d", i), ns: "x"})
	}
	sn = s.Snapshot()
	allocs := testing.AllocsPerRun(100, func() {
		seq, _ := sn.ByIndex("ns", "x")
		n := 0
		for range seq {
			n++
		}
		if n != 203 {
			t.Fatalf("yielded %d objects, want 203", n)
		}
	})
	if allocs > 3 {
		t.Fatalf("a read with ByIndexSeq of 203 objects made %.1f allocations, want at most 3", allocs)
	}
}
