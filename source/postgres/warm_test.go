package postgres_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/postgres"
)

// A warm restart on a named slot: the second informer restores the saved cache, lists
// nothing, and hears exactly the changes made while no informer ran; the slot is
// dropped at the end.
func TestWarmRestartOnNamedSlot(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	slot := "informer_warm"
	t.Cleanup(func() { _ = postgres.DropSlot(context.Background(), server.URL, slot) })
	exec(t, c, "INSERT INTO "+name+" VALUES (1, 'n', 'a'), (2, 'n', 'b'), (3, 'n', 'c')")
	dir := t.TempDir()
	start := func() (*informer.Informer[int64, *item], *informertest.Recorder[*item], func()) {
		return warmStart(t, name, dir, func(cfg *postgres.Config[*item]) { cfg.Slot = slot }, false, nil)
	}

	inf, rec, stop := start()
	rec.ExpectNextUnordered(t, "add*1=a", "add*2=b", "add*3=c")
	exec(t, c, "UPDATE "+name+" SET value = 'a2' WHERE id = 1")
	rec.ExpectNext(t, "update 1=a→a2")
	caughtUp(t, c, inf, name)
	stop()

	exec(t, c, "UPDATE "+name+" SET value = 'b2' WHERE id = 2")
	exec(t, c, "INSERT INTO "+name+" VALUES (4, 'n', 'd')")

	inf, rec, stop = start()
	defer stop()
	rec.ExpectNextUnordered(t, "add*1=a2", "add*2=b", "add*3=c")
	rec.ExpectNext(t, "update 2=b→b2", "add 4=d")
	caughtUp(t, c, inf, name)
	if st := inf.Stats(); !st.Restored || st.Lists != 0 {
		t.Fatalf("restored %v, %d lists: want a restore and no list", st.Restored, st.Lists)
	}
}

// warmStart starts an informer over table that saves its cache in dir (persist; with
// Options.ServeUnconfirmed if unconfirmed), logging its errors and passing them to report
// (nil: none), waits for its sync, and returns it, its recorder and a function that
// stops it.
func warmStart(t *testing.T, table, dir string, edit func(*postgres.Config[*item]), unconfirmed bool, report func(error)) (*informer.Informer[int64, *item], *informertest.Recorder[*item], func()) {
	t.Helper()
	src := newSource(t, table, edit)
	store, err := persist.New[int64, *item](dir, persist.Options[*item]{Schema: "items-1"})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(src, informer.Options[int64, *item]{Key: itemKey, Persist: store, ServeUnconfirmed: unconfirmed, Logger: slog.New(slog.DiscardHandler),
		ErrorHandler: func(err error) {
			t.Logf("informer error: %v", err)
			if report != nil {
				report(err)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	rec := informertest.NewRecorder(describe).WithTimeout(time.Minute)
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = inf.Run(ctx) }()
	stop := func() { cancel(); <-inf.Done(); _ = src.Close() }
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := informer.WaitForCacheSync(sctx, inf); err != nil {
		stop()
		t.Fatal("informer did not sync")
	}
	return inf, rec, stop
}
