package fanout

import (
	"context"
	"testing"
	"weak"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// A Server and the Client of it outlive the client informers built over them: an
// informer that stopped, once the program drops it, is collected with its cache while
// another runs over the same Client, and its watch is over at the Server, which serves
// the running one alone.
func TestServerDoesNotKeepStoppedClientInformers(t *testing.T) {
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a", "b")
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})

	first, _ := wiretest.SyncedThenStopped(t, c, "a=1 b=1")
	second := wiretest.NewMirror(t, c, "second", nil)
	wiretest.Until(t, "the second informer's state", func() bool { return second.Rec.State() == "a=1 b=1" }, second.Rec.Changed)
	if !testkit.Collected(first) {
		t.Fatal("the stopped client informer is still reachable after the program dropped it, while another runs over its Client: the Client or the Server keeps it")
	}
	wiretest.Eventually(t, "one open watch at the Server", func() bool { return srv.Stats().OpenWatches == 1 })
}

// A Server shut down over an informer that goes on running is collected with its copy of
// the collection: Shutdown takes its handler off the informer, and the informer keeps no
// other reference to it, so a program that serves an informer through one Server after
// another (a new configuration, say) does not pay for each Server it shut down.
func TestInformerDoesNotKeepShutDownServers(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	served := func() weak.Pointer[mirror[string, *wiretest.Obj]] {
		srv := newServer(t, up, ServerOptions[*wiretest.Obj]{})
		waitSynced(t, srv)
		if got := srv.Revision(); got != rev(srv, 1) {
			t.Fatalf("the Server is at %s, want %s", got, rev(srv, 1))
		}
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		return weak.Make(srv.mirror)
	}()
	wiretest.Put(up.src, "b", "1") // a change the shut-down Server must not be told of
	up.settle(t)
	if !testkit.Collected(served) {
		t.Fatal("the Server's copy of the collection is still reachable after its Shutdown and the program dropped the Server: the informer it served keeps it")
	}
}
