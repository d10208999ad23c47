package manager_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/controller"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/memory"
)

// /readyz fails before Start (the informers it will check have not started), names the
// informer that has not synced, with its source's last error, while the other passes, and
// passes once both have.
func TestReadyzNamesTheUnsyncedInformer(t *testing.T) {
	slow := newToggle()
	slow.failing.Store(true)
	m := newManager(t, manager.Options{Logger: discard()})
	m.AddInformer(newInformer(t, "configs", memory.New(thingKey, memory.Options{})))
	m.AddInformer(newInformer(t, "payments", slow))
	h := m.Handler()
	if code, body := probe(h, "/readyz"); code != 503 || !strings.Contains(body, "[-]manager failed: not started") {
		t.Fatalf("/readyz before Start: %d %s", code, body)
	}
	if code, _ := probe(h, "/healthz"); code != 503 {
		t.Fatalf("/healthz before Start: %d", code)
	}
	start(t, m)
	eventually(t, "configs to sync", func() bool {
		_, body := probe(h, "/readyz")
		return strings.Contains(body, `[+]informer "configs" ok`)
	})
	var code int
	var body string
	eventually(t, "the unsynced informer's line to give its last error", func() bool { // a source down at start
		code, body = probe(h, "/readyz")
		return strings.Contains(body, "test source down")
	})
	if code != 503 {
		t.Fatalf("/readyz with payments unsynced: %d %s", code, body)
	}
	contains(t, "/readyz", body, `[-]informer "payments" failed: not synced`, "; last error at ", "[-]manager failed: caches syncing", "readyz check failed")
	if code, body := probe(h, "/healthz"); code != 200 {
		t.Fatalf("/healthz while syncing: %d %s", code, body)
	}
	slow.failing.Store(false)
	eventually(t, "/readyz to pass", func() bool { code, _ := probe(h, "/readyz"); return code == 200 })
	code, body = probe(h, "/readyz?verbose")
	if code != 200 {
		t.Fatalf("/readyz?verbose: %d", code)
	}
	contains(t, "/readyz?verbose", body, `[+]informer "configs" ok`, `[+]informer "payments" ok`, "role: leader, term: none", "readyz check passed")
}

// A source failing longer than SourceErrorThreshold turns readiness off, naming the
// informer, and back on when it recovers.
func TestReadyzFollowsAFailingSource(t *testing.T) {
	src := newToggle()
	src.Put(&thing{Name: "a"})
	m := newManager(t, manager.Options{SourceErrorThreshold: 200 * time.Millisecond, Logger: discard()})
	m.AddInformer(newInformer(t, "configs", src))
	h := m.Handler()
	start(t, m)
	eventually(t, "/readyz to pass", func() bool { code, _ := probe(h, "/readyz"); return code == 200 })
	src.failing.Store(true)
	src.DropWatches(nil)
	var body string
	eventually(t, "/readyz to fail on the failing source", func() bool {
		var code int
		code, body = probe(h, "/readyz")
		return code == 503
	})
	contains(t, "/readyz", body, `[-]informer "configs" failed: source failing for`)
	src.failing.Store(false)
	eventually(t, "/readyz to pass again", func() bool { code, _ := probe(h, "/readyz"); return code == 200 })
}

// A handler stuck longer than its watchdog's bound fails /healthz, naming the watchdog, until
// it returns.
func TestHealthzNamesTheStuckHandler(t *testing.T) {
	src := memory.New(thingKey, memory.Options{})
	inf := newInformer(t, "configs", src)
	m := newManager(t, manager.Options{Logger: discard()})
	m.AddInformer(inf)
	dog := m.Watchdog("configs handler", 50*time.Millisecond)
	release, entered := make(chan struct{}), make(chan struct{}, 10)
	h := handlerFuncs{add: func(o *thing) {
		if o.Name == "stuck" {
			entered <- struct{}{}
			<-release
		}
	}}
	if _, err := inf.AddHandler(manager.TrackHandler[*thing](dog, h), informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	hh := m.Handler()
	eventually(t, "/healthz to pass", func() bool { code, _ := probe(hh, "/healthz"); return code == 200 })
	src.Put(&thing{Name: "stuck"})
	recv(t, entered, "the handler to be called")
	var body string
	eventually(t, "/healthz to fail", func() bool {
		var code int
		code, body = probe(hh, "/healthz")
		return code == 503
	})
	contains(t, "/healthz", body, `[-]watchdog "configs handler" failed: a call has been running for`, "(bound 50ms)", "healthz check failed")
	close(release)
	eventually(t, "/healthz to pass again", func() bool { code, _ := probe(hh, "/healthz"); return code == 200 })
}

// Leading while no renewal was acknowledged within the renew deadline fails /healthz; the
// verbose page shows the role and the term.
func TestHealthzFailsWhenLeadingWithoutRenewal(t *testing.T) {
	el := newFakeElector()
	m := newManager(t, manager.Options{Elector: el, Logger: discard()})
	led := make(chan struct{})
	m.AddLeader("reconciler", manager.RunnableFunc(func(ctx context.Context) error { close(led); <-ctx.Done(); return nil }))
	start(t, m)
	term := newFakeTerm(9)
	term.renewed = time.Now().Add(-3 * time.Second)
	el.grants <- term
	recv(t, led, "leading")
	code, body := probe(m.Handler(), "/healthz?verbose")
	if code != 503 {
		t.Fatalf("/healthz leading without renewal: %d %s", code, body)
	}
	contains(t, "/healthz", body, "[-]leader election failed: leading term 9 but no renewal acknowledged for", "role: leader, term: 9 (me, key /election/9)")
}

// /metrics serves Options.Metrics.
func TestMetricsEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Inc()
	m := newManager(t, manager.Options{Metrics: reg, Logger: discard()})
	if code, body := probe(m.Handler(), "/metrics"); code != 200 || !strings.Contains(body, "test_total 1") {
		t.Fatalf("/metrics: %d %s", code, body)
	}
}

// With Options.MetricsAddr, /metrics is served there alone, apart from the probes, and
// the health server leaves it out; both stop with the manager. MetricsAddr needs Metrics.
func TestMetricsServedApart(t *testing.T) {
	if _, err := manager.New(manager.Options{MetricsAddr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "Metrics is nil") {
		t.Fatalf("MetricsAddr without Metrics: %v", err)
	}
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Inc()
	health, metrics := testkit.StableAddr(t), testkit.StableAddr(t)
	m := newManager(t, manager.Options{HealthAddr: health, MetricsAddr: metrics, Metrics: reg, Logger: discard()})
	s := start(t, m)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(addr, path string) (int, string) {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	eventually(t, "/readyz to pass on the health address", func() bool { code, _ := get(health, "/readyz"); return code == 200 })
	if code, body := get(metrics, "/metrics"); code != 200 || !strings.Contains(body, "test_total 1") {
		t.Fatalf("/metrics on the metrics address: %d %s", code, body)
	}
	if code, _ := get(health, "/metrics"); code != 404 {
		t.Fatalf("/metrics on the health address: %d; want 404", code)
	}
	if code, _ := get(metrics, "/readyz"); code != 404 {
		t.Fatalf("/readyz on the metrics address: %d; want 404", code)
	}
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(metrics, "/metrics"); code != 0 {
		t.Fatal("the metrics server still serves after Start returned")
	}
}

// The health server of Options.HealthAddr serves while the manager runs and stops with it.
func TestHealthServer(t *testing.T) {
	addr := testkit.StableAddr(t)
	m := newManager(t, manager.Options{HealthAddr: addr, Logger: discard()})
	s := start(t, m)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func() (int, error) {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	eventually(t, "/readyz to pass over HTTP", func() bool { code, _ := get(); return code == 200 })
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := get(); err == nil {
		t.Fatal("the health server still serves after Start returned")
	}
}

type handlerFuncs struct{ add func(*thing) }

func (h handlerFuncs) OnAdd(o *thing, _ bool)    { h.add(o) }
func (h handlerFuncs) OnUpdate(_, _ *thing)      {}
func (h handlerFuncs) OnDelete(_ *thing, _ bool) {}

// revisionCounter counts the revisions its handler is told of.
type revisionCounter struct {
	handlerFuncs
	revs chan string
}

func (r revisionCounter) OnRevision(rev string) { r.revs <- rev }

// TrackHandler keeps the handler's OnRevision: the tracked handler is told the revision its
// notifications add up to, as the handler alone would be.
func TestTrackHandlerKeepsOnRevision(t *testing.T) {
	src := memory.New(thingKey, memory.Options{})
	src.Put(&thing{Name: "a"})
	inf := newInformer(t, "configs", src)
	m := newManager(t, manager.Options{Logger: discard()})
	m.AddInformer(inf)
	h := revisionCounter{handlerFuncs{add: func(*thing) {}}, make(chan string, 100)}
	if _, err := inf.AddHandler(manager.TrackHandler[*thing](m.Watchdog("configs handler", time.Second), h), informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	rev := recv(t, h.revs, "OnRevision after the initial list")
	if rev == "" {
		t.Fatal("OnRevision with an empty revision")
	}
}

// A controller added as a runnable over an informer that nobody runs: /readyz?verbose
// names it, and the informer, with what to do, within a second of the start; once the
// informer runs, the controller's line passes.
func TestReadyzNamesAControllerOverAnUnstartedInformer(t *testing.T) {
	m := newManager(t, manager.Options{Logger: discard()})
	m.AddInformer(newInformer(t, "configs", memory.New(thingKey, memory.Options{})))
	idle := newInformer(t, "payments", memory.New(thingKey, memory.Options{}))
	c, err := controller.New(controller.ReconcilerFunc[string](func(context.Context, string) (controller.Result, error) {
		return controller.Result{}, nil
	}), controller.Options[string]{Name: "status", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.For(c, idle, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Add("status", c); err != nil {
		t.Fatal(err)
	}
	h := m.Handler()
	began := time.Now()
	start(t, m)
	var body string
	eventually(t, "/readyz to name the controller", func() bool {
		_, body = probe(h, "/readyz?verbose")
		return strings.Contains(body, `runnable "status"`)
	})
	if took := time.Since(began); took > time.Second {
		t.Errorf("/readyz named the controller %v after the start; want within a second", took)
	}
	t.Logf("/readyz?verbose:\n%s", body)
	contains(t, "/readyz?verbose", body, `[+]informer "configs" ok`,
		`[-]runnable "status" failed: controller status: informer payments was never started: add it to the manager, or call its Run (or Factory.Start)`,
		"readyz check failed")
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- idle.Run(ctx) }()
	defer func() { cancel(); recv(t, ran, "the informer to stop") }()
	eventually(t, "/readyz to pass", func() bool { code, _ := probe(h, "/readyz"); return code == 200 })
	_, body = probe(h, "/readyz?verbose")
	contains(t, "/readyz?verbose", body, `[+]runnable "status" ok`)
}
