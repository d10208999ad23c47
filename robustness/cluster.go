package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/informer-go/informer/source/etcd/etcdtest"
)

// memberEnv carries a member's configuration to the child process that runs it.
const memberEnv = "INFORMER_ROBUSTNESS_MEMBER"

// memberConfig is what a member process needs to start.
type memberConfig struct {
	Name, Dir        string
	Client, Peer     string // host:port
	InitialCluster   string
	Token            string
	ProgressInterval time.Duration
}

// RunMemberIfAsked runs an etcd member and exits, when the process was started as one by
// the suite (an environment variable carries its configuration); otherwise it returns at
// once. Call it first thing in TestMain: each member is a child process of the test
// binary, so that the suite can kill it with SIGKILL, as an operator's kill -9 or a
// crashed machine would.
func RunMemberIfAsked() {
	raw := os.Getenv(memberEnv)
	if raw == "" {
		return
	}
	var mc memberConfig
	if err := json.Unmarshal([]byte(raw), &mc); err != nil {
		fmt.Fprintf(os.Stderr, "robustness member: bad configuration: %v\n", err)
		os.Exit(2)
	}
	cfg := etcdtest.Config(mc.Name, mc.Dir, url.URL{Scheme: "http", Host: mc.Client}, url.URL{Scheme: "http", Host: mc.Peer})
	cfg.InitialCluster, cfg.InitialClusterToken = mc.InitialCluster, mc.Token
	cfg.TickMs, cfg.ElectionMs = 20, 200 // a lost leader is replaced in well under a second
	cfg.WatchProgressNotifyInterval = mc.ProgressInterval
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	e, err := etcdtest.Start(cfg, 2*time.Minute)
	if err != nil {
		fmt.Fprintf(os.Stderr, "robustness member %s: %v\n", mc.Name, err)
		os.Exit(1)
	}
	select {
	case <-stop:
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "robustness member %s: %v\n", mc.Name, err)
	}
	e.Close()
	os.Exit(0)
}

// member is one etcd member: a child process on fixed loopback ports (kept across
// restarts) and its proxy.
type member struct {
	cfg   memberConfig
	proxy *etcdtest.Proxy
	cmd   *exec.Cmd
	exit  chan struct{} // closed when cmd has exited
	log   *os.File
}

// Cluster is a 3-member etcd cluster of child processes, each behind an etcdtest.Proxy.
type Cluster struct {
	dir     string
	members []*member
	token   string
	backups int

	mu sync.Mutex // guards the members' processes
}

// startCluster starts n members in dir on the given addresses (2n of them: client and
// peer per member) and waits until the cluster serves.
func startCluster(dir string, addrs []string, progress time.Duration) (*Cluster, error) {
	n := len(addrs) / 2
	c := &Cluster{dir: dir, token: "robustness"}
	var peers []string
	for i := range n {
		m := &member{cfg: memberConfig{
			Name: fmt.Sprint("m", i), Dir: filepath.Join(dir, fmt.Sprint("m", i)),
			Client: addrs[2*i], Peer: addrs[2*i+1], Token: c.token, ProgressInterval: progress,
		}}
		peers = append(peers, m.cfg.Name+"=http://"+m.cfg.Peer)
		p, err := etcdtest.StartProxy(m.cfg.Client)
		if err != nil {
			c.Close()
			return nil, err
		}
		m.proxy = p
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(peers, ",")
	}
	if err := c.startAll(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Endpoints are the proxies' addresses: what the suite's clients dial.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.proxy.Addr())
	}
	return eps
}

// direct are the members' own client addresses, for the suite's bookkeeping (the history
// recorder, compaction, snapshots), which no partition must disturb.
func (c *Cluster) direct() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.cfg.Client)
	}
	return eps
}

func (c *Cluster) startAll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if err := c.spawn(m); err != nil {
			return err
		}
	}
	return c.waitServing(90 * time.Second)
}

// spawn starts m's process; it does not wait for it to serve. Under mu.
func (c *Cluster) spawn(m *member) error {
	raw, err := json.Marshal(m.cfg)
	if err != nil {
		return err
	}
	if m.log == nil {
		if m.log, err = os.Create(filepath.Join(c.dir, m.cfg.Name+".log")); err != nil {
			return err
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memberEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = m.log, m.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting etcd member %s: %w", m.cfg.Name, err)
	}
	m.cmd, m.exit = cmd, make(chan struct{})
	go func(exit chan struct{}) {
		_ = cmd.Wait()
		close(exit)
	}(m.exit)
	return nil
}

// kill ends m's process with SIGKILL (or SIGTERM when graceful) and waits for it. Under mu.
func (c *Cluster) kill(m *member, graceful bool) {
	if m.cmd == nil {
		return
	}
	if graceful {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exit:
		case <-time.After(20 * time.Second):
		}
	}
	_ = m.cmd.Process.Kill()
	<-m.exit
	m.cmd = nil
}

// client returns a client of endpoints with quick reconnection and keep-alives that
// notice a black-holed connection within about two seconds.
func client(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
}

// waitServing waits until a linearizable read succeeds through the members' own ports.
func (c *Cluster) waitServing(limit time.Duration) error {
	cli, err := client(c.direct())
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd cluster not serving after %v: %w", limit, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a server that is starting, with a deadline
	}
}

// leader returns the index of the member that leads now, or -1.
func (c *Cluster) leader(ctx context.Context) int {
	cli, err := client(c.direct())
	if err != nil {
		return -1
	}
	defer cli.Close()
	for i, m := range c.members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.cfg.Client)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// KillMember kills member i with SIGKILL and starts it again on its data directory once
// down has passed.
func (c *Cluster) KillMember(i int, down time.Duration) error {
	c.mu.Lock()
	c.kill(c.members[i], false)
	c.mu.Unlock()
	time.Sleep(down) // the member stays down this long: the failure being injected
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.spawn(c.members[i]); err != nil {
		return err
	}
	return c.waitServing(90 * time.Second)
}

// Backup saves a snapshot of the cluster's database (from member 0) and returns its
// path, as an operator's `etcdctl snapshot save` does.
func (c *Cluster) Backup(ctx context.Context) (string, error) {
	c.backups++
	path := filepath.Join(c.dir, fmt.Sprintf("backup-%d.db", c.backups))
	var last error
	for _, ep := range c.direct() {
		_, err := snapshot.NewV3(zap.NewNop()).Save(ctx, clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}, path)
		if err == nil {
			return path, nil
		}
		last = err
	}
	return "", fmt.Errorf("etcd backup: %w", last)
}

// Restore stops every member and restores each from the backup at path into a new data
// directory, with the cluster's own flags (name, peer URLs, initial cluster and token, so
// the cluster ID stays the same), as `etcdutl snapshot restore` does; bump > 0 adds
// --bump-revision bump --mark-compacted. down is called once every member is down (no
// write is accepted from then until the restored members serve). The members then start
// on the restored data.
func (c *Cluster) Restore(path string, bump uint64, down func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		c.kill(m, false)
	}
	down()
	for _, m := range c.members {
		dir := fmt.Sprintf("%s-r%d", filepath.Join(c.dir, m.cfg.Name), c.backups)
		for i := 0; ; i++ {
			if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
				break
			}
			dir = fmt.Sprintf("%s-r%d.%d", filepath.Join(c.dir, m.cfg.Name), c.backups, i)
		}
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: path, Name: m.cfg.Name, OutputDataDir: dir,
			PeerURLs: []string{"http://" + m.cfg.Peer}, InitialCluster: m.cfg.InitialCluster,
			InitialClusterToken: c.token, RevisionBump: bump, MarkCompacted: bump > 0,
		})
		if err != nil {
			return fmt.Errorf("etcdutl snapshot restore for %s: %w", m.cfg.Name, err)
		}
		m.cfg.Dir = dir
	}
	for _, m := range c.members {
		if err := c.spawn(m); err != nil {
			return err
		}
	}
	return c.waitServing(90 * time.Second)
}

// Close kills every member and stops the proxies.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		c.kill(m, true)
		if m.proxy != nil {
			m.proxy.Close()
		}
		if m.log != nil {
			m.log.Close()
		}
	}
}
