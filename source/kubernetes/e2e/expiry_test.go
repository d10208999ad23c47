package e2e

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRestartMidWatch restarts kube-apiserver under a running informer, and meanwhile
// changes the collection through another apiserver on the same etcd. The restarted
// server's watch cache starts at the current etcd revision, so the informer's revision is
// genuinely too old (410 Expired) there: the informer must list again and converge,
// reporting the delete it missed as a delete with an unknown final state.
func TestRestartMidWatch(t *testing.T) {
	checkLeaks(t)
	c := newClients(t, envURL)
	other := newClients(t, envNoCache) // the second apiserver, up while the first restarts
	ctx := testContext(t)
	ns := namespace(t, c)
	cms := c.kube.CoreV1().ConfigMaps(ns)
	for _, name := range []string{"stays", "goes", "changes"} {
		created, err := cms.Create(ctx, configMap(ns, name, nil, "1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cachedAt(t, created.ResourceVersion, cms.List)
	}
	inf, rec, _ := configMapInformer(t, c, ns, kubernetes.Options{}, nil)
	rec.ExpectNextUnordered(t, "add*"+ns+"/stays=1", "add*"+ns+"/goes=1", "add*"+ns+"/changes=1")
	if _, err := cms.Create(ctx, configMap(ns, "live", nil, "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "add "+ns+"/live=1") // the watch is up

	// Stop kube-apiserver, change the collection through the other apiserver, start
	// kube-apiserver again: no watch can have delivered these changes.
	servers(t, "stop-apiserver")
	last := goChangeNew(t, ctx, other.kube.CoreV1().ConfigMaps(ns), ns)
	servers(t, "start-apiserver")

	rec.ExpectNextUnordered(t, "delete?"+ns+"/goes=1", "update "+ns+"/changes=1→2", "add "+ns+"/new=1")
	if err := inf.WaitForRevision(ctx, last.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if got, _ := inf.Get(ns + "/changes"); got == nil || got.Data["v"] != "2" {
		t.Errorf("Get(changes) = %+v", got)
	}
	// Two ways lead here, depending on how the watch ended during shutdown: a re-watch
	// from the old revision on the restarted server (410 Expired, then a consistent list),
	// or, after a watch that ended at once with nothing, a fresh list. Either way the
	// informer must have listed again.
	st := inf.Stats()
	t.Logf("relists %d, expirations %d", st.Relists, st.Expirations)
	if st.Relists < 2 {
		t.Errorf("Relists = %d: the informer converged without listing again", st.Relists)
	}
	// Live again.
	if err := cms.Delete(ctx, "live", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "delete "+ns+"/live=1")
	rec.ExpectNoMore(t)
}

// gated lets a test hold an informer's watches: while the gate is shut, the open watch
// ends (io.EOF, as if the server had timed it out) and new ones wait.
type gated[V metav1.Object] struct {
	*kubernetes.Source[V]

	mu      sync.Mutex
	open    chan struct{} // closed while the gate is open
	current *gatedWatch[V]
	waiting chan struct{} // receives when a Watch starts waiting at the shut gate
}

func newGated[V metav1.Object](s *kubernetes.Source[V]) *gated[V] {
	g := &gated[V]{Source: s, open: make(chan struct{}), waiting: make(chan struct{}, 1)}
	close(g.open)
	return g
}

func (g *gated[V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	default:
		g.waiting <- struct{}{}
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w, err := g.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	gw := &gatedWatch[V]{Watch: w}
	g.mu.Lock()
	g.current = gw
	g.mu.Unlock()
	return gw, nil
}

// shut closes the gate and ends the open watch; it returns once the informer waits at the
// gate, with no watch open.
func (g *gated[V]) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	if g.current != nil {
		g.current.end()
	}
	g.mu.Unlock()
	<-g.waiting
}

func (g *gated[V]) reopen() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

type gatedWatch[V metav1.Object] struct {
	informer.Watch[V]
	mu    sync.Mutex
	ended bool
}

func (w *gatedWatch[V]) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	w.Watch.Stop()
}

func (w *gatedWatch[V]) Next() (informer.Event[V], error) {
	ev, err := w.Watch.Next()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return informer.Event[V]{}, io.EOF
	}
	return ev, err
}

// TestExpiredAfterCompaction compacts etcd while an informer is between two watches on
// an apiserver without a watch cache: its next watch asks for a compacted revision, the
// server answers 410 Expired, and the informer relists and converges.
func TestExpiredAfterCompaction(t *testing.T) {
	checkLeaks(t)
	c := newClients(t, envNoCache)
	ctx := testContext(t)
	ns := namespace(t, c)
	cms := c.kube.CoreV1().ConfigMaps(ns)
	for _, name := range []string{"stays", "goes"} {
		if _, err := cms.Create(ctx, configMap(ns, name, nil, "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	src, err := kubernetes.New[*corev1.ConfigMap](cms, kubernetes.Options{DisableStreamingList: true})
	if err != nil {
		t.Fatal(err)
	}
	g := newGated(src)
	inf, err := informer.New(g, informer.Options[string, *corev1.ConfigMap]{
		Name:         t.Name(),
		Key:          kubernetes.Key[*corev1.ConfigMap],
		Revision:     kubernetes.ResourceVersion[*corev1.ConfigMap],
		ErrorHandler: errorLog(t),
		Logger:       testLogger(t),
		Backoff:      informer.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, inf, configMapState)
	rec.ExpectNextUnordered(t, "add*"+ns+"/stays=1", "add*"+ns+"/goes=1")
	if _, err := cms.Create(ctx, configMap(ns, "live", nil, "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "add "+ns+"/live=1") // a watch is open and has delivered an event

	g.shut()
	if err := cms.Delete(ctx, "goes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	last, err := cms.Create(ctx, configMap(ns, "new", nil, "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev := servers(t, "compact")
	t.Logf("informer at revision %s; etcd compacted at %s", inf.Stats().ReceivedRevision, rev)
	g.reopen()

	rec.ExpectNextUnordered(t, "delete?"+ns+"/goes=1", "add "+ns+"/new=1")
	if err := inf.WaitForRevision(ctx, last.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if n := inf.Stats().Expirations; n == 0 {
		t.Error("Expirations = 0: the informer converged without seeing its revision expire")
	}
	rec.ExpectNoMore(t)
}
