package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
	"github.com/informer-go/informer/source/etcd/etcdtest"
)

// Every test stops its etcd servers, clients and informers in t.Cleanup, so that nothing
// may be left running at the end: etcd's own goroutines included, but for one thing a
// multi-member cluster leaves behind (TestFanoutTierOnEtcdCluster): the members' HTTP
// keep-alive connections to each other's peer ports (version checks), whose server side
// etcd serves through cmux, which never ends an idle one and which no member closes.
// Those goroutines, and only they, are let go: the cluster test checks that nothing else
// is left when it starts, and names what is left when it ends (clusterLeftovers), so a
// leak of any other test, before or after it, still fails the package.
func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m, func() []goleak.Option { return clusterLeftovers })
}

// clusterLeftovers ignores the goroutines left when a multi-member cluster test ended.
var clusterLeftovers []goleak.Option

// letClusterLeftoversGo checks that no goroutine is left by the tests before t, and lets
// go those left when t and its cleanups end: a multi-member cluster's idle peer
// connections (see TestMain).
func letClusterLeftoversGo(t *testing.T) {
	t.Helper()
	if err := testkit.FindLeaks(clusterLeftovers...); err != nil {
		t.Fatalf("goroutines left by the tests before this one: %v", err)
	}
	t.Cleanup(func() { // registered first, so it runs after every other cleanup
		clusterLeftovers = append(clusterLeftovers, goleak.IgnoreCurrent())
	})
}

// ---------------------------------------------------------------------------------------
// A real etcd server, in-process.

// server is an embedded etcd on loopback ports that stay the same across Restart, on a
// data directory that survives it.
type server struct {
	t                    testing.TB
	dir                  string
	clientURL, peerURL   url.URL
	progressNotification time.Duration
	token                string // --initial-cluster-token; "" is etcd's default
	e                    *embed.Etcd
}

// serverOptions tune startServer.
type serverOptions struct {
	// ProgressNotifyInterval is etcd's --watch-progress-notify-interval; 0 means etcd's
	// default, 10 minutes. (etcd keeps it in a process-wide variable that every server
	// start sets, and each gRPC watch stream reads when it opens.)
	ProgressNotifyInterval time.Duration
}

// startServer starts an etcd server that t's cleanup stops.
func startServer(t testing.TB, opts serverOptions) *server {
	t.Helper()
	s := &server{t: t, dir: t.TempDir(), progressNotification: opts.ProgressNotifyInterval}
	var err error
	for attempt := 0; attempt < 3; attempt++ { // a picked port may be taken meanwhile
		s.clientURL, s.peerURL = freeURL(t), freeURL(t)
		if s.e, err = startEmbedded(s.dir, s.clientURL, s.peerURL, s.progressNotification, s.token); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// startEmbedded starts an etcd member on the given URLs and data directory, quiet and
// without fsync, and waits until it serves. token is the cluster token ("": etcd's
// default), which with the URLs and name makes the cluster ID.
func startEmbedded(dir string, clientURL, peerURL url.URL, progress time.Duration, token string) (*embed.Etcd, error) {
	cfg := etcdtest.Config("test", dir, clientURL, peerURL)
	if token != "" {
		cfg.InitialClusterToken = token
	}
	if progress > 0 {
		cfg.WatchProgressNotifyInterval = progress
	}
	return etcdtest.Start(cfg, 0)
}

// startWithClient starts a server with the default options and returns it with a client
// of it; both end at t's cleanup.
func startWithClient(t testing.TB) (*server, *clientv3.Client) {
	t.Helper()
	srv := startServer(t, serverOptions{})
	return srv, newClient(t, srv.Endpoint())
}

// freeURL returns an http URL on a loopback port that stays free until something listens
// on it (testkit.StableAddr).
func freeURL(t testing.TB) url.URL {
	return url.URL{Scheme: "http", Host: testkit.StableAddr(t)}
}

// Endpoint is the client address.
func (s *server) Endpoint() string { return s.clientURL.Host }

// Stop stops the server and waits until all its goroutines are gone; it may be called
// more than once.
func (s *server) Stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// Restart starts the server again on the same ports and data directory.
func (s *server) Restart() {
	s.t.Helper()
	s.Stop()
	e, err := startEmbedded(s.dir, s.clientURL, s.peerURL, s.progressNotification, s.token)
	if err != nil {
		s.t.Fatalf("restarting etcd: %v", err)
	}
	s.e = e
}

// newClient returns a client of endpoints that t's cleanup closes. It reconnects quickly
// (within a quarter of a second) after a connection is lost.
func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ---------------------------------------------------------------------------------------
// A TCP proxy that can cut the connection between a client and etcd.

// proxy is the tests' TCP proxy between a client and etcd.
type proxy = etcdtest.Proxy

// startProxy forwards a loopback port to target until t's cleanup.
func startProxy(t testing.TB, target string) *proxy { return testkit.NewProxy(t, target) }

// ---------------------------------------------------------------------------------------
// The objects the tests mirror: the key and the value as a string. A value that starts
// with "!" does not decode.

type item struct {
	Key, Value  string
	ModRevision int64 // set by decodeKV only
}

var errBadValue = errors.New("values starting with ! do not decode")

// decodeItem is a Decoder that accepts a nil value (a delete whose last value is gone).
func decodeItem(key, value []byte) (*item, error) {
	if strings.HasPrefix(string(value), "!") {
		return nil, errBadValue
	}
	return &item{Key: string(key), Value: string(value)}, nil
}

func itemKey(it *item) (string, error) { return it.Key, nil }

// ---------------------------------------------------------------------------------------
// Informers.

// waitForError waits until errs holds an error for which match is true and returns it;
// none within testkit.WaitLimit fails t with what ("a decode error").
func waitForError(t testing.TB, errs *testkit.Errors, what string, match func(error) bool) error {
	t.Helper()
	var found error
	testkit.Until(t, what, time.Millisecond, func() bool {
		for _, err := range errs.All() {
			if match(err) {
				found = err
				return true
			}
		}
		return false
	})
	return found
}

// newRecorder records a handler's calls in informertest's notation: "add*/k=v",
// "update /k=1→2", "delete?/k=v", ….
func newRecorder() *informertest.Recorder[*item] {
	return informertest.NewRecorder(func(it *item) (string, string) { return it.Key, it.Value }).WithTimeout(15 * time.Second)
}

// run runs inf until stop is called, under the context it returns; stop returns once Run
// has, and may be called again.
func run(inf *informer.Informer[string, *item]) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(ctx) }()
	return ctx, func() { cancel(); <-done }
}

// runSynced runs inf until t's cleanup (see run) and waits up to d for its cache to sync:
// it returns run's context and stop, and whether the sync came in time.
func runSynced(t testing.TB, inf *informer.Informer[string, *item], d time.Duration) (ctx context.Context, stop func(), synced bool) {
	ctx, stop = run(inf)
	t.Cleanup(stop)
	syncCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return ctx, stop, informer.WaitForCacheSync(syncCtx, inf) == nil
}

// startInformer builds an informer over src with a recording, blocking handler, runs it
// until t's cleanup, and waits for its cache to sync. opts.Key and opts.ErrorHandler are
// filled in when empty.
func startInformer(t testing.TB, src informer.ListerWatcher[*item], opts informer.Options[string, *item], errs *testkit.Errors) (*informer.Informer[string, *item], *informertest.Recorder[*item]) {
	t.Helper()
	inf, rec, _ := startStoppableInformer(t, src, opts, errs)
	return inf, rec
}

// startStoppableInformer is startInformer that also returns a stop function (run's), for
// a test that stops the informer before the test ends.
func startStoppableInformer(t testing.TB, src informer.ListerWatcher[*item], opts informer.Options[string, *item], errs *testkit.Errors) (*informer.Informer[string, *item], *informertest.Recorder[*item], func()) {
	t.Helper()
	if opts.Key == nil {
		opts.Key = itemKey
	}
	if opts.ErrorHandler == nil && errs != nil {
		opts.ErrorHandler = errs.Report
	}
	inf, err := informer.New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{Name: "recorder", Policy: informer.Block}); err != nil {
		t.Fatal(err)
	}
	_, stop, synced := runSynced(t, inf, 30*time.Second)
	if !synced {
		t.Fatal("informer did not sync")
	}
	return inf, rec, stop
}

// assertMirrors checks that the informer's cache holds exactly what etcd holds under
// prefix now (values that do not decode left out): it reads the prefix, waits until the
// informer has reached the read's revision, and compares.
func assertMirrors(t testing.TB, inf *informer.Informer[string, *item], src *etcd.Source[*item], c *clientv3.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	waitForRevision(t, ctx, inf, src, resp.Header.Revision)
	want := make(map[string]string)
	for _, kv := range resp.Kvs {
		if it, err := decodeItem(kv.Key, kv.Value); err == nil {
			want[it.Key] = it.Value
		}
	}
	got := make(map[string]string)
	for k, it := range inf.All() {
		if k != it.Key {
			t.Errorf("cache holds %q under key %q", it.Key, k)
		}
		got[k] = it.Value
	}
	if !maps.Equal(got, want) {
		t.Fatalf("cache differs from etcd at revision %d:\n%s", resp.Header.Revision, mapDiff(got, want))
	}
}

// waitForRevision waits until the informer has reached rev, asking etcd for progress
// notifications (which carry revisions reached by writes outside the prefix) meanwhile.
func waitForRevision(t testing.TB, ctx context.Context, inf *informer.Informer[string, *item], src *etcd.Source[*item], rev int64) {
	t.Helper()
	for {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := inf.WaitForRevision(short, etcd.FormatRevision(rev))
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("informer did not reach revision %d (at %s): %v", rev, inf.Stats().ReceivedRevision, err)
		}
		if src != nil {
			_ = src.RequestProgress(ctx)
		}
	}
}

func mapDiff(got, want map[string]string) string {
	var b strings.Builder
	n := 0
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			if n++; n <= 20 {
				fmt.Fprintf(&b, "  %s: got %q (present %v), want %q\n", k, g, ok, v)
			}
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			if n++; n <= 20 {
				fmt.Fprintf(&b, "  %s: got %q, not in etcd\n", k, v)
			}
		}
	}
	fmt.Fprintf(&b, "  (%d differences; cache %d keys, etcd %d)", n, len(got), len(want))
	return b.String()
}

// listHook is a Source whose List calls also go to a hook; it keeps the Source's other
// methods (RevisionComparer included), which informer.ListerWatcherFuncs would hide.
type listHook struct {
	*etcd.Source[*item]
	hook func(opts informer.ListOptions, l informer.List[*item], err error)
}

func (h listHook) List(ctx context.Context, opts informer.ListOptions) (informer.List[*item], error) {
	l, err := h.Source.List(ctx, opts)
	h.hook(opts, l, err)
	return l, err
}

// newSource is etcd.New with the test decoder; it fails the test on error.
func newSource(t testing.TB, c *clientv3.Client, prefix string, opts etcd.Options) *etcd.Source[*item] {
	t.Helper()
	src, err := etcd.New(c, prefix, decodeItem, opts)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// put writes key=value and returns the revision of the write.
func put(t testing.TB, c *clientv3.Client, key, value string, opts ...clientv3.OpOption) int64 {
	t.Helper()
	resp, err := c.Put(context.Background(), key, value, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// del deletes key and returns the revision of the delete.
func del(t testing.TB, c *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := c.Delete(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// txn commits ops in one transaction and returns its revision.
func txn(t testing.TB, c *clientv3.Client, ops ...clientv3.Op) int64 {
	t.Helper()
	resp, err := c.Txn(context.Background()).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// fill writes n keys prefix+"k%05d" = "v%d" in transactions of 128 puts.
func fill(t testing.TB, c *clientv3.Client, prefix string, n int) int64 {
	t.Helper()
	var rev int64
	ops := make([]clientv3.Op, 0, 128)
	for i := 0; i < n; i++ {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sk%05d", prefix, i), fmt.Sprintf("v%d", i)))
		if len(ops) == cap(ops) || i == n-1 {
			rev = txn(t, c, ops...)
			ops = ops[:0]
		}
	}
	return rev
}

// putMany puts n keys, fmt.Sprintf(keyFormat, i) for i in [0, n), all with value: four
// writers, transactions of 128 puts.
func putMany(tb testing.TB, c *clientv3.Client, keyFormat string, n int, value string) {
	tb.Helper()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			ops := make([]clientv3.Op, 0, 128)
			for i := w; i < n; i += 4 {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf(keyFormat, i), value))
				if len(ops) == cap(ops) || i+4 >= n {
					if _, err := c.Txn(context.Background()).Then(ops...).Commit(); err != nil {
						tb.Error(err)
						return
					}
					ops = ops[:0]
				}
			}
		})
	}
	wg.Wait()
}
