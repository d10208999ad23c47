package manager_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/manager"
)

// New checks the elector's timing and the margin against it, saying what to change.
func TestMarginsCheckedAtConstruction(t *testing.T) {
	readme := manager.Timing{TTL: 2 * time.Second, RenewDeadline: 2 * time.Second * 2 / 3, RetryPeriod: 2 * time.Second * 2 / 15}
	for _, tc := range []struct {
		name   string
		timing manager.Timing
		margin time.Duration
		want   string // "" for no error
	}{
		{"default margin", readme, 0, ""},
		{"margin that fits", readme, 300 * time.Millisecond, ""},
		{"margin past the lease", readme, time.Second, "set LeaderStopMargin below 666.666667ms"},
		{"retry not below the renew deadline", manager.Timing{TTL: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: time.Second}, 0, "RetryPeriod < RenewDeadline < TTL"},
	} {
		_, err := manager.New(manager.Options{Elector: timedElector{newFakeElector(), tc.timing}, LeaderStopMargin: tc.margin, Logger: discard()})
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: New: %v; want %q", tc.name, err, tc.want)
		}
	}
	if _, err := manager.New(manager.Options{ShutdownTimeout: time.Second, CacheStopTimeout: time.Second}); err == nil {
		t.Error("CacheStopTimeout equal to ShutdownTimeout accepted")
	}
}

// Checks the user adds run on their probe; ?exclude= leaves one out; /readyz/<name> runs
// one alone.
func TestUserChecks(t *testing.T) {
	m := newManager(t, manager.Options{Logger: discard()})
	failing := errors.New("the database is down")
	if err := m.AddReadyzCheck("database", func(*http.Request) error { return failing }); err != nil {
		t.Fatal(err)
	}
	if err := m.AddReadyzCheck("database", func(*http.Request) error { return nil }); err == nil {
		t.Error("a second check named database accepted")
	}
	m.AddHealthzCheck("disk", func(*http.Request) error { return nil })
	started := make(chan struct{})
	m.Add("ready", manager.RunnableFunc(func(ctx context.Context) error { close(started); <-ctx.Done(); return nil }))
	start(t, m)
	recv(t, started, "the runnable")
	h := m.Handler()
	code, body := probe(h, "/readyz")
	if code != 503 {
		t.Fatalf("/readyz = %d with a failing check:\n%s", code, body)
	}
	contains(t, "/readyz", body, "[-]database failed: the database is down")
	if code, body := probe(h, "/readyz?exclude=database"); code != 200 {
		t.Errorf("/readyz?exclude=database = %d:\n%s", code, body)
	}
	if code, body := probe(h, "/readyz/database"); code != 503 || strings.Contains(body, "[+]manager") {
		t.Errorf("/readyz/database = %d; want 503 with that check alone:\n%s", code, body)
	}
	if code, _ := probe(h, "/readyz/nosuch"); code != 404 {
		t.Errorf("/readyz/nosuch = %d; want 404", code)
	}
	if code, body := probe(h, "/healthz/disk?verbose"); code != 200 || !strings.Contains(body, "[+]disk ok") {
		t.Errorf("/healthz/disk = %d:\n%s", code, body)
	}
}

// observingElector is a fake elector that reports a leader.
type observingElector struct {
	*fakeElector
	leaders chan string
}

func (e observingElector) ObserveLeader(ctx context.Context, fn func(string)) {
	for {
		select {
		case id := <-e.leaders:
			fn(id)
		case <-ctx.Done():
			return
		}
	}
}

// Elected closes when the replica first leads; the observed leader is passed to
// OnNewLeader and shown by /readyz?verbose.
func TestElectedAndLeader(t *testing.T) {
	el := observingElector{newFakeElector(), make(chan string)}
	seen := make(chan string, 10)
	m := newManager(t, manager.Options{Elector: el, OnNewLeader: func(id string) { seen <- id }, Logger: discard()})
	start(t, m)
	el.leaders <- "p7"
	if id := recv(t, seen, "OnNewLeader"); id != "p7" {
		t.Fatalf("OnNewLeader(%q); want p7", id)
	}
	if _, body := probe(m.Handler(), "/readyz?verbose"); !strings.Contains(body, "leader: p7\n") {
		t.Errorf("/readyz?verbose does not name the leader:\n%s", body)
	}
	select {
	case <-m.Elected():
		t.Fatal("Elected closed before any term")
	default:
	}
	el.grants <- newFakeTerm(1)
	recv(t, m.Elected(), "Elected")
}

// Runnables added after Start start at once; leader-only ones join the term in progress.
func TestAddAfterStart(t *testing.T) {
	el := newFakeElector()
	m := newManager(t, manager.Options{Elector: el, Logger: discard()})
	s := start(t, m)
	el.grants <- newFakeTerm(2)
	recv(t, m.Elected(), "Elected")
	ran := make(chan string, 2)
	m.Add("late", manager.RunnableFunc(func(ctx context.Context) error { ran <- "late"; <-ctx.Done(); return nil }))
	m.AddLeader("late leader", manager.RunnableFunc(func(ctx context.Context) error {
		term, _ := manager.TermFrom(ctx)
		if term.Value == 2 {
			ran <- "late leader"
		}
		<-ctx.Done()
		return nil
	}))
	got := map[string]bool{recv(t, ran, "a late runnable"): true, recv(t, ran, "a late runnable"): true}
	if !got["late"] || !got["late leader"] {
		t.Fatalf("started: %v", got)
	}
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := m.Add("too late", manager.RunnableFunc(func(context.Context) error { return nil })); !errors.Is(err, manager.ErrAlreadyStarted) {
		t.Fatalf("Add after the stop: %v; want ErrAlreadyStarted", err)
	}
}

// With ExitOnLoss, a lost term stops the manager with ErrLeadershipLost.
func TestExitOnLoss(t *testing.T) {
	el := newFakeElector()
	m := newManager(t, manager.Options{Elector: el, OnLoss: manager.ExitOnLoss, Logger: discard()})
	done := make(chan error, 1)
	go func() { done <- m.Start(context.Background()) }()
	term := newFakeTerm(3)
	el.grants <- term
	recv(t, m.Elected(), "Elected")
	close(term.lost)
	if err := recv(t, done, "Start to return"); !errors.Is(err, manager.ErrLeadershipLost) {
		t.Fatalf("Start: %v; want ErrLeadershipLost", err)
	}
}

// An informer added to a running manager starts at once; /readyz fails, naming it, until
// it has synced; it stops with the caches, after the runnables.
func TestAddInformerAfterStart(t *testing.T) {
	ev := testkit.NewLog()
	m := newManager(t, manager.Options{Logger: discard()})
	m.Add("api", manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		ev.Record("stop api")
		return nil
	}))
	s := start(t, m)
	h := m.Handler()
	eventually(t, "/readyz to pass", func() bool { code, _ := probe(h, "/readyz"); return code == 200 })
	src := newToggle()
	src.failing.Store(true)
	late := newInformer(t, "late", src)
	if err := m.AddInformer(recordedCache{late, ev}); err != nil {
		t.Fatalf("AddInformer after Start: %v", err)
	}
	var body string
	eventually(t, "/readyz to name the late informer with its source's error", func() bool {
		_, body = probe(h, "/readyz")
		return strings.Contains(body, "test source down")
	})
	contains(t, "/readyz", body, `[-]informer "late" failed: not synced`)
	src.failing.Store(false)
	recv(t, late.Synced(), "the late informer to sync")
	eventually(t, "/readyz to pass again", func() bool { code, _ := probe(h, "/readyz"); return code == 200 })
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := ev.Calls(); !slices.Equal(got, []string{"stop api", "stop informer late"}) {
		t.Fatalf("stop order: %q", got)
	}
	if err := m.AddInformer(newInformer(t, "too late", src)); !errors.Is(err, manager.ErrAlreadyStarted) {
		t.Fatalf("AddInformer after the stop: %v; want ErrAlreadyStarted", err)
	}
}
