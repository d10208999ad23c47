package controller

import (
	"context"
	"testing"
	"weak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
)

// An informer outlives the controllers that watch it: a program builds a controller for
// each term of a leader over informers that go on running (manager.AddLeader). A
// controller that stopped has taken its handler off the informer: once the program drops
// it, it is collected with its queue, and the informer's changes reach the running
// controller alone.
func TestInformerDoesNotKeepStoppedControllers(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "a"})
	inf := runInformer(t, src, informer.Options[string, *obj]{})
	first := func() weak.Pointer[Controller[string]] {
		c, calls := recording(t, Options[string]{})
		if err := For(c, inf, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Start(ctx) }()
		calls.WaitForLine(t, "a")
		cancel()
		if err := recv(t, done, "the first controller's Start to return"); err != nil {
			t.Fatal(err)
		}
		return weak.Make(c)
	}()
	second, calls := recording(t, Options[string]{})
	if err := For(second, inf, nil); err != nil {
		t.Fatal(err)
	}
	start(t, second)
	calls.WaitForLine(t, "a")
	if !testkit.Collected(first) {
		t.Fatal("the stopped controller is still reachable after the program dropped it: the informer it watched keeps it")
	}
	src.Put(&obj{Name: "b"})
	calls.WaitForLine(t, "b")
}
