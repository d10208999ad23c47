package robustness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// informerEnv carries a child informer's configuration to the process that runs it.
const informerEnv = "INFORMER_ROBUSTNESS_INFORMER"

// childConfig is what an informer process needs.
type childConfig struct {
	Name      string
	Endpoints []string
	Dir       string
}

// childLine is one line a child informer writes on its stdout: a state it published
// (Read) or that it is ready.
type childLine struct {
	Ready bool  `json:",omitempty"`
	Read  *Read `json:",omitempty"`
}

// RunInformerIfAsked runs an informer process and never returns, when the suite started
// the process as one; otherwise it returns at once. Call it from TestMain. The process
// runs an informer over etcd with a slow Transform and a snapshot file, and writes every
// state it publishes, saves and restores to stdout as JSON lines, for the suite to
// validate; the suite kills it with SIGKILL and starts it again (a warm restart).
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
	p := newParticipant(InformerSpec{Name: cc.Name, SlowTransform: 200 * time.Microsecond, PersistDir: cc.Dir}, cli, rec, new(atomic.Int64))
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

	mu     sync.Mutex
	latest Read // the newest snapshot it streamed
}

func (c *childInformer) start() error {
	c.name = c.cfg.Name
	ready := make(chan struct{})
	return c.startProc(informerEnv, c.cfg, filepath.Join(filepath.Dir(c.cfg.Dir), c.cfg.Name+".log"), func(b []byte) {
		var l childLine
		if err := json.Unmarshal(b, &l); err != nil {
			return // a line cut by the kill
		}
		if l.Ready {
			close(ready)
			return
		}
		if l.Read == nil {
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
