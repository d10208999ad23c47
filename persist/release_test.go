package persist_test

import (
	"testing"
	"weak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
)

// A File outlives the informers that save to it: a program keeps one and builds an
// informer over it again at each start of a part. An informer that stopped (its last
// save done), once the program drops it, is collected with its cache while the next one,
// restored from what it saved, runs over the same File and source.
func TestFileDoesNotKeepStoppedInformers(t *testing.T) {
	src := newSource()
	src.Put(&item{Name: "a", Value: "1"})
	f := newFile(t, t.TempDir())
	first := func() weak.Pointer[informer.Informer[string, *item]] {
		l := start(t, src, f, nil)
		l.rec.Expect(t, "add*a=1")
		l.stop()
		return weak.Make(l.inf)
	}()
	next := start(t, src, f, nil)
	if !next.inf.Stats().Restored {
		t.Fatal("the next informer did not restore what the first saved")
	}
	if !testkit.Collected(first) {
		t.Fatal("the stopped informer is still reachable after the program dropped it, while the next one runs over its File: the File keeps it")
	}
}
