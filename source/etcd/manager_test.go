package etcd_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/etcd"
)

// A follower cut off from etcd (a partition: nothing passes, nothing fails) stops at once: its campaign does not wait for etcd to
// answer the resignation of its candidacy.
func TestCutOffFollowerStopsAtOnce(t *testing.T) {
	srv, data := startWithClient(t)
	const ttl = 2 * time.Second
	a := startReplica(t, "a", srv.Endpoint(), data, ttl)
	leaderOf(t, []*candidate{a})
	b := startReplica(t, "b", srv.Endpoint(), data, ttl)
	eventually(t, "b's candidate key", func() bool {
		resp, err := data.Get(context.Background(), "/election/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	})
	b.proxy.Pause()
	t0 := time.Now()
	b.cancel()
	b.cancel = nil
	var err error
	select {
	case err = <-b.done:
	case <-time.After(time.Minute):
		t.Fatal("b did not stop within a minute")
	}
	took := time.Since(t0)
	t.Logf("the cut-off follower stopped in %v", took.Round(time.Millisecond))
	if took > 2*time.Second || err != nil {
		t.Fatalf("the cut-off follower stopped in %v with %v; want within 2s, and nil", took, err)
	}
}

// A replica whose informer is cut off from etcd (connections refused, or a partition where
// nothing passes) turns not ready within the bound, saying since when, and ready again
// once etcd is back: the etcd client retries inside and reports nothing, so readiness asks
// etcd for progress and goes by what comes.
func TestReadyzSeesACutOffSource(t *testing.T) {
	for _, how := range []string{"cut", "blackhole"} {
		t.Run(how, func(t *testing.T) { testReadyzSeesACutOffSource(t, how) })
	}
}

func testReadyzSeesACutOffSource(t *testing.T, how string) {
	srv := startServer(t, serverOptions{})
	p := startProxy(t, srv.Endpoint())
	src := newSource(t, newClient(t, p.Addr()), "/ready/", etcd.Options{})
	inf, err := informer.New[string, *item](src, informer.Options[string, *item]{
		Name: "desired", Key: itemKey, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newReadinessManager(t)
	if err := m.AddInformer(inf); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	h := m.Handler()
	eventually(t, "/readyz to pass", func() bool { code, _ := get(h, "/readyz"); return code == 200 })
	if how == "cut" {
		p.Cut()
	} else {
		p.Pause()
	}
	cut := time.Now()
	var body string
	deadline := cut.Add(readinessBound + 3*time.Second)
	for {
		var code int
		if code, body = get(h, "/readyz?verbose"); code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still passes %v after the cut (bound %v):\n%s", time.Since(cut), readinessBound, body)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Logf("not ready %v after the %s:\n%s", time.Since(cut).Round(time.Millisecond), how, body)
	contains(t, body, `[-]informer "desired" failed: no progress from its source for `, ", since ", "readyz check failed")
	p.Resume()
	eventually(t, "/readyz to pass again once the source is back", func() bool { code, _ := get(h, "/readyz"); return code == 200 })
}

// readinessBound is the tests' SourceProgressBound and SourceErrorThreshold.
const readinessBound = time.Second

func newReadinessManager(t *testing.T) *manager.Manager {
	t.Helper()
	m, err := manager.New(manager.Options{SourceErrorThreshold: readinessBound, SourceProgressBound: readinessBound, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// get GETs path from h and returns the status and body.
func get(h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// eventually polls cond until it holds, within 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

func contains(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%q is not in:\n%s", sub, s)
		}
	}
}

// Every replica knows who leads, and learns of a new leader when the old one stops.
func TestElectionObservesTheLeader(t *testing.T) {
	srv, data := startWithClient(t)
	a := startReplica(t, "a", srv.Endpoint(), data, 2*time.Second)
	leaderOf(t, []*candidate{a})
	b := startReplica(t, "b", srv.Endpoint(), data, 2*time.Second)
	eventually(t, "both replicas to see a lead", func() bool { return a.m.Leader() == "a" && b.m.Leader() == "a" })
	a.stop(t)
	eventually(t, "b to see itself lead", func() bool { return b.m.Leader() == "b" })
}
