package e2e

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// savedState is a Persister holding one saved state in memory: the objects and the
// revision a warm restart loads. Saves are dropped.
type savedState struct {
	objs []*corev1.ConfigMap
	rev  string
}

func (s *savedState) Load(_ context.Context, _ informer.PersistedCache, add func(*corev1.ConfigMap)) (string, error) {
	for _, o := range s.objs {
		add(o)
	}
	return s.rev, nil
}

func (s *savedState) Save(context.Context, informer.PersistedCache, *informer.Snapshot[string, *corev1.ConfigMap]) error {
	return nil
}
func (s *savedState) Interval() time.Duration { return 0 }
func (s *savedState) Equal(a, b *corev1.ConfigMap) bool {
	return a.ResourceVersion == b.ResourceVersion
}

// errorCollector keeps the errors an informer reports and logs them.
type errorCollector struct {
	t    *testing.T
	mu   sync.Mutex
	errs []error
}

func (c *errorCollector) handle(err error) {
	c.t.Logf("informer error: %v", err)
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

// find returns the first error whose message holds every one of parts.
func (c *errorCollector) find(parts ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
next:
	for _, err := range c.errs {
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				continue next
			}
		}
		return err
	}
	return nil
}

// goChangeNew deletes ConfigMap "goes", sets "changes" to v=2 and creates "new" with v=1,
// in namespace ns through cms; it returns "new".
func goChangeNew(t *testing.T, ctx context.Context, cms typedcorev1.ConfigMapInterface, ns string) *corev1.ConfigMap {
	t.Helper()
	if err := cms.Delete(ctx, "goes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	chg, err := cms.Get(ctx, "changes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chg.Data["v"] = "2"
	if _, err := cms.Update(ctx, chg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := cms.Create(ctx, configMap(ns, "new", nil, "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// TestWarmRestartAheadOfServer warm-starts an informer from a saved state whose revision
// the server has not reached (its etcd restored from an older backup, say), on both
// apiservers. Measured on Kubernetes 1.36, a watch from that revision is accepted and sends
// nothing, with the watch cache and without, so the changes made since would never
// arrive; a list from it waits about 40 s with the watch cache (at once without) for
// "Too large resource version". The informer must report that the server is behind the
// saved state, list again (a paged list, or a streaming list where the server serves
// them) and converge.
func TestWarmRestartAheadOfServer(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		stream    bool
	}{{"cache", envURL, false}, {"cache-stream", envURL, true}, {"nocache", envNoCache, false}, {"nocache-stream", envNoCache, true}} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			c := newClients(t, tc.env)
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
			l, err := cms.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			saved := &savedState{rev: strconv.FormatUint(rv+1_000_000, 10)}
			for i := range l.Items {
				saved.objs = append(saved.objs, &l.Items[i])
			}
			// The server moves on, but stays far behind the saved revision.
			goChangeNew(t, ctx, cms, ns)

			errs := &errorCollector{t: t}
			inf, rec, _ := configMapInformer(t, c, ns, kubernetes.Options{DisableStreamingList: !tc.stream}, func(o *informer.Options[string, *corev1.ConfigMap]) {
				o.Persist = saved
				o.ErrorHandler = errs.handle
			})
			rec.ExpectNextUnordered(t, "add*"+ns+"/stays=1", "add*"+ns+"/goes=1", "add*"+ns+"/changes=1")
			rec.ExpectNextUnordered(t, "delete?"+ns+"/goes=1", "update "+ns+"/changes=1→2", "add "+ns+"/new=1")
			if got, _ := inf.Get(ns + "/changes"); got == nil || got.Data["v"] != "2" {
				t.Errorf("Get(changes) = %+v", got)
			}
			if err := errs.find(strconv.Quote(t.Name()), saved.rev, "behind"); err == nil {
				t.Errorf("no error reported names the informer %q, the saved revision %s and says the server is behind", t.Name(), saved.rev)
			}
			if st := inf.Stats(); st.SourceErrors == 0 || st.Relists != 1 {
				t.Errorf("SourceErrors = %d, Relists = %d; want the error counted and one list", st.SourceErrors, st.Relists)
			}
			// Live again, from the server's revisions.
			last, err := cms.Create(ctx, configMap(ns, "live", nil, "1"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rec.ExpectNext(t, "add "+ns+"/live=1")
			if err := inf.WaitForRevision(ctx, last.ResourceVersion); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestListAheadOfServer lists from a resourceVersion the server has not reached, on the
// apiserver without a watch cache (the one with a cache answers the same after a wait of
// about 40 s): "Too large resource version" must read as an expired revision, so that
// the informer lists the current state rather than retry the same list.
func TestListAheadOfServer(t *testing.T) {
	checkLeaks(t)
	c := newClients(t, envNoCache)
	ctx := testContext(t)
	ns := namespace(t, c)
	src, err := kubernetes.New[*corev1.ConfigMap](c.kube.CoreV1().ConfigMaps(ns), kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := src.List(ctx, informer.ListOptions{Consistent: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(cur.Revision, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ahead := strconv.FormatUint(n+1_000_000, 10)
	_, err = src.List(ctx, informer.ListOptions{Revision: ahead})
	if !errors.Is(err, informer.ErrExpired) || errors.Is(err, informer.ErrRetryable) {
		t.Fatalf("List from %s (server at %s) = %v; want an expired error", ahead, cur.Revision, err)
	}
	if !strings.Contains(err.Error(), "Too large resource version") {
		t.Errorf("error %q does not carry the server's message", err)
	}
}
