package informertest

import (
	"context"
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

// Runner is what Run starts: an *informer.Informer, or anything else whose Run blocks
// until its context ends.
type Runner interface {
	// Run blocks until ctx ends, then returns nil or why it stopped early.
	Run(ctx context.Context) error
}

// Run starts r.Run in a goroutine for the length of the test and returns the context it
// runs under. At the test's cleanup it calls each release function first (to let go of
// handlers the test holds up, which Run would otherwise wait for), then cancels the
// context, waits for Run to return and fails the test if Run returned an error (naming
// r if it has a Name method). It does
// not wait for a sync: follow with informer.WaitForCacheSync, or use RunSynced.
//
// Run costs one goroutine, which has ended when the test's cleanup returns.
func Run(t testing.TB, r Runner, release ...func()) context.Context {
	t.Helper()
	return testkit.Run(t, r, release...)
}

// SyncRunner is a Runner that reports its first sync, as *informer.Informer does.
type SyncRunner interface {
	Runner
	// Synced is closed once the first sync is done.
	Synced() <-chan struct{}
}

// RunSynced is Run that also waits, up to DefaultTimeout, for r's first sync, and fails
// the test with "no sync" if it does not come.
func RunSynced(t testing.TB, r SyncRunner, release ...func()) context.Context {
	t.Helper()
	ctx := Run(t, r, release...)
	wctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	select {
	case <-r.Synced():
	case <-wctx.Done():
		t.Fatal("no sync")
	}
	return ctx
}
