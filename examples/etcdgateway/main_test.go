package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/etcd"
)

// TestMain checks that no goroutine is left when the tests end, with patience: goleak
// retries for about half a second, and servers' and clients' connections can take longer
// than that to wind down on a loaded machine (the package then failed with no failing
// test); a real leak stays.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		start := time.Now()
		err := goleak.Find()
		for err != nil && time.Since(start) < 15*time.Second {
			if err = goleak.Find(); err == nil {
				fmt.Fprintf(os.Stderr, "goleak: the goroutines left took %v to end\n", time.Since(start).Round(time.Millisecond))
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left at the end of the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// stablePorts returns n loopback addresses whose ports were free a moment ago, picked
// below the kernel's ephemeral port range: an outgoing connection or a listener on port 0
// takes its port from that range, so none can take these while etcd is down between its
// stop and its restart on the same address (freePorts' ports, from the range, can be).
func stablePorts(t *testing.T, n int) []string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11000 {
				low = v
			}
		}
	}
	var addrs []string
	for try := 0; len(addrs) < n && try < 1000; try++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(low-10000)))
		if err != nil {
			continue // in use
		}
		if addr := l.Addr().String(); !slices.Contains(addrs, addr) {
			addrs = append(addrs, addr)
		}
		l.Close()
	}
	if len(addrs) < n {
		t.Fatalf("found %d free ports below %d, want %d", len(addrs), low, n)
	}
	return addrs
}

// With no flags the example runs against its embedded etcd and exits by itself.
func TestEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, options{prefix: "/config/"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "started an embedded etcd at 127.0.0.1:") {
		t.Fatalf("output:\n%s", out.String())
	}
	endpoint := strings.TrimPrefix(lines[0], "started an embedded etcd at ")
	want := []string{
		"  listed  invoices team=billing replicas=2",
		"  listed  payments team=billing replicas=3",
		"  listed  search team=discovery replicas=4",
		"synced 3 configs",
		"~ updated payments team=billing replicas=5 (was payments team=billing replicas=3)",
		"+ added   ledger team=billing replicas=1",
		"- deleted search team=discovery replicas=4",
		`! httpsource POST http://` + endpoint + `/v3/watch: cannot decode key "/config/invoices" at revision 7: unexpected end of JSON input; skipped`,
		"~ updated invoices team=billing replicas=3 (was invoices team=billing replicas=2)",
		"mirrored 3 configs at revision 8: invoices team=billing replicas=3, ledger team=billing replicas=1, payments team=billing replicas=5; 1 value(s) did not decode",
	}
	if !slices.Equal(lines[1:], want) {
		t.Errorf("output:\n%s\nwant:\n%s", strings.Join(lines[1:], "\n"), strings.Join(want, "\n"))
	}
}

// mirror is an informer of the prefix with the errors it reported.
type mirror struct {
	name string
	inf  *informer.Informer[string, *Config]
	mu   sync.Mutex
	errs []error
}

func (m *mirror) report(err error) {
	m.mu.Lock()
	m.errs = append(m.errs, err)
	m.mu.Unlock()
}

func (m *mirror) errors() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.errs)
}

func (m *mirror) reported(target error) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, err := range m.errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

func (m *mirror) state() string {
	var s []string
	for _, c := range m.inf.All() {
		s = append(s, c.String())
	}
	slices.Sort(s)
	return strings.Join(s, "; ")
}

// startMirror runs an informer over the source that newSource makes; the source's decode
// errors reach the informer through the error sink informer.New hands it.
func startMirror(t *testing.T, name string, newSource func() (informer.ListerWatcher[*Config], error)) *mirror {
	t.Helper()
	m := &mirror{name: name}
	lw, err := newSource()
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(lw, informer.Options[string, *Config]{
		Name:            name,
		Key:             func(c *Config) (string, error) { return c.Name, nil },
		ErrorHandler:    m.report,
		PageSize:        2, // several pages per list
		MinWatchTimeout: 2 * time.Second,
		Backoff:         informer.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.inf = inf
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// The gateway mirror and a source/etcd mirror of the same prefix converge to the same
// state — etcd's, with a value that does not decode left out of a list and left at its
// last good value by a watch — through changes, a transaction, a value that is not JSON
// and its fix, an etcd restart during which the history the watches need is compacted
// away, and list pages that hold a bad value.
func TestGatewayConvergesWithSourceEtcd(t *testing.T) {
	const prefix = "/config/"
	ports := stablePorts(t, 3)
	dir, clientAddr, peerAddr, sideDoor := t.TempDir(), ports[0], ports[1], ports[2]
	server, err := startEtcd(dir, clientAddr, peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() }) // after the mirrors stop (cleanups run last first)
	newClient := func(addr string) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	client := newClient(clientAddr)
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	decode := decoder(prefix)
	txn := func(c *clientv3.Client, ops ...clientv3.Op) string {
		t.Helper()
		resp, err := c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(resp.Header.Revision)
	}
	put := func(name, doc string) clientv3.Op { return clientv3.OpPut(prefix+name, doc) }
	del := func(name string) clientv3.Op { return clientv3.OpDelete(prefix + name) }
	// etcdState is what a fresh list would hold: every value under the prefix that decodes.
	etcdState := func() string {
		t.Helper()
		resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, kv := range resp.Kvs {
			if c, err := decode(kv.Key, kv.Value); err == nil {
				s = append(s, c.String())
			}
		}
		slices.Sort(s)
		return strings.Join(s, "; ")
	}
	for i := range 5 {
		txn(client, put(fmt.Sprintf("svc-%d", i), fmt.Sprintf(`{"team":"t%d","replicas":%d}`, i%2, i)))
	}

	gw := startMirror(t, "gateway", func() (informer.ListerWatcher[*Config], error) {
		return NewGatewayClient("http://"+clientAddr, prefix, decode, GatewayOptions{})
	})
	et := startMirror(t, "etcd", func() (informer.ListerWatcher[*Config], error) {
		return etcd.New(client, prefix, etcd.Decoder[*Config](decode), etcd.Options{})
	})
	mirrors := []*mirror{gw, et}
	// reach waits until both mirrors have got to rev, then checks they hold want.
	reach := func(step, rev, want string) {
		t.Helper()
		for _, m := range mirrors {
			if err := m.inf.WaitForRevision(ctx, rev); err != nil {
				t.Fatalf("%s: %s: revision %s: %v", step, m.name, rev, err)
			}
			if got := m.state(); got != want {
				t.Errorf("%s: %s holds\n%s\nwant\n%s", step, m.name, got, want)
			}
		}
	}
	// converge polls until both mirrors hold etcd's state (after a relist, when the
	// revision a mirror will reach is not known beforehand).
	converge := func(step string) {
		t.Helper()
		want := etcdState()
		deadline := time.Now().Add(60 * time.Second)
		for _, m := range mirrors {
			for m.state() != want {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s holds\n%s\nwant\n%s", step, m.name, m.state(), want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	resp, err := client.Get(ctx, prefix+"none")
	if err != nil {
		t.Fatal(err)
	}
	reach("initial list", fmt.Sprint(resp.Header.Revision), etcdState())

	// Changes, one transaction of several.
	txn(client, put("svc-1", `{"team":"t1","replicas":10}`))
	rev := txn(client, put("svc-5", `{"team":"t1","replicas":5}`), del("svc-2"), put("svc-0", `{"team":"t0","replicas":11}`))
	reach("changes", rev, etcdState())

	// A value that is not JSON: reported, and the watch leaves the last good value.
	before := etcdState()
	rev = txn(client, put("svc-3", `{"team":`))
	reach("a bad value", rev, before)
	rev = txn(client, put("svc-3", `{"team":"t1","replicas":33}`))
	reach("its fix", rev, etcdState())

	// etcd stops; while it is away from the mirrors (serving on another port), the
	// collection changes, a bad value is written, and the history is compacted past the
	// revision the mirrors' watches will resume from. Then it comes back.
	server.Close()
	side, err := startEtcd(dir, sideDoor, peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	sc := newClient(sideDoor)
	txn(sc, put("svc-0", `{"team":"t0","replicas":12}`), del("svc-1"))
	txn(sc, put("svc-6", `{"team":"t0","replicas":6}`))
	txn(sc, put("svc-4", `not json`))
	last := txn(sc, put("svc-7", `{"team":"t1","replicas":7}`))
	var lastRev int64
	fmt.Sscan(last, &lastRev)
	if _, err := sc.Compact(ctx, lastRev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	sc.Close()
	side.Close()
	if server, err = startEtcd(dir, clientAddr, peerAddr); err != nil {
		t.Fatal(err)
	}
	converge("after the restart and the compaction")
	for _, m := range mirrors {
		if m.inf.Stats().Expirations == 0 {
			t.Errorf("%s: no expired watch counted; errors %v", m.name, m.errors())
		}
	}

	// The bad value of the list is fixed.
	rev = txn(client, put("svc-4", `{"team":"t0","replicas":44}`))
	reach("the list's bad value fixed", rev, etcdState())
	if !strings.Contains(etcdState(), "svc-4 team=t0 replicas=44") {
		t.Errorf("etcd state %s", etcdState())
	}
	for _, m := range mirrors {
		if n := m.inf.Stats().DecodeErrors; n < 2 {
			t.Errorf("%s: %d decode errors counted, want at least 2 (a watch, a list)", m.name, n)
		}
		t.Logf("%s: %d lists, %d watches, %d expirations; errors:", m.name, m.inf.Stats().Lists, m.inf.Stats().Watches, m.inf.Stats().Expirations)
		for _, err := range m.errors() {
			t.Logf("  %v", err)
		}
		if m.reported(informer.ErrDecode) < 2 {
			t.Errorf("%s: errors %v: want the bad values reported", m.name, m.errs)
		}
	}
}
