package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer/fanout"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
	"github.com/informer-go/informer/source/etcd/etcdtest"
	httpsource "github.com/informer-go/informer/source/http"
)

// quiet drops the logs of the fan-out test's informers: their errors are collected.
var quiet = slog.New(slog.DiscardHandler)

// fanItem is what the fan-out test stores under its prefix.
type fanItem struct {
	Key string `json:"key"`
	Val string `json:"val"`
}

func fanKey(it *fanItem) (string, error) { return it.Key, nil }

// fanParity is the replicas' filter index: "even" or "odd" by the key's last digit.
func fanParity(it *fanItem) (string, error) { return parityOf(it.Key), nil }

func parityOf(key string) string {
	if (key[len(key)-1]-'0')%2 == 0 {
		return "even"
	}
	return "odd"
}
func fanDescribe(it *fanItem) (string, string) { return it.Key, it.Val }

// member is one member of an embedded etcd cluster on loopback.
type member struct {
	name               string
	dir                string
	clientURL, peerURL url.URL
	e                  *embed.Etcd
}

// cluster is a 3-member embedded etcd cluster whose members can be stopped and restarted
// on the same ports and data directories.
type cluster struct {
	t       testing.TB
	members []*member
	initial string
}

func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{t: t}
	peers := make([]string, n)
	for i := range n {
		m := &member{name: fmt.Sprint("m", i), dir: t.TempDir(), clientURL: freeURL(t), peerURL: freeURL(t)}
		c.members = append(c.members, m)
		peers[i] = m.name + "=" + m.peerURL.String()
	}
	c.initial = strings.Join(peers, ",")
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.start(m)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, m := range c.members {
			c.stop(m)
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("starting the etcd cluster: %v", err)
	}
	return c
}

// start starts a member and waits until it serves (which needs a quorum).
func (c *cluster) start(m *member) error {
	cfg := etcdtest.Config(m.name, m.dir, m.clientURL, m.peerURL)
	cfg.InitialCluster, cfg.InitialClusterToken = c.initial, "fanout"
	// Short elections, so that a stopped leader is replaced quickly.
	cfg.TickMs, cfg.ElectionMs = 20, 200
	e, err := etcdtest.Start(cfg, 60*time.Second)
	if err != nil {
		return err
	}
	m.e = e
	return nil
}

func (c *cluster) stop(m *member) {
	if m.e != nil {
		m.e.Close()
		m.e = nil
	}
}

// leader returns the member that leads now.
func (c *cluster) leader() *member {
	for _, m := range c.members {
		if m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID() {
			return m
		}
	}
	return nil
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL.Host)
	}
	return eps
}

// replica is one fan-out Server: an etcd client, an informer over the prefix and a Server
// of it on a fixed loopback address, which a restart reuses.
type replica struct {
	t      testing.TB
	c      *cluster
	prefix string
	addr   string

	cli    *clientv3.Client
	inf    *informer.Informer[string, *fanItem]
	srv    *fanout.Server[string, *fanItem]
	hs     *http.Server
	cancel context.CancelFunc
	done   chan struct{}
}

func startFanoutReplica(t testing.TB, c *cluster, prefix, addr string) *replica {
	t.Helper()
	r := &replica{t: t, c: c, prefix: prefix, addr: addr}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *replica) start() {
	t := r.t
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: r.c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	src, err := etcd.New(cli, r.prefix, func(key, value []byte) (*fanItem, error) {
		return &fanItem{Key: string(key), Val: string(value)}, nil
	}, etcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(src, informer.Options[string, *fanItem]{
		Key: fanKey, Name: "replica " + r.addr, ErrorHandler: func(error) {}, Logger: quiet,
		Indexers: informer.Indexers[*fanItem]{"parity": informer.IndexBy(fanParity)},
		Backoff:  informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fanout.NewServer(inf, fanout.ServerOptions[*fanItem]{
		Filters: []string{"parity"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", r.addr) // a restart takes the same port again
	if err != nil {
		t.Fatalf("listening on %s: %v", r.addr, err)
	}
	r.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	r.cli, r.inf, r.srv, r.cancel, r.done = cli, inf, srv, cancel, make(chan struct{})
	r.hs = &http.Server{Handler: srv}
	go func() { _ = r.hs.Serve(ln) }()
	go func() {
		defer close(r.done)
		_ = inf.Run(ctx)
	}()
	select {
	case <-srv.Synced():
	case <-time.After(60 * time.Second):
		t.Fatalf("replica %s never synced", r.addr)
	}
}

// kill stops the replica as a crash would: open watches are cut, its informer stops.
func (r *replica) kill() {
	if r.hs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.hs.Close() // cuts every connection
	_ = r.srv.Shutdown(ctx)
	r.cancel()
	<-r.done
	r.cli.Close()
	r.hs = nil
}

func (r *replica) url() string { return "http://" + r.addr + "/" }

// fanClient is one client process: an informer over a Client of one replica, with the
// others as failovers, and a handler that checks every key's life cycle.
type fanClient struct {
	c      *httpsource.Client[*fanItem]
	inf    *informer.Informer[string, *fanItem]
	life   *informertest.LifeCycle[*fanItem]
	parity string // a filtered client's filter value ("even" or "odd"); "" for the others
	mu     sync.Mutex
	errs   []error
}

// TestFanoutTierOnEtcdCluster runs the fan-out tier end to end on a real distributed
// store: a 3-member etcd cluster, informers over it behind 3 fan-out Servers, and 60
// client informers spread over the Servers, each with the other two as failovers; every
// fifth client filters by the parity of the keys (a Server's filter index). While
// a writer runs, the etcd leader is stopped and restarted, a Server is killed and started
// again, and etcd is compacted. Afterwards every client's cache equals etcd's state (a
// filtered client's, its subset), every
// key went through a valid life cycle at every client, and no client relisted: those of
// the killed Server resumed their watches at another one.
func TestFanoutTierOnEtcdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	const (
		prefix  = "/fanout/"
		nKeys   = 40
		nWrites = 400
		nClient = 60
	)
	letClusterLeftoversGo(t)
	c := startCluster(t, 3)
	writer := newClient(t, c.endpoints()...)
	ctx, cancelAll := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelAll()
	for i := range nKeys / 2 {
		if _, err := writer.Put(ctx, fmt.Sprintf("%sk%02d", prefix, i), "v0"); err != nil {
			t.Fatal(err)
		}
	}

	var replicas []*replica
	for range 3 {
		replicas = append(replicas, startFanoutReplica(t, c, prefix, testkit.StableAddr(t)))
	}
	transport := &http.Transport{MaxIdleConnsPerHost: nClient}
	t.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport}
	clients := make([]*fanClient, nClient)
	for i := range clients {
		home := i % len(replicas)
		var failover []string
		for j := 1; j < len(replicas); j++ {
			failover = append(failover, replicas[(home+j)%len(replicas)].url())
		}
		fc := &fanClient{life: informertest.NewLifeCycle(fanDescribe, informertest.LifeCycleOptions{})}
		copts := httpsource.ClientOptions[*fanItem]{HTTPClient: hc, StreamingList: true, FailoverURLs: failover}
		if i%5 == 4 { // every fifth client is filtered, by the parity of its keys
			fc.parity = [...]string{"even", "odd"}[i%2]
			copts.Filter = httpsource.Filter{Index: "parity", Value: fc.parity}
		}
		client, err := httpsource.NewClient(replicas[home].url(), copts)
		if err != nil {
			t.Fatal(err)
		}
		fc.c = client
		fc.inf, err = informer.New(client.Ordered(), informer.Options[string, *fanItem]{
			Key: fanKey, Name: fmt.Sprint("client ", i), Logger: quiet,
			Backoff: informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
			ErrorHandler: func(err error) {
				fc.mu.Lock()
				fc.errs = append(fc.errs, err)
				fc.mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fc.inf.AddHandler(fc.life, informer.HandlerOptions{Policy: informer.Block}); err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = fc.inf.Run(runCtx)
		}()
		t.Cleanup(func() { stop(); <-done })
		clients[i] = fc
	}
	for i, fc := range clients {
		select {
		case <-fc.inf.Synced():
		case <-ctx.Done():
			t.Fatalf("client %d never synced", i)
		}
	}
	relists := make([]uint64, nClient)
	for i, fc := range clients {
		relists[i] = fc.inf.Stats().Relists
	}

	// The writer: nWrites changes over nKeys keys, a delete every seventh; each write is
	// retried until etcd takes it (the leader may be gone for a moment).
	write := func(n int) int64 {
		key := fmt.Sprintf("%sk%02d", prefix, n%nKeys)
		for {
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			var rev int64
			var err error
			if n%7 == 6 {
				var resp *clientv3.DeleteResponse
				if resp, err = writer.Delete(wctx, key); err == nil {
					rev = resp.Header.Revision
				}
			} else {
				var resp *clientv3.PutResponse
				if resp, err = writer.Put(wctx, key, fmt.Sprint("v", n)); err == nil {
					rev = resp.Header.Revision
				}
			}
			cancel()
			if err == nil {
				return rev
			}
			if ctx.Err() != nil {
				t.Fatalf("write %d: %v", n, err)
			}
		}
	}
	killed := replicas[0]
	var onKilled []int // the clients whose watch was at the killed replica
	for n := range nWrites {
		switch n {
		case 80:
			leader := c.leader()
			if leader == nil {
				t.Fatal("no etcd leader")
			}
			c.stop(leader)
		case 140:
			for _, m := range c.members {
				if m.e == nil {
					if err := c.start(m); err != nil {
						t.Fatalf("restarting etcd member %s: %v", m.name, err)
					}
				}
			}
		case 200:
			for i, fc := range clients {
				if fc.c.URL() == killed.url() {
					onKilled = append(onKilled, i)
				}
			}
			killed.kill()
		case 260:
			killed.start()
		case 320:
			resp, err := writer.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := writer.Compact(ctx, resp.Header.Revision); err != nil {
				t.Fatalf("compacting etcd at %d: %v", resp.Header.Revision, err)
			}
		}
		write(n)
	}

	final, err := writer.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, kv := range final.Kvs {
		want[string(kv.Key)] = string(kv.Value)
	}
	rev := strconv.FormatInt(final.Header.Revision, 10)
	wantOf := func(fc *fanClient) map[string]string {
		if fc.parity == "" {
			return want
		}
		sub := map[string]string{}
		for k, v := range want {
			if parityOf(k) == fc.parity {
				sub[k] = v
			}
		}
		return sub
	}
	for i, fc := range clients {
		if fc.parity != "" {
			// A filtered client hears of the revisions of other keys only by bookmarks:
			// wait for its cache to hold its subset instead.
			informertest.Eventually(t, time.Minute, func() bool {
				got := map[string]string{}
				for k, v := range fc.inf.All() {
					got[k] = v.Val
				}
				return fmt.Sprint(got) == fmt.Sprint(wantOf(fc))
			}, "filtered client %d (%s keys) to hold its subset of etcd's state", i, fc.parity)
			for _, e := range fc.life.Errors() {
				t.Errorf("client %d: %s", i, e)
			}
			continue
		}
		if err := fc.inf.WaitForRevision(ctx, rev); err != nil {
			t.Fatalf("client %d: WaitForRevision(%s): %v (at %s, last error %v)", i, rev, err, fc.inf.Stats().ReceivedRevision, lastErr(fc))
		}
		got := map[string]string{}
		for k, v := range fc.inf.All() {
			got[k] = v.Val
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("client %d's cache at revision %s:\n%v\nwant etcd's\n%v", i, rev, got, want)
		}
		for _, e := range fc.life.Errors() {
			t.Errorf("client %d: %s", i, e)
		}
	}
	// The handlers run behind the caches: wait until each has been told the final state.
	informertest.Eventually(t, time.Minute, func() bool {
		for _, fc := range clients {
			if !fc.life.Converged(wantOf(fc)) {
				return false
			}
		}
		return true
	}, "every client's handler to converge to etcd's state")

	if len(onKilled) == 0 {
		t.Fatal("no client was watching the killed replica: the failover was not exercised")
	}
	total := uint64(0)
	for i, fc := range clients {
		n := fc.inf.Stats().Relists - relists[i]
		total += n
		if n != 0 {
			t.Errorf("client %d relisted %d times (errors: %v)", i, n, errsOf(fc))
		}
	}
	moved := 0
	for _, i := range onKilled {
		if clients[i].c.URL() != killed.url() {
			moved++
		}
	}
	t.Logf("%d clients; %d were watching the killed replica, %d of them moved to another; %d relists in all", nClient, len(onKilled), moved, total)
	if moved != len(onKilled) {
		t.Errorf("%d of the %d clients of the killed replica did not fail over", len(onKilled)-moved, len(onKilled))
	}
}

func lastErr(fc *fanClient) error { return fc.inf.Stats().LastError }

func errsOf(fc *fanClient) []error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]error(nil), fc.errs...)
}
