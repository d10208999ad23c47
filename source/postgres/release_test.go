package postgres_test

import (
	"log/slog"
	"testing"
	"weak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/postgres"
)

// A Source serves one informer at a time, and outlives them: a program keeps one per
// table and builds an informer over it again once the last one stopped (each term of a
// leader, say). An informer that stopped, once the program drops it, is collected with
// its cache while the next one runs over the same Source, and a row that does not decode
// reaches the running informer alone.
func TestSourceDoesNotKeepStoppedInformers(t *testing.T) {
	c := connect(t)
	name := newTable(t, c)
	exec(t, c, "INSERT INTO "+name+" VALUES (1, 'a', 'x', 'ok'), (2, 'b', 'y', 'ok')")
	src := newSource(t, name, withBadExtra)

	first, firstErrs := syncedThenStopped(t, src)
	errs := &testkit.Errors{}
	_, rec := run(t, src, func(o *informer.Options[int64, *item]) { o.ErrorHandler = errs.Report })
	if !testkit.Collected(first) {
		t.Fatal("the stopped informer is still reachable after the program dropped it, while the next one runs over its Source: the Source keeps it")
	}
	rec.ExpectNextUnordered(t, "add*1=x", "add*2=y")
	exec(t, c, "INSERT INTO "+name+" VALUES (3, 'c', 'z', 'bad'), (4, 'd', 'w', 'ok')")
	rec.ExpectNext(t, "add 4=w")
	errs.WaitFor(t, informer.ErrDecode)
	if got := errs.Matching(informer.ErrDecode); len(got) != 1 {
		t.Fatalf("the running informer got decode errors %v, want the one of row 3", got)
	}
	if got := firstErrs.All(); len(got) != 0 {
		t.Fatalf("the stopped informer's error handler was called: %v", got)
	}
}

// syncedThenStopped builds an informer over src with a handler, runs it until it has
// synced and its handler has had the list, stops it, and drops it: it returns a weak
// pointer to it, for the test to check that it is collected, and its error handler's
// errors.
func syncedThenStopped(t *testing.T, src *postgres.Source[*item]) (weak.Pointer[informer.Informer[int64, *item]], *testkit.Errors) {
	t.Helper()
	errs := &testkit.Errors{}
	inf, err := informer.New(src, informer.Options[int64, *item]{Key: itemKey, Name: "first", Logger: slog.New(slog.DiscardHandler), ErrorHandler: errs.Report})
	if err != nil {
		t.Fatal(err)
	}
	rec := informertest.NewRecorder(describe)
	reg, err := inf.AddHandler(rec, informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testkit.SyncThenStop(t, inf, reg)
	if got := len(rec.Calls()); got != 2 {
		t.Fatalf("the first informer's handler had %d calls, want the 2 rows", got)
	}
	return weak.Make(inf), errs
}
