package robustness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/etcd/election"
	httpsource "github.com/informer-go/informer/source/http"
)

// informerEnv carries a child informer's configuration to the process that runs it.
const informerEnv = "INFORMER_ROBUSTNESS_INFORMER"

// childConfig is what an informer process needs.
type childConfig struct {
	Name      string
	Endpoints []string
	Dir       string
	DiskFault string // the fault of its snapshot file's disk: FailSlowDisk, FailDiskFull or "" (none)
	DiskSeed  uint64 // draws the faults
}

// childLine is one line a child informer writes on its stdout: a state it published
// (Read), a step of its snapshot file (File), that a write of the file stalls on a slow
// disk (Stalled), or that it is ready.
type childLine struct {
	Ready   bool       `json:",omitempty"`
	Read    *Read      `json:",omitempty"`
	File    *FileEvent `json:",omitempty"`
	Stalled bool       `json:",omitempty"`
}

// RunInformerIfAsked runs an informer process and never returns, when the suite started
// the process as one; otherwise it returns at once. Call it from TestMain. The process
// runs an informer over etcd with a slow Transform and a snapshot file, and writes every
// state it publishes, saves and restores to stdout as JSON lines, for the suite to
// validate; the suite kills it with SIGKILL and starts it again (a warm restart), also
// on a slow or full disk.
func RunInformerIfAsked() {
	raw := os.Getenv(informerEnv)
	if raw == "" {
		return
	}
	var cc childConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		fmt.Fprintf(os.Stderr, "robustness informer: bad configuration: %v\n", err)
		os.Exit(2)
	}
	cli, err := client(cc.Endpoints)
	if err != nil {
		fmt.Fprintf(os.Stderr, "robustness informer: %v\n", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(l childLine) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(l)
	}
	rec := newRecording(1 << 30)
	rec.sink = func(rd Read) { emit(childLine{Read: &rd}) }
	rec.fileSink = func(ev FileEvent) { emit(childLine{File: &ev}) }
	spec := InformerSpec{Name: cc.Name, SlowTransform: 200 * time.Microsecond, PersistDir: cc.Dir,
		WrapWriter: faultyDisk(cc.DiskFault, cc.DiskSeed, func() { emit(childLine{Stalled: true}) })}
	p := newParticipant(spec, cli, rec, new(atomic.Int64))
	if err := p.start(prefix); err != nil {
		fmt.Fprintf(os.Stderr, "robustness informer: %v\n", err)
		os.Exit(1)
	}
	emit(childLine{Ready: true})
	select {} // until killed
}

// childProc is a child process of the suite: the test binary again, told by an
// environment variable what to run, which writes JSON lines on its stdout and runs until
// it is killed.
type childProc struct {
	name   string
	log    *os.File
	cmd    *exec.Cmd
	exit   chan struct{} // closed once the process has exited and its output is read
	starts int
}

// startProc starts the process with env set to cfg in JSON, its stderr to logPath, and
// hands each line of its stdout to line, on a goroutine of its own, until it exits. It
// returns once ready is closed (by line), or with an error if the process exits first or
// is not ready in 2 minutes.
func (c *childProc) startProc(env string, cfg any, logPath string, line func([]byte), ready <-chan struct{}) error {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if c.log == nil {
		if c.log, err = os.Create(logPath); err != nil {
			return err
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(raw))
	cmd.Stderr = c.log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting process %s: %w", c.name, err)
	}
	exit := make(chan struct{})
	c.cmd, c.exit = cmd, exit
	c.starts++
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			line(sc.Bytes())
		}
		_ = cmd.Wait()
		close(exit)
	}()
	select {
	case <-ready:
		return nil
	case <-exit:
		return fmt.Errorf("process %s exited before it was ready (see %s)", c.name, c.log.Name())
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("process %s was not ready in 2 minutes", c.name)
	}
}

// kill kills the process with SIGKILL and waits until it is gone.
func (c *childProc) kill() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exit
	c.cmd = nil
}

// describe says what the process went through, for the report.
func (c *childProc) describe() string {
	return fmt.Sprintf("%s (a process): %d start(s)", c.name, c.starts)
}

// close kills the process and closes its log.
func (c *childProc) close() {
	c.kill()
	if c.log != nil {
		c.log.Close()
	}
}

// childInformer is an informer in a child process (RunInformerIfAsked), as the suite
// sees it: the states it streams are recorded, stamped with the restores begun by then.
type childInformer struct {
	childProc
	cfg      childConfig
	rec      *Recording
	restores *atomic.Int64
	stalls   chan struct{} // signalled (without blocking) when a write stalls on a slow disk

	mu     sync.Mutex
	latest Read // the newest snapshot it streamed
}

// newChildInformer returns the informer process name, not started, which watches etcd
// at endpoints, keeps its snapshot file in dir and records what it streams in rec.
func newChildInformer(name string, endpoints []string, dir string, rec *Recording, restores *atomic.Int64) *childInformer {
	return &childInformer{cfg: childConfig{Name: name, Endpoints: endpoints, Dir: dir}, rec: rec, restores: restores, stalls: make(chan struct{}, 1)}
}

func (c *childInformer) start() error {
	c.name = c.cfg.Name
	ready := make(chan struct{})
	return c.startProc(informerEnv, c.cfg, filepath.Join(filepath.Dir(c.cfg.Dir), c.cfg.Name+".log"), func(b []byte) {
		var l childLine
		if err := json.Unmarshal(b, &l); err != nil {
			return // a line cut by the kill
		}
		switch {
		case l.Ready:
			close(ready)
			return
		case l.Stalled:
			select {
			case c.stalls <- struct{}{}:
			default:
			}
			return
		case l.File != nil:
			c.rec.AddFile(*l.File)
			return
		case l.Read == nil:
			return
		}
		rd := *l.Read
		rd.Restores = int(c.restores.Load())
		if rd.Kind == "snapshot" {
			c.mu.Lock()
			c.latest = rd
			c.mu.Unlock()
		}
		c.rec.AddRead(rd)
	}, ready)
}

// stallWait is how long a slow disk's failure waits for a write to stall before it
// kills the process anyway.
const stallWait = 10 * time.Second

// onFaultyDisk kills the process and starts it again warm on a slow or full disk (kind
// FailSlowDisk or FailDiskFull, its faults drawn from seed), lets it run for hold, and
// kills it again: on a slow disk, once a write of its snapshot file stalls mid-file, if
// one does within stallWait before ctx ends. Then it starts the process on a healthy
// disk, warm from whatever the kills left. It reports whether a kill landed mid-write.
func (c *childInformer) onFaultyDisk(ctx context.Context, kind string, seed uint64, hold func()) (midWrite bool, err error) {
	c.kill()
	c.cfg.DiskFault, c.cfg.DiskSeed = kind, seed
	err = c.start()
	c.cfg.DiskFault = ""
	if err != nil {
		return false, err
	}
	hold()
	if kind == FailSlowDisk {
		select { // a stall seen before now may be over
		case <-c.stalls:
		default:
		}
		select {
		case <-c.stalls:
			midWrite = true
		case <-ctx.Done():
		case <-time.After(stallWait):
		}
	}
	c.kill()
	return midWrite, c.start()
}

// waitFor waits until the process has published a state at rev or later, at most limit,
// and returns it.
func (c *childInformer) waitFor(rev int64, limit time.Duration) (Read, error) {
	deadline := time.Now().Add(limit)
	for {
		c.mu.Lock()
		rd := c.latest
		c.mu.Unlock()
		if rd.Label >= rev {
			return rd, nil
		}
		if time.Now().After(deadline) {
			return rd, fmt.Errorf("informer process %s did not reach revision %d in %v (at %d)", c.cfg.Name, rev, limit, rd.Label)
		}
		time.Sleep(10 * time.Millisecond) // polling the process's stream with a deadline
	}
}

// controllerEnv carries a controller replica's configuration to the process that runs it.
const controllerEnv = "INFORMER_ROBUSTNESS_CONTROLLER"

// controllerTTL is the controllers' election TTL: a killed leader's term ends within it.
const controllerTTL = 2 * time.Second

// controllerConfig is what a controller process needs.
type controllerConfig struct {
	Index     int      // the replica: identity controller-<Index>, key /controller/out-<Index>
	Endpoints []string // etcd, through the proxies
	Fanout    []string // the fan-out replicas' URLs, home first: its cache's source
}

// key is the key the replica writes.
func (cc controllerConfig) key() string { return fmt.Sprint("/controller/out-", cc.Index) }

// controllerLine is one line a controller process writes on its stdout: that it is
// ready, or a write etcd accepted.
type controllerLine struct {
	Ready bool        `json:",omitempty"`
	Write *timedWrite `json:",omitempty"`
}

// timedWrite is a fenced write a controller process had accepted, with the wall-clock
// times (Unix nanoseconds) it was sent and accepted, which the suite places among the
// restores it began.
type timedWrite struct {
	Term, Rev      int64
	Key            string
	Sent, Accepted int64
}

// RunControllerIfAsked runs a controller replica and never returns, when the suite
// started the process as one; otherwise it returns at once. Call it from TestMain. The
// replica (manager package) elects a leader in etcd with the others; the leader runs a
// reconcile loop that reads an informer's cache (a client of the fan-out tier) and writes
// what it computed back to etcd through election.Fenced, so that a write of a leader that
// lost its term is refused. Every write etcd accepted goes to stdout as a JSON line; the
// suite kills the process with SIGKILL and starts it again.
func RunControllerIfAsked() {
	raw := os.Getenv(controllerEnv)
	if raw == "" {
		return
	}
	var cc controllerConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		exitWith(2, "bad configuration: %v", err)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(l controllerLine) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(l)
	}
	cli, err := client(cc.Endpoints)
	if err != nil {
		exitWith(1, "%v", err)
	}
	c, err := httpsource.NewClient(cc.Fanout[0], httpsource.ClientOptions[*Item]{StreamingList: true, FailoverURLs: cc.Fanout[1:]})
	if err != nil {
		exitWith(1, "%v", err)
	}
	name := fmt.Sprint("controller-", cc.Index)
	discard := slog.New(slog.DiscardHandler)
	cache, err := informer.New(c.Ordered(), informer.Options[string, *Item]{
		Key: func(it *Item) (string, error) { return it.Key, nil }, Name: name + "-cache", Logger: discard,
	})
	if err != nil {
		exitWith(1, "%v", err)
	}
	ctx := context.Background()
	go func() { _ = cache.Run(ctx) }()
	if err := informer.WaitForCacheSync(ctx, cache); err != nil {
		exitWith(1, "%v", err)
	}
	e, err := election.New(clientv3.Config{Endpoints: cc.Endpoints, DialTimeout: 5 * time.Second, DialKeepAliveTime: time.Second,
		DialKeepAliveTimeout: time.Second, Logger: zap.NewNop()},
		election.Options{Prefix: "/election/robustness", Identity: name, TTL: controllerTTL, Logger: discard})
	if err != nil {
		exitWith(1, "%v", err)
	}
	m, err := manager.New(manager.Options{Elector: e, Logger: discard, ShutdownTimeout: 10 * time.Second,
		CampaignRetry: 100 * time.Millisecond})
	if err != nil {
		exitWith(1, "%v", err)
	}
	key := cc.key()
	reconcile := func(ctx context.Context) error {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			t, _ := manager.TermFrom(ctx)
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			sent := time.Now().UnixNano()
			resp, err := election.Fenced(wctx, cli, clientv3.OpPut(key, fmt.Sprintf("term %d saw %d keys", t.Value, cache.Len())))
			wcancel()
			if err == nil {
				emit(controllerLine{Write: &timedWrite{Term: t.Value, Rev: resp.Header.Revision, Key: key, Sent: sent, Accepted: time.Now().UnixNano()}})
			}
		}
	}
	if err := m.AddLeader("reconcile", manager.RunnableFunc(reconcile)); err != nil {
		exitWith(1, "%v", err)
	}
	emit(controllerLine{Ready: true})
	_ = m.Start(ctx)
	select {} // until killed
}

// exitWith ends a child process with code after a line on stderr.
func exitWith(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "robustness child: "+format+"\n", args...)
	os.Exit(code)
}

// controllers are the replicas of the leader-only controller, each a process of its own
// (RunControllerIfAsked). Every write etcd accepted is recorded with its term, revision
// and epoch.
type controllers struct {
	cfgs  []controllerConfig
	procs []*childProc
	dir   string
	rec   *Recording
	epoch func(sent, accepted int64) (int, bool) // the epoch of a write, false if a restore overlapped it

	mu         sync.Mutex
	lastWriter int           // the replica whose accepted write came last: the leader; -1 before
	lastTerm   []int64       // the newest term each replica wrote in
	wrote      chan struct{} // signalled (without blocking) after each write
}

// startControllers starts n replicas whose elections and writes go through endpoints and
// whose caches are clients of the fan-out replicas at fanout; dir receives their logs.
func startControllers(n int, dir string, endpoints, fanout []string, rec *Recording, epoch func(sent, accepted int64) (int, bool)) (*controllers, error) {
	c := &controllers{dir: dir, rec: rec, epoch: epoch, lastWriter: -1, lastTerm: make([]int64, n), wrote: make(chan struct{}, 1)}
	for i := range n {
		urls := slices.Concat(fanout[i%len(fanout):], fanout[:i%len(fanout)]) // each its own home
		c.cfgs = append(c.cfgs, controllerConfig{Index: i, Endpoints: endpoints, Fanout: urls})
		c.procs = append(c.procs, &childProc{name: fmt.Sprint("controller-", i)})
		if err := c.start(i); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// start starts replica i's process.
func (c *controllers) start(i int) error {
	ready := make(chan struct{})
	return c.procs[i].startProc(controllerEnv, c.cfgs[i], filepath.Join(c.dir, c.procs[i].name+".log"), func(b []byte) {
		var l controllerLine
		if err := json.Unmarshal(b, &l); err != nil {
			return // a line cut by the kill
		}
		if l.Ready {
			close(ready)
		}
		if w := l.Write; w != nil {
			if epoch, ok := c.epoch(w.Sent, w.Accepted); ok {
				c.rec.AddWrite(FencedWrite{Term: w.Term, Rev: w.Rev, Key: w.Key, Epoch: epoch, At: time.Unix(0, w.Accepted)})
			}
			c.mu.Lock()
			c.lastWriter, c.lastTerm[i] = i, max(c.lastTerm[i], w.Term)
			c.mu.Unlock()
			select {
			case c.wrote <- struct{}{}:
			default:
			}
		}
	}, ready)
}

// killLeader kills the leader's process with SIGKILL (recorded for CheckTakeover), waits
// at most limit until another replica writes in a newer term, and starts the killed one
// again after hold.
func (c *controllers) killLeader(hold func(), limit time.Duration) error {
	c.mu.Lock()
	i := c.lastWriter
	c.mu.Unlock()
	if i < 0 {
		return nil // no leader has written yet
	}
	c.procs[i].kill()
	c.mu.Lock()
	term := c.lastTerm[i]
	c.mu.Unlock()
	c.rec.AddKill(ControllerKill{Key: c.cfgs[i].key(), Term: term, At: time.Now()})
	deadline := time.After(limit)
	for !c.tookOver(i, term) {
		select {
		case <-c.wrote:
		case <-deadline:
			return c.start(i) // CheckTakeover reports it
		}
	}
	hold()
	return c.start(i)
}

// tookOver reports whether a replica other than i wrote in a term newer than term.
func (c *controllers) tookOver(i int, term int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for j, t := range c.lastTerm {
		if j != i && t > term {
			return true
		}
	}
	return false
}

// stop kills the replicas.
func (c *controllers) stop() {
	for _, p := range c.procs {
		p.close()
	}
}
