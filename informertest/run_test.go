package informertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/memory"
)

// RunSynced runs an informer for the test: it returns once the informer has synced, and
// at the test's end stops it and checks Run returned no error.
func TestRunSynced(t *testing.T) {
	src := memory.New(func(it *item) string { return it.Name }, memory.Options{})
	src.Put(&item{"a", "1"})
	inf, err := informer.New(src, informer.Options[string, *item]{
		Key: func(it *item) (string, error) { return it.Name, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := informertest.NewRecorder(describe)
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := informertest.RunSynced(t, inf)
	if !inf.Stats().Synced || ctx.Err() != nil {
		t.Fatalf("after RunSynced: synced %v, context %v", inf.Stats().Synced, ctx.Err())
	}
	src.Put(&item{"a", "2"})
	rec.Expect(t, "add*a=1", "update a=1→2")
}

type runFunc func(context.Context) error

func (f runFunc) Run(ctx context.Context) error { return f(ctx) }

// cleanupTB collects a test's cleanups and errors, so that a test can look at what Run
// does at the end of another test.
type cleanupTB struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (c *cleanupTB) Helper()          {}
func (c *cleanupTB) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }
func (c *cleanupTB) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// At cleanup, Run calls the release functions before it cancels the context, waits for
// Run to return and reports its error.
func TestRun_ReleasesCancelsAndReportsTheError(t *testing.T) {
	var order []string
	tb := &cleanupTB{TB: t}
	ctx := informertest.Run(tb, runFunc(func(ctx context.Context) error {
		<-ctx.Done()
		order = append(order, "returned")
		return errors.New("boom")
	}), func() { order = append(order, "released") })
	if ctx.Err() != nil || len(tb.cleanups) != 1 {
		t.Fatalf("before cleanup: context %v, %d cleanups", ctx.Err(), len(tb.cleanups))
	}
	tb.cleanups[0]()
	if fmt.Sprint(order) != "[released returned]" || fmt.Sprint(tb.errs) != "[Run: boom]" {
		t.Fatalf("order %q, errors %q", order, tb.errs)
	}
}
