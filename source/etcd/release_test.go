package etcd_test

import (
	"errors"
	"testing"
	"weak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
)

// A Source outlives the informers built over it: a program keeps one per prefix and builds
// an informer over it again (each term of a leader, say). An informer that stopped, once
// the program drops it, is collected with its cache while another runs over the same
// Source; its watch is closed, and a value that does not decode reaches the running
// informer alone.
func TestSourceDoesNotKeepStoppedInformers(t *testing.T) {
	_, c := startWithClient(t)
	put(t, c, "/keep/a", "1")
	put(t, c, "/keep/b", "1")
	src := newSource(t, c, "/keep/", etcd.Options{})

	first := syncedThenStopped(t, src)
	if n := etcd.OpenWatches(src); n != 0 {
		t.Fatalf("%d watches open after the informer stopped, want 0", n)
	}
	errs := &testkit.Errors{}
	_, rec := startInformer(t, src, informer.Options[string, *item]{}, errs)
	if !testkit.Collected(first) {
		t.Fatal("the stopped informer is still reachable after the program dropped it, while another runs over its Source: the Source keeps it")
	}
	rec.ExpectNextUnordered(t, "add*/keep/a=1", "add*/keep/b=1")
	put(t, c, "/keep/bad", "!x")
	put(t, c, "/keep/c", "1")
	rec.ExpectNext(t, "add /keep/c=1")
	if got := errs.Matching(informer.ErrDecode); len(got) != 1 || !errors.Is(got[0], errBadValue) {
		t.Fatalf("the running informer got decode errors %v, want the one of /keep/bad", got)
	}
	if n := etcd.OpenWatches(src); n != 1 {
		t.Fatalf("%d watches open with one informer running, want 1", n)
	}
}

// syncedThenStopped builds an informer over src with a handler, runs it until it has
// synced and its handler has had the list, stops it, and drops it: it returns a weak
// pointer to it, for the test to check that it is collected.
func syncedThenStopped(t *testing.T, src *etcd.Source[*item]) weak.Pointer[informer.Informer[string, *item]] {
	t.Helper()
	inf, err := informer.New(src, informer.Options[string, *item]{Key: itemKey, ErrorHandler: func(err error) { t.Logf("first informer: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	reg, err := inf.AddHandler(rec, informer.HandlerOptions{Name: "recorder"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.SyncThenStop(t, inf, reg)
	if len(rec.Calls()) == 0 {
		t.Fatal("the handler had nothing of the list")
	}
	return weak.Make(inf)
}
