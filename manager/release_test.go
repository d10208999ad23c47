package manager_test

import (
	"context"
	"runtime"
	"testing"
	"weak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/memory"
)

// A manager that stopped does not keep what it ran: an informer added to it, and one of a
// factory added to it, are collected once Start has returned and the program drops them,
// though the program keeps the manager (its Handler mounted on a server of its own, say)
// and the source; and a manager dropped after its stop keeps nothing either.
func TestStoppedManagerKeepsNoInformer(t *testing.T) {
	src := memory.New(thingKey, memory.Options{})
	src.Put(&thing{Name: "a"})
	ran := func(m *manager.Manager) (added, ofFactory weak.Pointer[informer.Informer[string, *thing]]) {
		inf := newInformer(t, "added", src)
		if err := m.AddInformer(inf); err != nil {
			t.Fatal(err)
		}
		f := informer.NewFactory()
		shared, err := informer.InformerFor(f, "shared", func() (*informer.Informer[string, *thing], error) {
			return newInformer(t, "shared", src), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.AddFactory(f); err != nil {
			t.Fatal(err)
		}
		running := make(chan struct{})
		m.Add("runnable", manager.RunnableFunc(func(ctx context.Context) error { close(running); <-ctx.Done(); return nil }))
		s := start(t, m)
		recv(t, running, "the runnable to start, after the caches synced")
		if err := s.stop(t); err != nil {
			t.Fatal(err)
		}
		return weak.Make(inf), weak.Make(shared)
	}

	kept := newManager(t, manager.Options{Logger: discard()})
	added, ofFactory := ran(kept)
	if !testkit.Collected(added) {
		t.Fatal("an informer added to a manager that stopped is still reachable after the program dropped it: the manager keeps it")
	}
	if !testkit.Collected(ofFactory) {
		t.Fatal("an informer of a factory added to a manager that stopped is still reachable after the program dropped it: the manager keeps it")
	}
	if code, body := probe(kept.Handler(), "/readyz"); code != 503 {
		t.Fatalf("/readyz of a stopped manager: %d %s", code, body)
	}
	runtime.KeepAlive(kept)

	added, ofFactory = ran(newManager(t, manager.Options{Logger: discard()}))
	if !testkit.Collected(added) || !testkit.Collected(ofFactory) {
		t.Fatal("an informer of a manager that stopped and was dropped is still reachable")
	}
}
