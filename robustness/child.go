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

// childInformer is an informer in a child process (RunInformerIfAsked), as the suite
// sees it: the states it streams are recorded, stamped with the restores begun by then.
type childInformer struct {
	cfg      childConfig
	rec      *Recording
	restores *atomic.Int64
	log      *os.File

	cmd    *exec.Cmd
	exit   chan struct{} // closed once the process has exited and its output is read
	ready  chan struct{}
	starts int

	mu     sync.Mutex
	latest Read // the newest snapshot it streamed
}

func (c *childInformer) start() error {
	raw, err := json.Marshal(c.cfg)
	if err != nil {
		return err
	}
	if c.log == nil {
		if c.log, err = os.Create(filepath.Join(filepath.Dir(c.cfg.Dir), c.cfg.Name+".log")); err != nil {
			return err
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), informerEnv+"="+string(raw))
	cmd.Stderr = c.log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting informer process %s: %w", c.cfg.Name, err)
	}
	c.cmd, c.exit, c.ready = cmd, make(chan struct{}), make(chan struct{})
	c.starts++
	go c.follow(bufio.NewScanner(out), c.exit, c.ready)
	select {
	case <-c.ready:
		return nil
	case <-c.exit:
		return fmt.Errorf("informer process %s exited before it synced (see %s)", c.cfg.Name, c.log.Name())
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("informer process %s did not sync in 2 minutes", c.cfg.Name)
	}
}

// follow records what the process streams until its stdout ends, then reaps it.
func (c *childInformer) follow(sc *bufio.Scanner, exit, ready chan struct{}) {
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l childLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue // a line cut by the kill
		}
		if l.Ready {
			close(ready)
			continue
		}
		if l.Read == nil {
			continue
		}
		rd := *l.Read
		rd.Restores = int(c.restores.Load())
		if rd.Kind == "snapshot" {
			c.mu.Lock()
			c.latest = rd
			c.mu.Unlock()
		}
		c.rec.AddRead(rd)
	}
	_ = c.cmd.Wait()
	close(exit)
}

// kill kills the process with SIGKILL and waits until it is gone.
func (c *childInformer) kill() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exit
	c.cmd = nil
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

func (c *childInformer) close() {
	c.kill()
	if c.log != nil {
		c.log.Close()
	}
}
