package manager_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/memory"
)

// renewingTerm is a term whose lease is renewed all along: it expires ttl from now, whenever
// asked.
type renewingTerm struct {
	*fakeTerm
	ttl time.Duration
}

func (r renewingTerm) Renewed() time.Time { return time.Now() }
func (r renewingTerm) Expires() time.Time { return time.Now().Add(r.ttl) }

// A graceful stop of a leader whose lease is still renewed does not call OnLeaderStuck when
// the leader-only work takes longer than the lease's TTL less the margin to return: the
// hard deadline follows the lease actually held. The term is resigned once the work returned.
func TestGracefulStopFollowsTheRenewedLease(t *testing.T) {
	const ttl = 300 * time.Millisecond
	stuck := make(chan []string, 1)
	el := newFakeElector()
	m := newManager(t, manager.Options{
		Elector:          el,
		LeaderStopMargin: 100 * time.Millisecond,
		ShutdownTimeout:  10 * time.Second,
		OnLeaderStuck:    func(names []string) { stuck <- names },
		Logger:           discard(),
	})
	began := make(chan struct{})
	m.AddLeader("slow", manager.RunnableFunc(func(ctx context.Context) error {
		close(began)
		<-ctx.Done()
		slow := time.NewTimer(4 * ttl) // the work's own time to finish, not synchronisation
		defer slow.Stop()
		<-slow.C
		return nil
	}))
	s := start(t, m)
	term := renewingTerm{newFakeTerm(4), ttl}
	el.grants <- term
	recv(t, began, "the leader-only runnable to start")
	if err := s.stop(t); err != nil {
		t.Fatalf("Start: %v", err)
	}
	select {
	case names := <-stuck:
		t.Fatalf("OnLeaderStuck(%q) during a graceful stop while the lease was renewed", names)
	default:
	}
	recv(t, term.resigned, "the resignation")
}

// timedElector is a fake elector that tells its timing, as the etcd and Lease electors do.
type timedElector struct {
	*fakeElector
	timing manager.Timing
}

func (e timedElector) Timing() manager.Timing { return e.timing }

// With the README's timing (TTL 2 s, renew deadline two thirds of it) and the default
// LeaderStopMargin, stuck leader-only work after a loss is reported before the lease may
// expire, not after.
func TestDefaultMarginFitsTheLease(t *testing.T) {
	timing := manager.Timing{TTL: 2 * time.Second, RenewDeadline: 2 * time.Second * 2 / 3, RetryPeriod: 2 * time.Second * 2 / 15}
	stuck := make(chan time.Time, 1)
	el := timedElector{newFakeElector(), timing}
	m := newManager(t, manager.Options{
		Elector:       el,
		OnLeaderStuck: func([]string) { stuck <- time.Now() },
		Logger:        discard(),
	})
	release, began := make(chan struct{}), make(chan struct{})
	m.AddLeader("stubborn", manager.RunnableFunc(func(ctx context.Context) error { close(began); <-release; return nil }))
	start(t, m)
	defer close(release)
	term := newFakeTerm(5)
	el.grants <- term
	recv(t, began, "the stubborn runnable to start")
	// The term is lost at its renew deadline: the last acknowledged renewal was sent
	// RenewDeadline ago, and the lease may expire TTL after it.
	term.renewed = time.Now().Add(-timing.RenewDeadline)
	term.expires = term.renewed.Add(timing.TTL)
	close(term.lost)
	at := recv(t, stuck, "OnLeaderStuck")
	if !at.Before(term.expires) {
		t.Fatalf("OnLeaderStuck called %v after the lease could expire", at.Sub(term.expires))
	}
}

// slowSaves runs a manager whose informer saves a snapshot slowly and whose runnable
// ignores its context, in a child process; it prints "ready" and waits for SIGTERM. It is
// the child of TestOverrunKeepsTheSnapshot, and skips otherwise.
func TestOverrunChild(t *testing.T) {
	dir := os.Getenv("MANAGER_TEST_SNAPSHOT_DIR")
	if dir == "" {
		t.Skip("the child process of TestOverrunKeepsTheSnapshot")
	}
	inf := slowSavingInformer(t, dir)
	m := newManager(t, manager.Options{ShutdownTimeout: 3 * time.Second, CacheStopTimeout: 2 * time.Second, Logger: discard()})
	m.AddInformer(inf)
	m.Add("stubborn", manager.RunnableFunc(func(ctx context.Context) error {
		fmt.Println("ready")
		select {} // ignores its context
	}))
	ctx, stop := manager.SignalContext(context.Background())
	err := m.Start(ctx)
	stop()
	fmt.Printf("Start: %v\n", err)
	os.Exit(0) // as a main would, with the stubborn runnable still running
}

// snapshotObjects is how many objects the child's informer saves, slowly.
const snapshotObjects = 300

// slowSavingInformer is an informer over snapshotObjects objects that saves them to dir at
// stop, taking a millisecond for each.
func slowSavingInformer(t *testing.T, dir string) *informer.Informer[string, *thing] {
	src := memory.New(thingKey, memory.Options{})
	for i := range snapshotObjects {
		src.Put(&thing{Name: fmt.Sprintf("t%04d", i), Value: "v"})
	}
	json := persist.JSON[*thing]()
	f, err := persist.New[string, *thing](dir, persist.Options[*thing]{Schema: "v1", Codec: persist.CodecFuncs[*thing]{
		CodecName: "slow-json",
		EncodeFunc: func(o *thing) ([]byte, error) {
			time.Sleep(time.Millisecond) // a slow encoder: the save's own pace
			return json.Encode(o)
		},
		DecodeFunc: json.Decode,
	}})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New[string, *thing](sameSource{src}, informer.Options[string, *thing]{
		Name: "things", Key: func(o *thing) (string, error) { return o.Name, nil }, Persist: f, Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// sameSource is a memory source with the same identity in every process, so that a
// snapshot saved by one is restored by another.
type sameSource struct{ *memory.Source[string, *thing] }

func (sameSource) SourceID(context.Context) (string, error) { return "things", nil }

// An OS process whose runnable overruns ShutdownTimeout still stops its caches after it and
// saves their snapshots in full: Start names the runnable, and the snapshot loads with every
// object. Nothing is killed: the process exits on its own after Start returned.
func TestOverrunKeepsTheSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an OS process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOverrunChild$", "-test.v")
	cmd.Env = append(os.Environ(), "MANAGER_TEST_SNAPSHOT_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for line := range lines {
		if line == "ready" {
			break
		}
	}
	t0 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var said []string
	for line := range lines {
		said = append(said, line)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child: %v; it said %q", err, said)
	}
	took := time.Since(t0)
	if !slices.ContainsFunc(said, func(l string) bool {
		return strings.HasPrefix(l, "Start: ") && strings.Contains(l, `runnable "stubborn"`)
	}) {
		t.Errorf("the child's Start did not name the stubborn runnable: %q", said)
	}
	inf := slowSavingInformer(t, dir)
	inf.AddHandler(informer.HandlerFuncs[*thing]{}, informer.HandlerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-inf.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("the informer over the snapshot did not sync")
	}
	if s := inf.Stats(); !s.Restored || s.Objects != snapshotObjects {
		t.Fatalf("after the child's stop: restored %v with %d objects; want the snapshot with all %d (the child stopped in %v, saying %q)",
			s.Restored, s.Objects, snapshotObjects, took, said)
	}
	t.Logf("the child stopped in %v, its snapshot complete", took.Round(time.Millisecond))
}

// Runnables of one group stop together: two that each need 600 ms to return fit a 1 s
// budget.
func TestRunnablesStopTogether(t *testing.T) {
	m := newManager(t, manager.Options{ShutdownTimeout: 1100 * time.Millisecond, CacheStopTimeout: 100 * time.Millisecond, Logger: discard()})
	started := make(chan struct{}, 2)
	for _, name := range []string{"a", "b"} {
		m.Add(name, manager.RunnableFunc(func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			slow := time.NewTimer(600 * time.Millisecond) // the runnable's own stop, not synchronisation
			defer slow.Stop()
			<-slow.C
			return nil
		}))
	}
	s := start(t, m)
	recv(t, started, "a runnable to start")
	recv(t, started, "a runnable to start")
	if err := s.stop(t); err != nil {
		t.Fatalf("Start: %v; want both runnables stopped within the budget", err)
	}
}
