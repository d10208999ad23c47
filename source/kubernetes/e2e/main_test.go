// Package e2e tests source/kubernetes against a real kube-apiserver and etcd on loopback,
// built from source by servers.sh (see its header). TestMain starts the servers once for
// the whole test binary unless E2E_KUBE_URL is already set (servers started by hand with
// `eval "$(./servers.sh start)"`), and stops what it started. `go test -short` skips it all,
// and so does E2E_SKIP (make test: `make e2e` runs these tests).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	kubesource "github.com/informer-go/informer/source/kubernetes"
)

// The environment servers.sh start prints.
const (
	envState   = "E2E_STATE"
	envURL     = "E2E_KUBE_URL"
	envNoCache = "E2E_KUBE_NOCACHE_URL"
	envToken   = "E2E_KUBE_TOKEN"
	envCA      = "E2E_KUBE_CA"
	// envSkip, set to a reason, skips every test without building the servers, unless
	// servers are given by envURL (make test sets it; make e2e runs the tests).
	envSkip = "E2E_SKIP"
)

var script = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "servers.sh")
}()

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if why := os.Getenv(envSkip); why != "" && os.Getenv(envURL) == "" {
		// make test: every test is skipped (go test says "no tests to run"), nothing built.
		fmt.Fprintf(os.Stderr, "e2e: skipped (%s=%q); make e2e runs these tests\n", envSkip, why)
		if err := flag.Set("test.skip", "."); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
		return m.Run()
	}
	if testing.Short() || os.Getenv(envURL) != "" {
		return m.Run()
	}
	start := time.Now()
	cmd := exec.Command(script, "start")
	cmd.Env = append(os.Environ(), "E2E_PARENT_PID="+strconv.Itoa(os.Getpid()))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %s start: %v\n", script, err)
		return 1
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			os.Setenv(k, v)
		}
	}
	fmt.Fprintf(os.Stderr, "e2e: etcd and kube-apiserver built and started in %v (state in %s)\n",
		time.Since(start).Round(time.Millisecond), os.Getenv(envState))
	code := m.Run()
	if code != 0 {
		for _, name := range []string{"kube-apiserver", "kube-apiserver-nocache", "etcd"} {
			if b, err := os.ReadFile(filepath.Join(os.Getenv(envState), name+".log")); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				fmt.Fprintf(os.Stderr, "--- last lines of %s.log\n%s\n", name, strings.Join(lines[max(0, len(lines)-20):], "\n"))
			}
		}
	}
	stop := exec.Command(script, "stop")
	stop.Stdout, stop.Stderr = os.Stderr, os.Stderr
	if err := stop.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %s stop: %v\n", script, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// servers runs servers.sh with a command that needs the state directory (restart-apiserver,
// compact) and returns its output. It skips the test when the servers were not started
// by servers.sh.
func servers(t *testing.T, command string) string {
	t.Helper()
	if os.Getenv(envState) == "" {
		t.Skipf("%s is not set: the servers were not started by servers.sh", envState)
	}
	start := time.Now()
	out, err := exec.Command(script, command).Output()
	t.Logf("servers.sh %s: %v", command, time.Since(start).Round(time.Millisecond))
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("servers.sh %s: %v\n%s", command, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// clients are the clients of one test, on their own HTTP client so that the test can
// close its connections and then check that nothing it started is left running.
type clients struct {
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	config  *rest.Config
}

// newClients connects to the apiserver at the URL in env (envURL or envNoCache). The
// first call in a test also registers the leak check, which therefore runs after every
// other cleanup of the test: informers stopped, connections closed.
func newClients(t *testing.T, env string) *clients {
	t.Helper()
	url := os.Getenv(env)
	if url == "" {
		t.Skipf("%s is not set (go test -short, or servers not started)", env)
	}
	conns := &connTracker{}
	cfg := &rest.Config{
		Host:            url,
		BearerToken:     os.Getenv(envToken),
		TLSClientConfig: rest.TLSClientConfig{CAFile: os.Getenv(envCA)},
		QPS:             -1, // no client-side rate limit in tests
		UserAgent:       "informer-e2e",
		// A dialer of our own gives the test a transport of its own (client-go shares
		// transports between equal configs) and a list of its connections.
		Dial: conns.DialContext,
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	// Once the test's informers have stopped, close its connections: an HTTP/2
	// connection whose last stream was cancelled may not count as idle yet, and would
	// keep its read loop running.
	t.Cleanup(conns.closeAll)
	return &clients{kube: kc, dynamic: dc, config: cfg}
}

// connTracker dials TCP connections and remembers them, so that a test can close them all.
type connTracker struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *connTracker) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *connTracker) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

// checkLeaks registers, as the test's last cleanup, a check that every goroutine started
// during the test has ended. Call it first in a test.
//
// Ignored, by top function: klog's flush daemon, started when client-go is loaded. No
// other goroutine of client-go survives once the test's connections are closed.
func checkLeaks(t *testing.T) {
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// namespace creates a namespace for one test. Namespaces are not deleted: nothing runs the
// namespace controller here, and the servers are thrown away after the run.
func namespace(t *testing.T, c *clients) string {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	name = strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, name), "-")
	if len(name) > 50 {
		name = name[:50]
	}
	name += "-" + hex.EncodeToString(b)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// testContext is a context for the test's requests, cancelled when the test ends.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// metaKey is kubesource.Key without the error, for recorders of Kubernetes objects.
func metaKey[V metav1.Object](o V) string { k, _ := kubesource.Key(o); return k }

// configMapState describes a ConfigMap by its key and its data "v", which the tests set.
func configMapState(cm *corev1.ConfigMap) (key, state string) { return metaKey(cm), cm.Data["v"] }

// cachedAt waits until the apiserver's cache of list's resource has reached rv, the
// resourceVersion of a write the test made. An informer's first list asks for any state
// (resourceVersion "0"), which the cache answers at once, with a state from before the
// write if it has not caught up with it yet; a list at least as new as rv waits on the
// server until it has.
func cachedAt[L any](t *testing.T, rv string, list func(context.Context, metav1.ListOptions) (L, error)) {
	t.Helper()
	if _, err := list(testContext(t), metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}); err != nil {
		t.Fatalf("list at least as new as %s: %v", rv, err)
	}
}

// record adds to inf a recorder of its calls in informertest's notation ("add*ns/a=1",
// "update ns/a=1→2", "delete?ns/a=1", …; describe names an object by its key and renders
// what the test changes in it), runs inf until the test ends and waits, up to a minute,
// for its cache to sync. The recorder's waits allow a minute too, for a loaded machine.
func record[K comparable, V any](t *testing.T, inf *informer.Informer[K, V], describe func(V) (key, state string)) *informertest.Recorder[V] {
	t.Helper()
	rec := informertest.NewRecorder(describe).WithTimeout(time.Minute)
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if informer.WaitForCacheSync(syncCtx, inf) != nil {
		t.Fatal("informer did not sync")
	}
	return rec
}

// errorLog collects the errors an informer reports, for the test log.
func errorLog(t *testing.T) func(error) {
	return func(err error) { t.Logf("informer error: %v", err) }
}

// testLogger sends an informer's logs to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}
