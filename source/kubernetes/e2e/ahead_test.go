package e2e

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestWarmRestartAheadOfServer warm-starts an informer from a saved state whose revision
// the server has not reached (its etcd restored from an older backup, say), on both
// apiservers: with the watch cache, a watch from that revision fails after a wait with
// "Too large resource version"; without it, etcd's watch from a future revision waits
// silently and would never deliver the changes made since (measured on Kubernetes 1.36:
// with the watch cache too, the watch sends nothing, and a list from that revision waits
// about 40 s for "Too large resource version"). The informer must report that the server
// is behind the saved state, list again (a paged list, or a streaming list where the
// server serves them) and converge.
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
				if _, err := cms.Create(ctx, configMap(ns, name, nil, "1"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
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
			if _, err := cms.Create(ctx, configMap(ns, "new", nil, "1"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}

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
