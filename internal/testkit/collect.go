package testkit

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"
)

// Collected reports whether the value w points to has been freed, running up to 1,000
// full collections until it has, and letting other goroutines run before each: one
// collection frees a value nothing reaches; the others allow for a holder on its way out
// (an informer over etcd was freed up to 0.65 s after its Run returned, under -race). It
// does not sleep; a value still held after them is held for good, which costs a few
// seconds to say.
func Collected[T any](w weak.Pointer[T]) bool {
	for range 1000 {
		if w.Value() == nil {
			return true
		}
		runtime.Gosched()
		runtime.GC()
	}
	return w.Value() == nil
}

// Syncer is what reports its first sync: an informer, or a handler's registration.
type Syncer interface {
	// Synced returns a channel closed once synced.
	Synced() <-chan struct{}
}

// SyncThenStop runs r as a program runs an informer: it starts Run, waits up to WaitLimit
// for the first sync of r and of each of also (a handler's registration: its handler has
// had the list), failing t with "no sync" without it, then cancels Run's context and
// waits for Run to return, failing t if it returned an error. It keeps no reference to r
// once it returns, so that a test can then drop r and check that nothing else holds it.
func SyncThenStop(t testing.TB, r interface {
	Run(context.Context) error
	Syncer
}, also ...Syncer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	limit := time.NewTimer(WaitLimit)
	defer limit.Stop()
	for _, s := range append([]Syncer{r}, also...) {
		select {
		case <-s.Synced():
		case err := <-done:
			cancel()
			t.Fatalf("Run returned before the first sync: %v", err)
		case <-limit.C:
			cancel()
			<-done
			t.Fatal("no sync")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
