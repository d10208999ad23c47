package persist_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/memory"
)

type host struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

type user struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

// runPersisted runs an informer of the default name over src, persisting to dir, until it
// synced; stop returns once Run returned (the final save done). errs returns what it
// reported.
func runPersisted[V any](t *testing.T, src informer.ListerWatcher[V], dir string, key func(V) string) (inf *informer.Informer[string, V], errs func() []error, stop func()) {
	t.Helper()
	f, err := persist.New[string, V](dir, persist.Options[V]{Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []error
	inf, err = informer.New(src, informer.Options[string, V]{
		Key:     func(v V) (string, error) { return key(v), nil },
		Persist: f,
		ErrorHandler: func(err error) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	wctx, wcancel := context.WithTimeout(ctx, informertest.DefaultTimeout)
	defer wcancel()
	if informer.WaitForCacheSync(wctx, inf) != nil {
		t.Fatal("informer did not sync")
	}
	errs = func() []error {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reported)
	}
	return inf, errs, stop
}

func cacheKeys[V any](inf *informer.Informer[string, V]) []string {
	var keys []string
	for k := range inf.All() {
		keys = append(keys, k)
	}
	return keys
}

// Two informers of the default name share a state directory: a *host informer does not
// restore the *user informer's snapshot; it says why, naming both types, and lists.
func TestWarmRestartRefusesOtherType(t *testing.T) {
	dir := t.TempDir()
	users := memory.New(func(u *user) string { return u.Name }, memory.Options{})
	users.Put(&user{Name: "alice", Email: "alice@example.com"})
	_, errs, stop := runPersisted(t, users, dir, func(u *user) string { return u.Name })
	stop()
	if e := errs(); len(e) != 0 {
		t.Fatalf("the user informer reported %v", e)
	}

	hosts := memory.New(func(h *host) string { return h.Name }, memory.Options{})
	hosts.Put(&host{Name: "web1", Addr: "10.0.0.1"})
	inf, errs, _ := runPersisted(t, hosts, dir, func(h *host) string { return h.Name })
	if got := cacheKeys(inf); !slices.Equal(got, []string{"web1"}) || inf.Stats().Restored {
		t.Fatalf("host informer: cache %v, restored %v; want [web1] listed", got, inf.Stats().Restored)
	}
	e := errs()
	if len(e) != 1 || !errors.Is(e[0], persist.ErrIncompatible) ||
		!strings.Contains(e[0].Error(), "persist_test.user") || !strings.Contains(e[0].Error(), "persist_test.host") {
		t.Fatalf("reported %v, want one ErrIncompatible naming both types", e)
	}
}

// A snapshot saved from one source is not restored over another: a new memory.Source
// whose revisions have passed the saved one would otherwise resume the watch and keep the
// first source's objects.
func TestWarmRestartRefusesOtherSource(t *testing.T) {
	dir := t.TempDir()
	key := func(h *host) string { return h.Name }
	a := memory.New(key, memory.Options{})
	a.Put(&host{Name: "old1", Addr: "a"})
	a.Put(&host{Name: "old2", Addr: "a"})
	_, errs, stop := runPersisted(t, a, dir, key)
	stop()
	if e := errs(); len(e) != 0 {
		t.Fatalf("first life reported %v", e)
	}

	b := memory.New(key, memory.Options{})
	for _, name := range []string{"new1", "new2", "new3", "new4"} {
		b.Put(&host{Name: name, Addr: "b"})
	}
	inf, errs, _ := runPersisted(t, b, dir, key)
	if got := cacheKeys(inf); !slices.Equal(got, []string{"new1", "new2", "new3", "new4"}) || inf.Stats().Restored {
		t.Fatalf("cache %v, restored %v; want b's state, listed", got, inf.Stats().Restored)
	}
	if e := errs(); len(e) != 1 || !errors.Is(e[0], persist.ErrIncompatible) || !strings.Contains(e[0].Error(), "source") {
		t.Fatalf("reported %v, want one ErrIncompatible about the source", e)
	}
}

// SavedSource reads the source identity a snapshot was saved with, without loading it;
// no snapshot is ErrNoPersistedState.
func TestSavedSource(t *testing.T) {
	dir := t.TempDir()
	key := func(h *host) string { return h.Name }
	a := memory.New(key, memory.Options{})
	a.Put(&host{Name: "h", Addr: "a"})
	id, err := a.SourceID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f, err := persist.New[string, *host](dir, persist.Options[*host]{Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	desc := informer.PersistedCache{Informer: "informer"}
	if _, err := f.SavedSource(context.Background(), desc); !errors.Is(err, informer.ErrNoPersistedState) {
		t.Fatalf("SavedSource with no snapshot: %v, want ErrNoPersistedState", err)
	}
	_, _, stop := runPersisted(t, a, dir, key)
	stop()
	if got, err := f.SavedSource(context.Background(), desc); err != nil || got != id {
		t.Fatalf("SavedSource = %q, %v; want %q", got, err, id)
	}
}
