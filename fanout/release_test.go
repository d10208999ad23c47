package fanout

import (
	"testing"
	"weak"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
)

// A Server and the Client of it outlive the client informers built over them: an
// informer that stopped, once the program drops it, is collected with its cache while
// another runs over the same Client, and its watch is over at the Server, which serves
// the running one alone.
func TestServerDoesNotKeepStoppedClientInformers(t *testing.T) {
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a", "b")
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})

	first := clientSyncedThenStopped(t, c)
	second := wiretest.NewMirror(t, c, "second", nil)
	wiretest.Until(t, "the second informer's state", func() bool { return second.Rec.State() == "a=1 b=1" }, second.Rec.Changed)
	if !testkit.Collected(first) {
		t.Fatal("the stopped client informer is still reachable after the program dropped it, while another runs over its Client: the Client or the Server keeps it")
	}
	wiretest.Eventually(t, "one open watch at the Server", func() bool { return srv.Stats().OpenWatches == 1 })
}

// clientSyncedThenStopped builds an informer over c with a handler, runs it until it has
// synced and its handler has had the list, stops it, and drops it: it returns a weak
// pointer to it, for the test to check that it is collected.
func clientSyncedThenStopped(t *testing.T, c *httpsource.Client[*wiretest.Obj]) weak.Pointer[informer.Informer[string, *wiretest.Obj]] {
	t.Helper()
	rec := wiretest.NewRecorder()
	inf, err := informer.New(c, informer.Options[string, *wiretest.Obj]{Key: wiretest.ObjKey, Name: "first", Backoff: wiretest.TestBackoff, ErrorHandler: rec.OnError})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := inf.AddHandler(rec, informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testkit.SyncThenStop(t, inf, reg)
	if got := rec.State(); got != "a=1 b=1" {
		t.Fatalf("the first informer's handler was told %q, want a=1 b=1", got)
	}
	return weak.Make(inf)
}
