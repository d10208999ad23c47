package persist_test

import (
	"context"
	"errors"
	"maps"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer/fanout"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/persist"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// item is the test object: a key, a group (indexed) and a value.
type item struct {
	Name  string `json:"name"`
	Group string `json:"group"`
	Value string `json:"value"`
}

func itemKey(it *item) string { return it.Name }

func describe(it *item) (string, string) { return it.Name, it.Value }

func newSource() *memory.Source[string, *item] {
	return memory.New(itemKey, memory.Options{})
}

// run is one life of an informer over src that persists to f: it starts it, waits for
// it to sync and to reach the source's revision, and returns its recorder, its reported
// errors and a stop function that returns once Run has returned (the final save done).
type life struct {
	inf  *informer.Informer[string, *item]
	rec  *informertest.Recorder[*item]
	errs testkit.Errors
	stop func()
}

func start(t *testing.T, src informer.ListerWatcher[*item], f informer.Persister[string, *item], mutate func(*informer.Options[string, *item])) *life {
	t.Helper()
	l := &life{rec: informertest.NewRecorder(describe)}
	opts := informer.Options[string, *item]{
		Key:     func(it *item) (string, error) { return it.Name, nil },
		Persist: f,
		Indexers: informer.Indexers[*item]{
			"group": informer.IndexBy(func(it *item) (string, error) { return it.Group, nil }),
		},
		Backoff:      informer.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
		ErrorHandler: l.errs.Report,
	}
	if mutate != nil {
		mutate(&opts)
	}
	inf, err := informer.New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	l.inf = inf
	if _, err := inf.AddHandler(l.rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	var once sync.Once
	l.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(l.stop)
	wctx, wcancel := context.WithTimeout(context.Background(), informertest.DefaultTimeout)
	defer wcancel()
	if informer.WaitForCacheSync(wctx, inf) != nil {
		t.Fatal("informer did not sync")
	}
	return l
}

// catchUp waits until the informer's cache reflects the source's current revision.
func catchUp(t *testing.T, l *life, src *memory.Source[string, *item]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), informertest.DefaultTimeout)
	defer cancel()
	if err := l.inf.WaitForRevision(ctx, strconv.FormatInt(src.Revision(), 10)); err != nil {
		t.Fatalf("WaitForRevision(%d): %v", src.Revision(), err)
	}
}

func newFile(t *testing.T, dir string) *persist.File[string, *item] {
	t.Helper()
	f, err := persist.New[string, *item](dir, persist.Options[*item]{Schema: "v1", Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func listCount(src *memory.Source[string, *item]) int {
	n := 0
	for _, r := range src.Requests() {
		if r.Op == memory.OpList {
			n++
		}
	}
	return n
}

// firstLife persists a, b, c at the source's revision and stops.
func firstLife(t *testing.T, src *memory.Source[string, *item], f *persist.File[string, *item]) {
	t.Helper()
	src.Put(&item{Name: "a", Group: "g1", Value: "1"})
	src.Put(&item{Name: "b", Group: "g1", Value: "1"})
	src.Put(&item{Name: "c", Group: "g2", Value: "1"})
	l := start(t, src, f, nil)
	l.rec.Expect(t, "add*a=1", "add*b=1", "add*c=1")
	catchUp(t, l, src)
	l.stop()
	if errs := l.errs.All(); len(errs) != 0 {
		t.Fatalf("first life reported %v", errs)
	}
}

// While the process is down: b changes, c goes, d comes.
func changeWhileDown(src *memory.Source[string, *item]) {
	src.Put(&item{Name: "b", Group: "g2", Value: "2"})
	src.Delete("c")
	src.Put(&item{Name: "d", Group: "g1", Value: "1"})
}

func checkCache(t *testing.T, l *life) {
	t.Helper()
	var got []string
	for k, v := range l.inf.All() {
		got = append(got, k+"="+v.Value+"/"+v.Group)
	}
	if want := []string{"a=1/g1", "b=2/g2", "d=1/g1"}; !slices.Equal(got, want) {
		t.Fatalf("cache %v, want %v", got, want)
	}
	g1, err := l.inf.ByIndex("group", "g1")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range g1 {
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"a", "d"}) {
		t.Fatalf("group g1: %v %v, want [a d]", keys, err)
	}
}

// A restart with the revision still valid: the cache is restored as initial adds, the
// watch resumes from the saved revision without a list, and handlers hear exactly what
// changed while the process was down.
func TestWarmRestartMemory(t *testing.T) {
	src := newSource()
	f := newFile(t, t.TempDir())
	firstLife(t, src, f)
	listsBefore := listCount(src)
	changeWhileDown(src)

	l := start(t, src, f, nil)
	if !l.inf.Stats().Restored {
		t.Fatal("Restored is false after a warm start")
	}
	l.rec.Expect(t, "add*a=1", "add*b=1", "add*c=1", "update b=1→2", "delete c=1", "add d=1")
	catchUp(t, l, src)
	checkCache(t, l)
	if n := listCount(src) - listsBefore; n != 0 {
		t.Fatalf("the warm start listed %d times", n)
	}
	if st := l.inf.Stats(); st.Lists != 0 || st.Relists != 0 {
		t.Fatalf("Stats: %d lists, %d relists; want none", st.Lists, st.Relists)
	}
	// A barrier: the next call is the next change, nothing else came in between.
	src.Put(&item{Name: "e", Group: "g1", Value: "1"})
	l.rec.Expect(t, "add*a=1", "add*b=1", "add*c=1", "update b=1→2", "delete c=1", "add d=1", "add e=1")
	l.stop()
	if errs := l.errs.All(); len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}

	// The second life saved its final state: a third start restores it.
	l3 := start(t, src, f, nil)
	l3.rec.Expect(t, "add*a=1", "add*b=2", "add*d=1", "add*e=1")
	if got := l3.inf.Snapshot().Revision(); got != strconv.FormatInt(src.Revision(), 10) {
		t.Fatalf("restored revision %s, want %d", got, src.Revision())
	}
}

// A restart after the source compacted the saved revision away: the informer relists and
// delivers only the differences, never a second round of initial adds.
func TestWarmRestartAfterCompaction(t *testing.T) {
	src, l := restartCompacted(t, nil)
	// a is unchanged: a resync, which no handler asked for. b changed, d is new, c is gone.
	l.rec.Expect(t, "add*a=1", "add*b=1", "add*c=1", "update b=1→2", "add d=1", "delete?c=1")
	catchUp(t, l, src)
	checkCache(t, l)
	if l.inf.Stats().Restored {
		t.Fatal("Restored is still true after a relist")
	}
	src.Put(&item{Name: "e", Group: "g1", Value: "1"})
	l.rec.ExpectNext(t, "add e=1")
	st := l.inf.Stats()
	if st.Lists != 1 || st.Expirations == 0 {
		t.Fatalf("Stats: %d lists, %d expirations; want 1 list after an expiry", st.Lists, st.Expirations)
	}
}

// With Options.Revision set, it decides what changed on the relist after an expiry.
func TestWarmRestartAfterCompactionWithRevision(t *testing.T) {
	// The value is the object's revision here: a relisted a with value 1 is unchanged.
	_, l := restartCompacted(t, func(o *informer.Options[string, *item]) {
		o.Revision = func(it *item) string { return it.Value }
	})
	l.rec.Expect(t, "add*a=1", "add*b=1", "add*c=1", "update b=1→2", "add d=1", "delete?c=1")
	checkCache(t, l)
}

// restartCompacted runs a first life, changes the source while the informer is down,
// compacts the source's history past the saved revision and starts the informer again
// (start's, with mutate).
func restartCompacted(t *testing.T, mutate func(*informer.Options[string, *item])) (*memory.Source[string, *item], *life) {
	t.Helper()
	src := newSource()
	f := newFile(t, t.TempDir())
	firstLife(t, src, f)
	changeWhileDown(src)
	src.Compact(src.Revision())
	return src, start(t, src, f, mutate)
}

// A damaged snapshot is refused with a reported reason and the informer starts cold.
func TestWarmRestartRefusesCorrupt(t *testing.T) {
	src := newSource()
	dir := t.TempDir()
	f := newFile(t, dir)
	firstLife(t, src, f)
	path := f.Path(informer.PersistedCache{Informer: "informer"})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x55
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	changeWhileDown(src)
	l := start(t, src, f, nil)
	l.rec.Expect(t, "add*a=1", "add*b=2", "add*d=1") // a cold start: the list
	if l.inf.Stats().Restored {
		t.Fatal("Restored after a refused snapshot")
	}
	if errs := l.errs.Matching(persist.ErrCorrupt); len(errs) != 1 {
		t.Fatalf("want one ErrCorrupt reported, got %v", l.errs.All())
	}
}

// A snapshot written by another configuration is refused and the informer starts cold.
func TestWarmRestartRefusesIncompatible(t *testing.T) {
	cases := []struct {
		name   string
		opts   persist.Options[*item]
		mutate func(*informer.Options[string, *item])
	}{
		{name: "schema", opts: persist.Options[*item]{Schema: "v2", Interval: -1}},
		{name: "codec", opts: persist.Options[*item]{Schema: "v1", Interval: -1, Codec: persist.CodecFuncs[*item]{
			CodecName:  "json-v2",
			EncodeFunc: persist.JSON[*item]().Encode,
			DecodeFunc: persist.JSON[*item]().Decode,
		}}},
		{name: "indexes", opts: persist.Options[*item]{Schema: "v1", Interval: -1}, mutate: func(o *informer.Options[string, *item]) {
			o.Indexers["value"] = informer.IndexBy(func(it *item) (string, error) { return it.Value, nil })
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource()
			dir := t.TempDir()
			firstLife(t, src, newFile(t, dir))
			changeWhileDown(src)
			f2, err := persist.New[string, *item](dir, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			l := start(t, src, f2, tc.mutate)
			l.rec.Expect(t, "add*a=1", "add*b=2", "add*d=1")
			if errs := l.errs.Matching(persist.ErrIncompatible); len(errs) != 1 {
				t.Fatalf("want one ErrIncompatible reported, got %v", l.errs.All())
			}
		})
	}
}

// The informer saves every Interval, only states that are exactly one revision.
func TestPeriodicSave(t *testing.T) {
	src := newSource()
	dir := t.TempDir()
	f, err := persist.New[string, *item](dir, persist.Options[*item]{Schema: "v1", Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src.Put(&item{Name: "a", Value: "1"})
	l := start(t, src, f, nil)
	l.rec.Expect(t, "add*a=1")
	src.Put(&item{Name: "b", Value: "1"})
	want := strconv.FormatInt(src.Revision(), 10)
	id, _ := src.SourceID(context.Background())
	desc := informer.PersistedCache{Informer: "informer", Type: "*github.com/informer-go/informer/persist_test.item", Source: id, Indexes: []string{"group"}}
	informertest.Eventually(t, informertest.DefaultTimeout, func() bool {
		var n int
		rev, err := f.Load(context.Background(), desc, func(*item) { n++ })
		return err == nil && rev == want && n == 2
	}, "no snapshot of revision %s with 2 objects", want)
}

// resetSource is a source that claims the identity of another: the same collection, reset
// to an older state (restored from a backup, say).
type resetSource struct {
	*memory.Source[string, *item]
	id string
}

func (r resetSource) SourceID(context.Context) (string, error) { return r.id, nil }

// A snapshot whose revision the source of the same identity has never reached (the source
// was reset): the source says the revision expired, and the relist delivers the
// differences. (Another source is refused by its identity: identity_test.go.)
func TestWarmRestartSourceReset(t *testing.T) {
	f := newFile(t, t.TempDir())
	old := newSource()
	firstLife(t, old, f)
	id, _ := old.SourceID(context.Background())
	src := newSource() // reset: at revision 2 where the snapshot is at 3
	src.Put(&item{Name: "a", Group: "g1", Value: "1"})
	src.Put(&item{Name: "e", Group: "g1", Value: "1"})
	l := start(t, resetSource{src, id}, f, nil)
	l.rec.Expect(t, "add*a=1", "add*b=1", "add*c=1", "add e=1", "delete?b=1", "delete?c=1")
	catchUp(t, l, src)
	if got := cacheKeys(l.inf); !slices.Equal(got, []string{"a", "e"}) {
		t.Fatalf("cache keys %v", got)
	}
}

// checkingFile is a File whose Save checks that the state it is given is exactly the
// source's state at the state's revision, by the history the test recorded.
type checkingFile struct {
	*persist.File[string, *item]
	t       *testing.T
	mu      sync.Mutex
	history map[int64]map[string]string // revision → the state at it (key → value)
	saves   int
}

func (c *checkingFile) Save(ctx context.Context, desc informer.PersistedCache, state *informer.Snapshot[string, *item]) error {
	rev, err := strconv.ParseInt(state.Revision(), 10, 64)
	if err != nil {
		c.t.Errorf("saved revision %q: %v", state.Revision(), err)
	}
	c.mu.Lock()
	want, ok := c.history[rev]
	c.saves++
	c.mu.Unlock()
	if !ok {
		c.t.Errorf("saved revision %d is not one the test wrote", rev)
	}
	got := map[string]string{}
	for k, v := range state.All() {
		got[k] = v.Value
	}
	if len(got) != len(want) {
		c.t.Errorf("saved state at revision %d has %d objects, the source had %d", rev, len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			c.t.Errorf("saved state at revision %d: %s=%q, the source had %q", rev, k, got[k], v)
		}
	}
	return c.File.Save(ctx, desc, state)
}

// Under a stream of writes, every state the informer saves is exactly the source's state
// at the state's revision: never a state with changes of a later revision, or without
// some of an earlier one.
func TestSavedStateIsOneRevision(t *testing.T) {
	src := newSource()
	f, err := persist.New[string, *item](t.TempDir(), persist.Options[*item]{Schema: "v1", Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cf := &checkingFile{File: f, t: t, history: map[int64]map[string]string{0: {}}}
	state := map[string]string{}
	// change records the state the next revision will have, then makes it: a save may
	// come as soon as the source has it.
	change := func(k, v string) {
		if v == "" {
			delete(state, k)
		} else {
			state[k] = v
		}
		cf.mu.Lock()
		cf.history[src.Revision()+1] = maps.Clone(state)
		cf.mu.Unlock()
		if v == "" {
			src.Delete(k)
		} else {
			src.Put(&item{Name: k, Value: v})
		}
	}
	l := start(t, src, cf, func(o *informer.Options[string, *item]) { o.MaxBatch = 3 })
	const writes = 3000
	for i := range writes {
		k := "k" + strconv.Itoa(i*7919%50)
		if _, ok := state[k]; ok && i%5 == 4 {
			change(k, "")
		} else {
			change(k, strconv.Itoa(i))
		}
		if i%100 == 99 { // let a save happen while the writes go on
			cf.mu.Lock()
			before := cf.saves
			cf.mu.Unlock()
			informertest.Eventually(t, informertest.DefaultTimeout, func() bool {
				change("tick", strconv.Itoa(i)) // keeps the queue busy
				cf.mu.Lock()
				defer cf.mu.Unlock()
				return cf.saves > before
			}, "no save after write %d", i)
		}
	}
	catchUp(t, l, src)
	l.stop()
	cf.mu.Lock()
	defer cf.mu.Unlock()
	if cf.saves < 2 {
		t.Fatalf("%d saves; want periodic saves and the final one", cf.saves)
	}
	t.Logf("%d saves checked", cf.saves)
}

// An index function that fails for a restored object: the object is reported and left
// out of the restored cache, like a listed one; a later change of it is an add.
func TestRestoreIndexError(t *testing.T) {
	src := newSource()
	f := newFile(t, t.TempDir())
	firstLife(t, src, f)
	changeWhileDown(src)
	l := start(t, src, f, func(o *informer.Options[string, *item]) {
		o.Indexers["group"] = informer.IndexBy(func(it *item) (string, error) {
			if it.Name == "b" && it.Value == "1" {
				return "", errors.New("b=1 has no group")
			}
			return it.Group, nil
		})
	})
	l.rec.Expect(t, "add*a=1", "add*c=1", "add b=2", "delete c=1", "add d=1")
	catchUp(t, l, src)
	checkCache(t, l)
	var oe *informer.ObjectError
	if errs := l.errs.All(); len(errs) != 1 || !errors.As(errs[0], &oe) || oe.Key != "b" {
		t.Fatalf("errors %v, want one ObjectError for b", errs)
	}
	if st := l.inf.Stats(); st.IndexErrors != 1 {
		t.Fatalf("Stats.IndexErrors %d, want 1", st.IndexErrors)
	}
}

// The same over source/http (Handler and Client on loopback): a resumed watch, and after
// a compaction (410 Gone) a relist with differences only.
func TestWarmRestartHTTP(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(map[bool]string{false: "resumed", true: "compacted"}[compact], func(t *testing.T) {
			src := newSource()
			srv := httptest.NewServer(fanout.NewPassThrough[*item](src, fanout.PassThroughOptions[*item]{}))
			t.Cleanup(srv.Close)
			client, err := httpsource.NewClient[*item](srv.URL, httpsource.ClientOptions[*item]{})
			if err != nil {
				t.Fatal(err)
			}
			f := newFile(t, t.TempDir())
			src.Put(&item{Name: "a", Group: "g1", Value: "1"})
			src.Put(&item{Name: "b", Group: "g1", Value: "1"})
			src.Put(&item{Name: "c", Group: "g2", Value: "1"})
			l := start(t, client, f, nil)
			l.rec.Expect(t, "add*a=1", "add*b=1", "add*c=1")
			l.stop()
			changeWhileDown(src)
			want := []string{"add*a=1", "add*b=1", "add*c=1", "update b=1→2", "delete c=1", "add d=1"}
			if compact {
				src.Compact(src.Revision())
				want = []string{"add*a=1", "add*b=1", "add*c=1", "update b=1→2", "add d=1", "delete?c=1"}
			}
			l = start(t, client, f, nil)
			l.rec.Expect(t, want...)
			src.Put(&item{Name: "e", Group: "g1", Value: "1"}) // a barrier
			l.rec.Expect(t, append(want, "add e=1")...)
			checkCacheWith(t, l, "e=1/g1")
			if st := l.inf.Stats(); (st.Lists == 0) == compact {
				t.Fatalf("%d lists after a warm start (compacted: %v)", st.Lists, compact)
			}
		})
	}
}

func checkCacheWith(t *testing.T, l *life, extra string) {
	t.Helper()
	var got []string
	for k, v := range l.inf.All() {
		got = append(got, k+"="+v.Value+"/"+v.Group)
	}
	if want := []string{"a=1/g1", "b=2/g2", "d=1/g1", extra}; !slices.Equal(got, want) {
		t.Fatalf("cache %v, want %v", got, want)
	}
}
