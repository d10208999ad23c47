package fanout

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/informer-go/informer/internal/wiretest"

	httpsource "github.com/informer-go/informer/source/http"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

var _ informer.SourceIdentifier = (*httpsource.Client[int])(nil)

// A Client's identity is its URL and the instance of the Server behind it: two Servers at
// one URL (one restarted) are two sources, one Server asked twice is one. A server that
// names no instance (a plain API; a PassThrough) is its URL.
func TestClientSourceID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	u := newUpstream(t, memory.Options{})
	wiretest.Put(u.src, "a", "1")
	first, err := newServer(t, u, ServerOptions[*wiretest.Obj]{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := newServer(t, u, ServerOptions[*wiretest.Obj]{})
	if err != nil {
		t.Fatal(err)
	}
	waitSynced(t, first)
	waitSynced(t, second)
	var current atomic.Pointer[Server[string, *wiretest.Obj]]
	current.Store(first)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { current.Load().ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { first.Shutdown(ctx); second.Shutdown(ctx) })

	c := newTestClient(t, ts.URL+"/objs", httpsource.ClientOptions[*wiretest.Obj]{})
	id1, err := c.SourceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.SourceID(ctx)
	if err != nil || again != id1 {
		t.Fatalf("asked twice: %q then %q (%v)", id1, again, err)
	}
	current.Store(second) // restarted
	id2, err := c.SourceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id1 == id2 || !strings.HasPrefix(id1, ts.URL+"/objs ") || !strings.HasPrefix(id2, ts.URL+"/objs ") {
		t.Fatalf("two Server instances at %s: %q and %q, want the URL and two instances", ts.URL, id1, id2)
	}

	plain := httptest.NewServer(NewPassThrough[*wiretest.Obj](u.src, PassThroughOptions[*wiretest.Obj]{}))
	t.Cleanup(plain.Close)
	id, err := newTestClient(t, plain.URL, httpsource.ClientOptions[*wiretest.Obj]{}).SourceID(ctx)
	if err != nil || id != plain.URL {
		t.Fatalf("a server that names no instance: %q %v, want its URL %q", id, err, plain.URL)
	}
}
