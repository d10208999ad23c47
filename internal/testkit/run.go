package testkit

import (
	"context"
	"testing"
)

// Run starts r.Run in a goroutine for the length of the test and returns the context it
// runs under. At the test's cleanup it calls each release function first, then cancels the
// context, waits for Run to return and fails the test if Run returned an error (naming r
// if it has a Name method). It is informertest.Run, for the tests informertest cannot
// serve (the root package's own).
func Run(t testing.TB, r interface{ Run(context.Context) error }, release ...func()) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		for _, f := range release {
			f()
		}
		cancel()
		if err := <-done; err != nil {
			if n, ok := r.(interface{ Name() string }); ok {
				t.Errorf("informer %s: Run: %v", n.Name(), err)
				return
			}
			t.Errorf("Run: %v", err)
		}
	})
	return ctx
}
