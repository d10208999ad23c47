package fanout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
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

// newServer makes a Server of u once u's informer holds its source's state; a refused
// option fails the test.
func newServer(t testing.TB, u *upstream, opts ServerOptions[*wiretest.Obj]) *Server[string, *wiretest.Obj] {
	t.Helper()
	u.settle(t)
	s, err := NewServer(u.Inf, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func serve(t testing.TB, u *upstream, opts ServerOptions[*wiretest.Obj]) (*Server[string, *wiretest.Obj], *httptest.Server) {
	t.Helper()
	s := newServer(t, u, opts)
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
	return s.b.onWire(logRev)
}

// startServer serves srv on loopback with the http.Server settings the README asks for
// (ConnContext installed), and shuts both down at the end of the test.
func startServer(t testing.TB, srv *Server[string, *wiretest.Obj]) *httptest.Server {
	t.Helper()
	return serveHTTP(t, srv, srv, withConnContext)
}

// withConnContext installs ConnContext, as the README asks.
func withConnContext(ts *httptest.Server) { ts.Config.ConnContext = ConnContext }

// serveHTTP serves front (srv, or a handler that passes requests to it) on loopback;
// setup, if set, configures the server before it starts (its listener, ConnContext;
// EnableHTTP2 or a TLS config starts it over TLS). Both are shut down when the test ends;
// it returns once srv has synced.
func serveHTTP(t testing.TB, srv *Server[string, *wiretest.Obj], front http.Handler, setup func(*httptest.Server)) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(front)
	if setup != nil {
		setup(ts)
	}
	if ts.EnableHTTP2 || ts.TLS != nil {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		ts.Close()
	})
	waitSynced(t, srv)
	return ts
}

// reportTo is an ErrorHandler that sends each error to ch without blocking (an error
// that finds ch full is dropped).
func reportTo(ch chan<- error) func(error) {
	return func(err error) {
		select {
		case ch <- err:
		default:
		}
	}
}

// paymentsOnly asks a client for the objects of team payments (a "team" filter of
// filterOptions).
var paymentsOnly = httpsource.ClientOptions[*wiretest.Obj]{Filter: httpsource.Filter{Index: "team", Value: "payments"}}

// syncedMirror runs a Mirror over lw until the test ends, once its cache has synced.
func syncedMirror(t testing.TB, lw informer.ListerWatcher[*wiretest.Obj], name string) *wiretest.Mirror {
	t.Helper()
	d := wiretest.NewMirror(t, lw, name, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := informer.WaitForCacheSync(ctx, d.Inf); err != nil {
		t.Fatal(err)
	}
	return d
}

// paymentsMirror serves src (its own revisions) with filterOptions, and returns a synced
// Mirror of its payments team.
func paymentsMirror(t testing.TB, src *memory.Source[string, *wiretest.Obj]) *wiretest.Mirror {
	t.Helper()
	up := startUpstream(t, src, "upstream", true)
	_, ts, _ := startReplica(t, up, filterOptions())
	return syncedMirror(t, newTestClient(t, ts.URL, paymentsOnly).Ordered(), "payments")
}

// bigState serves (startServer) an upstream of objects objects of size bytes, k00000…,
// with a history of history changes and errors not reported.
func bigState(tb testing.TB, objects, size, history int) (*upstream, *Server[string, *wiretest.Obj], *httptest.Server) {
	tb.Helper()
	up := newUpstream(tb, memory.Options{})
	val := strings.Repeat("v", size)
	for i := range objects {
		wiretest.Put(up.src, fmt.Sprintf("k%05d", i), val)
	}
	srv := newServer(tb, up, ServerOptions[*wiretest.Obj]{HistoryLimit: history, ServeOptions: ServeOptions{ErrorHandler: func(error) {}}})
	return up, srv, startServer(tb, srv)
}

// historyTag matches the history tag of a revision in wiretest.Event's form ("@5@k3j9x").
var historyTag = regexp.MustCompile(`(@[0-9]+)@[0-9a-z]+`)

// untagged returns events (wiretest.Event's form) with their revisions' history tags
// left out, for comparing with revisions of the upstream.
func untagged(events []string) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = historyTag.ReplaceAllString(e, "$1")
	}
	return out
}
