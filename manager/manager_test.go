package manager_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/memory"
)

// The caches sync before any runnable starts; the leader-only runnable gets the term; the
// stop runs in reverse order: leader-only runnables, runnables (together), caches.
func TestStartsInOrderAndStopsInReverse(t *testing.T) {
	ev := testkit.NewLog()
	src := memory.New(thingKey, memory.Options{})
	src.Put(&thing{Name: "a"})
	inf := newInformer(t, "things", src)
	el := newFakeElector()
	m := newManager(t, manager.Options{Elector: el, Logger: discard()})
	if err := m.AddInformer(recordedCache{inf, ev}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second"} {
		m.Add(name, manager.RunnableFunc(func(ctx context.Context) error {
			select {
			case <-inf.Synced():
				ev.Record(fmt.Sprintf("start %s", name))
			default:
				ev.Record(fmt.Sprintf("start %s before the cache synced", name))
			}
			<-ctx.Done()
			ev.Record(fmt.Sprintf("stop %s", name))
			return nil
		}))
	}
	m.AddLeader("reconciler", manager.RunnableFunc(func(ctx context.Context) error {
		term, _ := manager.TermFrom(ctx)
		ev.Record(fmt.Sprintf("lead %d", term.Value))
		<-ctx.Done()
		ev.Record("stop reconciler")
		return nil
	}))
	s := start(t, m)
	ev.WaitForLine(t, "start first")
	ev.WaitForLine(t, "start second")
	if got, ok := m.Leading(); ok {
		t.Fatalf("leading term %v before any was granted", got)
	}
	term := newFakeTerm(7)
	el.grants <- term
	ev.WaitForLine(t, "lead 7")
	if err := s.stop(t); err != nil {
		t.Fatalf("Start: %v", err)
	}
	got := ev.Calls()
	if len(got) == 7 && got[4] > got[5] { // the runnables stop together, in either order
		got[4], got[5] = got[5], got[4]
	}
	if !slices.Equal(got[3:], []string{"stop reconciler", "stop first", "stop second", "stop informer things"}) {
		t.Fatalf("events: %q", got)
	}
	select {
	case <-term.resigned:
	default:
		t.Fatal("the term was not resigned at stop")
	}
}

// A cache that cannot sync fails Start within the bound, naming it, and no runnable starts.
func TestCacheSyncTimeoutNamesTheInformer(t *testing.T) {
	good := memory.New(thingKey, memory.Options{})
	bad := newToggle()
	bad.failing.Store(true)
	m := newManager(t, manager.Options{CacheSyncTimeout: 200 * time.Millisecond, Logger: discard()})
	m.AddInformer(newInformer(t, "configs", good))
	m.AddInformer(newInformer(t, "payments", bad))
	ran := make(chan struct{}, 1)
	m.Add("never", manager.RunnableFunc(func(ctx context.Context) error { ran <- struct{}{}; return nil }))
	err := m.Start(context.Background())
	if err == nil {
		t.Fatal("Start returned nil with a cache that never syncs")
	}
	if !strings.Contains(err.Error(), `"payments"`) || strings.Contains(err.Error(), `"configs"`) {
		t.Fatalf("error does not name exactly the unsynced informer: %v", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error does not wrap context.DeadlineExceeded: %v", err)
	}
	select {
	case <-ran:
		t.Fatal("a runnable started although the caches did not sync")
	default:
	}
}

// A runnable that ignores its context does not hold Start past its part of
// ShutdownTimeout (less CacheStopTimeout), and the error names it.
func TestShutdownTimeoutNamesTheRunnable(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	for _, leaderOnly := range []bool{false, true} {
		m := newManager(t, manager.Options{ShutdownTimeout: 400 * time.Millisecond, CacheStopTimeout: 100 * time.Millisecond, Logger: discard()})
		began := make(chan struct{})
		stubborn := manager.RunnableFunc(func(ctx context.Context) error { close(began); <-release; return nil })
		m.Add("polite", manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return nil }))
		if leaderOnly {
			m.AddLeader("stubborn", stubborn)
		} else {
			m.Add("stubborn", stubborn)
		}
		s := start(t, m)
		recv(t, began, "the stubborn runnable to start")
		t0 := time.Now()
		err := s.stop(t)
		took := time.Since(t0)
		if !errors.Is(err, manager.ErrShutdownTimeout) || !strings.Contains(err.Error(), "stubborn") {
			t.Fatalf("leader-only %v: Start: %v; want ErrShutdownTimeout naming stubborn", leaderOnly, err)
		}
		if took < 300*time.Millisecond || took > 400*time.Millisecond+2*time.Second {
			t.Fatalf("leader-only %v: Start returned %v after the stop; want the runnables' 300ms part", leaderOnly, took)
		}
		t.Logf("leader-only %v: %v after %v", leaderOnly, err, took.Round(time.Millisecond))
	}
}

// A failing runnable stops the manager with its error; the others stop in order.
func TestFailingRunnableStopsTheManager(t *testing.T) {
	m := newManager(t, manager.Options{Logger: discard()})
	stopped := make(chan struct{})
	m.Add("steady", manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil }))
	m.Add("broken", manager.RunnableFunc(func(ctx context.Context) error { return errTest }))
	err := m.Start(context.Background())
	if !errors.Is(err, errTest) || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("Start: %v; want the error of broken", err)
	}
	recv(t, stopped, "steady to stop")
	if code, body := probe(m.Handler(), "/healthz"); code != 503 || !strings.Contains(body, "stopped after a failure") {
		t.Fatalf("/healthz after a failure: %d %s", code, body)
	}
}

// A term lost stops the leader-only runnables and resigns; the manager campaigns again and
// leads a later term without a restart, and its caches run throughout.
func TestDemotedManagerCampaignsAgain(t *testing.T) {
	ev := testkit.NewLog()
	src := memory.New(thingKey, memory.Options{})
	inf := newInformer(t, "things", src)
	el := newFakeElector()
	m := newManager(t, manager.Options{Elector: el, Logger: discard()})
	m.AddInformer(recordedCache{inf, ev})
	m.AddLeader("reconciler", manager.RunnableFunc(func(ctx context.Context) error {
		term, _ := manager.TermFrom(ctx)
		ev.Record(fmt.Sprintf("lead %d", term.Value))
		<-ctx.Done()
		ev.Record(fmt.Sprintf("stop %d", term.Value))
		return nil
	}))
	start(t, m)
	first, second := newFakeTerm(1), newFakeTerm(5)
	el.grants <- first
	ev.WaitForLine(t, "lead 1")
	close(first.lost)
	ev.WaitForLine(t, "stop 1")
	recv(t, first.resigned, "the lost term to be resigned")
	eventually(t, "a second campaign", func() bool { return el.campaigns.Load() == 2 })
	if _, ok := m.Leading(); ok {
		t.Fatal("still leading after the term was lost")
	}
	if code, body := probe(m.Handler(), "/readyz?verbose"); code != 200 || !strings.Contains(body, "role: follower") {
		t.Fatalf("a follower is not ready: %d %s", code, body)
	}
	el.grants <- second
	ev.WaitForLine(t, "lead 5")
	if term, ok := m.Leading(); !ok || term.Value != 5 {
		t.Fatalf("Leading() = %v, %v; want term 5", term, ok)
	}
	if got := ev.Calls(); !slices.Equal(got, []string{"lead 1", "stop 1", "lead 5"}) {
		t.Fatalf("events: %q (the informer must not stop)", got)
	}
}

// Leader-only runnables that ignore their context past the hard deadline (the lease's
// expiry less the margin) make the manager call OnLeaderStuck, before the lease expires,
// and the term is not resigned while they run.
func TestLeaderStuckPastTheHardDeadline(t *testing.T) {
	stuck := make(chan []string, 1)
	el := newFakeElector()
	m := newManager(t, manager.Options{
		Elector:          el,
		LeaderStopMargin: time.Second, // the margin is the test's slack: a loaded machine needs it
		OnLeaderStuck:    func(names []string) { stuck <- names },
		Logger:           discard(),
	})
	release, began := make(chan struct{}), make(chan struct{})
	m.AddLeader("stubborn", manager.RunnableFunc(func(ctx context.Context) error { close(began); <-release; return nil }))
	m.AddLeader("polite", manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return nil }))
	start(t, m)
	term := newFakeTerm(3)
	el.grants <- term
	recv(t, began, "the stubborn runnable to start")
	term.expires = time.Now().Add(2 * time.Second) // the hard deadline: 1 s from now
	close(term.lost)
	names := recv(t, stuck, "OnLeaderStuck")
	if now := time.Now(); !now.Before(term.expires) {
		t.Fatalf("OnLeaderStuck called at %v, after the lease could expire at %v", now, term.expires)
	}
	if !slices.Equal(names, []string{"stubborn"}) {
		t.Fatalf("OnLeaderStuck(%q); want stubborn alone", names)
	}
	select {
	case <-term.resigned:
		t.Fatal("resigned while a leader-only runnable still runs")
	default:
	}
	close(release)
	recv(t, term.resigned, "the resignation once the runnable returned")
}

// A factory's informers start and sync with the caches and stop with them.
func TestFactory(t *testing.T) {
	f := informer.NewFactory()
	src := memory.New(thingKey, memory.Options{})
	src.Put(&thing{Name: "a"})
	inf, err := informer.InformerFor(f, "things", func() (*informer.Informer[string, *thing], error) {
		return informer.New(src, informer.Options[string, *thing]{Name: "things", Key: func(o *thing) (string, error) { return o.Name, nil }, Logger: discard()})
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, manager.Options{Logger: discard()})
	m.AddFactory(f)
	saw := make(chan int, 1)
	m.Add("reader", manager.RunnableFunc(func(ctx context.Context) error { saw <- inf.Len(); <-ctx.Done(); return nil }))
	s := start(t, m)
	if n := recv(t, saw, "the runnable"); n != 1 {
		t.Fatalf("the runnable saw %d objects; want the synced 1", n)
	}
	if err := s.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A manager's stop saves each informer's warm-restart snapshot, and the next manager's
// informer over the same source starts from it: restored, with no list.
func TestStopSavesSnapshotsForTheNextStart(t *testing.T) {
	src := memory.New(thingKey, memory.Options{})
	src.Put(&thing{Name: "a", Value: "1"})
	src.Put(&thing{Name: "b", Value: "2"})
	dir := t.TempDir()

	run := func() *informer.Informer[string, *thing] {
		f, err := persist.New[string, *thing](dir, persist.Options[*thing]{Schema: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		inf, err := informer.New[string, *thing](src, informer.Options[string, *thing]{
			Name: "things", Key: func(o *thing) (string, error) { return o.Name, nil },
			Persist: f, Logger: discard(),
		})
		if err != nil {
			t.Fatal(err)
		}
		m := newManager(t, manager.Options{Logger: discard()})
		if err := m.AddInformer(inf); err != nil {
			t.Fatal(err)
		}
		synced := make(chan struct{})
		m.Add("synced", manager.RunnableFunc(func(ctx context.Context) error {
			close(synced)
			<-ctx.Done()
			return nil
		}))
		s := start(t, m)
		recv(t, synced, "the runnables to start after the caches synced")
		if err := s.stop(t); err != nil {
			t.Fatalf("Start: %v", err)
		}
		return inf
	}

	first := run()
	if first.Stats().Restored || first.Stats().Lists != 1 {
		t.Fatalf("first start: restored %v, lists %d; want a cold start with one list", first.Stats().Restored, first.Stats().Lists)
	}
	second := run()
	if !second.Stats().Restored || second.Stats().Lists != 0 {
		t.Fatalf("second start: restored %v, lists %d; want the snapshot saved at the first stop, and no list", second.Stats().Restored, second.Stats().Lists)
	}
	var got []string
	for k, v := range second.All() {
		got = append(got, k+"="+v.Value)
	}
	if want := []string{"a=1", "b=2"}; !slices.Equal(got, want) {
		t.Fatalf("restored cache %q, want %q", got, want)
	}
}

// A leader-only runnable starts within its term: Leading reports the term from the
// runnable's first instruction on.
func TestLeaderRunnableSeesTheTermHeld(t *testing.T) {
	el := newFakeElector()
	m := newManager(t, manager.Options{Elector: el, Logger: discard()})
	seen := make(chan string, 1)
	m.AddLeader("reader", manager.RunnableFunc(func(ctx context.Context) error {
		term, ok := m.Leading()
		seen <- fmt.Sprintf("%d %v", term.Value, ok)
		<-ctx.Done()
		return nil
	}))
	start(t, m)
	el.grants <- newFakeTerm(7)
	if got := recv(t, seen, "the runnable to start"); got != "7 true" {
		t.Fatalf("the runnable saw Leading() = %s, want 7 true", got)
	}
}
