package fanout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// TestMain checks that no goroutine is left when the tests end, with patience.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

// upstream is the informer a Server serves, over a memory source.
type upstream struct {
	*wiretest.Mirror
	src *memory.Source[string, *wiretest.Obj]
}

func newUpstream(t testing.TB, mopts memory.Options) *upstream {
	t.Helper()
	// Unordered: a Server over it numbers its changes itself, one revision per change.
	// Servers of an ordered upstream are tested in fanout_revisions_test.go.
	return startUpstream(t, memory.New(wiretest.ObjName, mopts), "upstream", false)
}

// settle waits until the upstream informer holds the source's state.
func (u *upstream) settle(t testing.TB) {
	t.Helper()
	wiretest.Converge(t, u.Mirror, func() string { return wiretest.State(u.src.Items()) })
}

func newServer(t testing.TB, u *upstream, opts ServerOptions[*wiretest.Obj]) (*Server[string, *wiretest.Obj], error) {
	t.Helper()
	u.settle(t)
	return NewServer(u.Inf, opts)
}

func serve(t testing.TB, u *upstream, opts ServerOptions[*wiretest.Obj]) (*Server[string, *wiretest.Obj], *httptest.Server) {
	t.Helper()
	s, err := newServer(t, u, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		ts.Close()
	})
	waitSynced(t, s)
	return s, ts
}

func waitSynced(t testing.TB, s *Server[string, *wiretest.Obj]) {
	t.Helper()
	select {
	case <-s.Synced():
	case <-time.After(wiretest.WaitTimeout):
		t.Fatal("server never synced")
	}
}

func newTestClient(t testing.TB, url string, opts httpsource.ClientOptions[*wiretest.Obj]) *httpsource.Client[*wiretest.Obj] {
	t.Helper()
	c, err := httpsource.NewClient(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rev returns the wire revision of a log revision of s, a server of its own numbering.
func rev(s *Server[string, *wiretest.Obj], logRev int64) string {
	return fmt.Sprintf("%s.%d", s.revs.tag, logRev)
}

// serveFunc starts a loopback server with h.
func serveFunc(t testing.TB, h http.HandlerFunc) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts
}
