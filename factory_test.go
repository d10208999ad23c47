package informer_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// Factory: one informer per id, Start idempotent, late registrations run at the next
// Start, WaitForCacheSync over the started informers, Shutdown waits.
func TestFactory_SharedInformers(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	f := informer.NewFactory()
	defer f.Shutdown()
	builds := 0
	build := func() (*informer.Informer[string, *obj], error) {
		builds++
		return informer.New[string, *obj](src, informer.Options[string, *obj]{Key: func(o *obj) (string, error) { return o.Key, nil }})
	}
	i1, err := informer.InformerFor(f, "objs", build)
	i2, _ := informer.InformerFor(f, "objs", build)
	if err != nil || i1 != i2 || builds != 1 {
		t.Fatalf("same id must share one informer (builds=%d, err=%v)", builds, err)
	}
	if _, err := informer.InformerFor(f, "objs", func() (*informer.Informer[int, *obj], error) { return nil, nil }); err == nil {
		t.Fatal("same id with other type parameters must be an error")
	}
	ctx := context.Background()
	f.Start(ctx)
	f.Start(ctx) // Idempotent
	late, _ := informer.InformerFor(f, "late", func() (*informer.Informer[string, *obj], error) {
		return informer.New[string, *obj](src, informer.Options[string, *obj]{Key: objKeyErr, Name: "late"})
	})
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := f.WaitForCacheSync(sctx); err != nil || !i1.Stats().Synced {
		t.Fatalf("started informers synced: %v", err)
	}
	if late.Stats().Synced {
		t.Fatal("an informer registered after Start must not run before the next Start")
	}
	// The package function over an informer that cannot sync (not started) names it.
	done, stop := context.WithCancel(ctx)
	stop()
	err = informer.WaitForCacheSync(done, i1, late)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `not synced: "late": context canceled`) {
		t.Fatalf("WaitForCacheSync over a synced and an unstarted informer: %v", err)
	}
	f.Start(ctx)
	if err := f.WaitForCacheSync(sctx); err != nil || !late.Stats().Synced {
		t.Fatalf("after second Start: %v", err)
	}
	f.Shutdown()
	if _, err := informer.InformerFor(f, "x", build); !errors.Is(err, informer.ErrFactoryShutdown) {
		t.Fatalf("after Shutdown: %v", err)
	}
}

// Shutdown returns the first error a Run returned: here, the factory's Run of an informer
// the program had already run by hand.
func TestFactory_ShutdownReturnsRunError(t *testing.T) {
	src := newSource(memory.Options{})
	f := informer.NewFactory()
	inf, err := informer.InformerFor(f, "objs", func() (*informer.Informer[string, *obj], error) {
		return informer.New[string, *obj](src, informer.Options[string, *obj]{Key: objKeyErr})
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := runStoppable(t, inf)
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx)
	err = f.Shutdown()
	if !errors.Is(err, informer.ErrAlreadyStarted) || !strings.Contains(err.Error(), `"objs"`) {
		t.Fatalf("Shutdown = %v, want ErrAlreadyStarted naming objs", err)
	}
	stop()
}

// WaitForCacheSync over an informer nobody runs returns within a second or so
// (NeverStartedAfter), naming it and saying what to do, instead of waiting for its
// context; an informer that runs is waited for as before.
func TestWaitForCacheSync_NeverStartedSaidWithinASecond(t *testing.T) {
	idle, err := informer.New[string, *obj](newSource(memory.Options{}), informer.Options[string, *obj]{Name: "idle", Key: objKeyErr})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := startWith(t, informer.Options[string, *obj]{Name: "running"}, newObj("a", "", "1"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	err = informer.WaitForCacheSync(ctx, f.inf, idle)
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("returned after %v, want about %v", took, informer.NeverStartedAfter)
	}
	if want := `informer: never started: "idle": add it to the manager, or call its Run (or Factory.Start)`; err == nil || err.Error() != want {
		t.Fatalf("WaitForCacheSync: %v, want %q", err, want)
	}
	if st := idle.Stats(); st.Started {
		t.Errorf("Stats.Started of an informer never run: true")
	}
	if st := f.inf.Stats(); !st.Started {
		t.Errorf("Stats.Started of a running informer: false")
	}
}

// A factory that outlives its informers does not keep them: once Shutdown has stopped
// them, an informer the factory made is collected when the program drops it, though the
// program keeps the factory, the source and the context it gave Start; and an informer
// the factory made is collected with a factory that was shut down and dropped.
func TestFactory_ShutDownFactoryKeepsNoInformer(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	ctx, cancel := context.WithCancel(context.Background()) // outlives the informers
	defer cancel()
	build := func() (*informer.Informer[string, *obj], error) {
		return informer.New[string, *obj](src, informer.Options[string, *obj]{Key: objKeyErr})
	}
	shutDown := func(f *informer.Factory) weak.Pointer[informer.Informer[string, *obj]] {
		inf, err := informer.InformerFor(f, "objs", build)
		if err != nil {
			t.Fatal(err)
		}
		f.Start(ctx)
		if err := f.WaitForCacheSync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := f.Shutdown(); err != nil {
			t.Fatal(err)
		}
		return weak.Make(inf)
	}

	kept := informer.NewFactory()
	if made := shutDown(kept); !testkit.Collected(made) {
		t.Fatal("an informer of a factory that was shut down is still reachable after the program dropped it: the factory keeps it")
	}
	if err := kept.WaitForCacheSync(ctx); !errors.Is(err, informer.ErrFactoryShutdown) {
		t.Fatalf("WaitForCacheSync of a factory shut down = %v, want ErrFactoryShutdown", err)
	}
	if made := shutDown(informer.NewFactory()); !testkit.Collected(made) {
		t.Fatal("an informer of a factory shut down and dropped is still reachable: the context given to Start or the source keeps it")
	}
	runtime.KeepAlive(kept)
}
