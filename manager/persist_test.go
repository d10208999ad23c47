package manager_test

import (
	"context"
	"slices"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/memory"
)

// A manager's stop saves each informer's warm-restart snapshot, and the next manager's
// informer over the same source starts from it: restored, with no list.
func TestStopSavesSnapshotsForTheNextStart(t *testing.T) {
	src := memory.New(thingKey, memory.Options{})
	src.Put(&thing{Name: "a", Value: "1"})
	src.Put(&thing{Name: "b", Value: "2"})
	dir := t.TempDir()

	run := func() *informer.Informer[string, *thing] {
		f, err := persist.New[string, *thing](dir, persist.Options[*thing]{Schema: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		inf, err := informer.New[string, *thing](src, informer.Options[string, *thing]{
			Name: "things", Key: func(o *thing) (string, error) { return o.Name, nil },
			Persist: f, Logger: discard(),
		})
		if err != nil {
			t.Fatal(err)
		}
		m := manager.New(manager.Options{Logger: discard()})
		if err := m.AddInformer(inf); err != nil {
			t.Fatal(err)
		}
		synced := make(chan struct{})
		m.Add("synced", manager.RunnableFunc(func(ctx context.Context) error {
			close(synced)
			<-ctx.Done()
			return nil
		}))
		s := start(t, m)
		recv(t, synced, "the runnables to start after the caches synced")
		if err := s.stop(t); err != nil {
			t.Fatalf("Start: %v", err)
		}
		return inf
	}

	first := run()
	if first.Stats().Restored || first.Stats().Lists != 1 {
		t.Fatalf("first start: restored %v, lists %d; want a cold start with one list", first.Stats().Restored, first.Stats().Lists)
	}
	second := run()
	if !second.Stats().Restored || second.Stats().Lists != 0 {
		t.Fatalf("second start: restored %v, lists %d; want the snapshot saved at the first stop, and no list", second.Stats().Restored, second.Stats().Lists)
	}
	var got []string
	for k, v := range second.All() {
		got = append(got, k+"="+v.Value)
	}
	if want := []string{"a=1", "b=2"}; !slices.Equal(got, want) {
		t.Fatalf("restored cache %q, want %q", got, want)
	}
}
