package e2e

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// counted counts the requests an informer makes of a Source. Embedding the Source keeps
// its CompareRevisions and StreamingList.
type counted[V metav1.Object] struct {
	*kubernetes.Source[V]
	lists, streams, refused atomic.Int32
}

func (c *counted[V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	c.lists.Add(1)
	return c.Source.List(ctx, opts)
}

func (c *counted[V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	w, err := c.Source.Watch(ctx, opts)
	if opts.SendInitialEvents {
		c.streams.Add(1)
		if errors.Is(err, informer.ErrNotSupported) {
			c.refused.Add(1)
		}
	}
	return w, err
}

func configMap(ns, name string, labels map[string]string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Data:       map[string]string{"v": data},
	}
}

// configMapInformer builds a started, synced informer over the ConfigMaps of ns.
func configMapInformer(t *testing.T, c *clients, ns string, opts kubernetes.Options, tweak func(*informer.Options[string, *corev1.ConfigMap])) (*informer.Informer[string, *corev1.ConfigMap], *informertest.Recorder[*corev1.ConfigMap], *counted[*corev1.ConfigMap]) {
	t.Helper()
	src, err := kubernetes.New[*corev1.ConfigMap](c.kube.CoreV1().ConfigMaps(ns), opts)
	if err != nil {
		t.Fatal(err)
	}
	cs := &counted[*corev1.ConfigMap]{Source: src}
	o := informer.Options[string, *corev1.ConfigMap]{
		Name:         t.Name(),
		Key:          kubernetes.Key[*corev1.ConfigMap],
		Transform:    kubernetes.StripManagedFields[*corev1.ConfigMap],
		Revision:     kubernetes.ResourceVersion[*corev1.ConfigMap],
		ErrorHandler: errorLog(t),
		Logger:       testLogger(t),
		Backoff:      informer.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
		Indexers: informer.Indexers[*corev1.ConfigMap]{
			kubernetes.NamespaceIndexName: kubernetes.NamespaceIndex[*corev1.ConfigMap](),
		},
	}
	if tweak != nil {
		tweak(&o)
	}
	inf, err := informer.New(cs, o)
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, inf, configMapState)
	return inf, rec, cs
}

// lifeOfA creates ConfigMap a with data v=1 in ns, updates it to v=2 and deletes it,
// checking after each step the one call rec must get next, and nothing more at the end;
// afterUpdate runs between the update and the delete, with the update's resourceVersion.
func lifeOfA[V any](t *testing.T, ctx context.Context, cms typedcorev1.ConfigMapInterface, ns string, rec *informertest.Recorder[V], afterUpdate func(rv string)) {
	t.Helper()
	created, err := cms.Create(ctx, configMap(ns, "a", nil, "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "add "+ns+"/a=1")
	created.Data["v"] = "2"
	updated, err := cms.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "update "+ns+"/a=1→2")
	afterUpdate(updated.ResourceVersion)
	if err := cms.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "delete "+ns+"/a=2")
	rec.ExpectNoMore(t)
}

// TestConfigMapEvents creates, updates and deletes ConfigMaps through client-go and checks
// the exact notifications, the cache and read-your-writes, over each way of listing: a
// streaming list, list+watch, and the fallback from a server that refuses streaming lists.
func TestConfigMapEvents(t *testing.T) {
	tests := []struct {
		name   string
		server string // environment variable with the apiserver's URL
		opts   kubernetes.Options
		check  func(t *testing.T, c *counted[*corev1.ConfigMap])
	}{
		{"streaming list", envURL, kubernetes.Options{}, func(t *testing.T, c *counted[*corev1.ConfigMap]) {
			if c.streams.Load() != 1 || c.refused.Load() != 0 || c.lists.Load() != 0 {
				t.Errorf("streaming lists %d (refused %d), lists %d; want 1 streaming list and no list", c.streams.Load(), c.refused.Load(), c.lists.Load())
			}
		}},
		{"list and watch", envURL, kubernetes.Options{DisableStreamingList: true}, func(t *testing.T, c *counted[*corev1.ConfigMap]) {
			if c.streams.Load() != 0 || c.lists.Load() != 1 {
				t.Errorf("streaming lists %d, lists %d; want 0 and 1", c.streams.Load(), c.lists.Load())
			}
		}},
		{"fallback from a server without WatchList", envNoCache, kubernetes.Options{}, func(t *testing.T, c *counted[*corev1.ConfigMap]) {
			if c.streams.Load() != 1 || c.refused.Load() != 1 || c.lists.Load() != 1 {
				t.Errorf("streaming lists %d (refused %d), lists %d; want 1 refused, then 1 list", c.streams.Load(), c.refused.Load(), c.lists.Load())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			c := newClients(t, tt.server)
			ctx := testContext(t)
			ns := namespace(t, c)
			cms := c.kube.CoreV1().ConfigMaps(ns)
			pre, err := cms.Create(ctx, configMap(ns, "pre", nil, "0"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cachedAt(t, pre.ResourceVersion, cms.List)

			inf, rec, counts := configMapInformer(t, c, ns, tt.opts, nil)
			rec.ExpectNext(t, "add*"+ns+"/pre=0")
			tt.check(t, counts)
			if pre, ok := inf.Get(ns + "/pre"); !ok || pre.ManagedFields != nil || pre.Data["v"] != "0" {
				t.Errorf("Get(pre) = %+v, %v; want data v=0 and no managedFields", pre, ok)
			}

			lifeOfA(t, ctx, cms, ns, rec, func(rv string) {
				// Read-your-writes: once the update's revision is in, the cache has it.
				if err := inf.WaitForRevision(ctx, rv); err != nil {
					t.Fatal(err)
				}
				if a, _ := inf.Get(ns + "/a"); a == nil || a.Data["v"] != "2" || a.ResourceVersion != rv {
					t.Errorf("Get(a) after WaitForRevision(%s) = %+v", rv, a)
				}
			})
			inSeq, _ := inf.ByIndex(kubernetes.NamespaceIndexName, ns)
			if in := maps.Collect(inSeq); len(in) != 1 || in[ns+"/pre"] == nil {
				t.Errorf("ByIndex(namespace, %s) = %v", ns, in)
			}
			if st := inf.Stats(); st.Expirations != 0 {
				t.Errorf("Expirations = %d, want 0", st.Expirations)
			}
		})
	}
}

// TestLabelSelector checks a label-selector informer: objects enter the selection when
// created or relabelled to match (an add) and leave it when relabelled away (a delete).
func TestLabelSelector(t *testing.T) {
	checkLeaks(t)
	c := newClients(t, envURL)
	ctx := testContext(t)
	ns := namespace(t, c)
	cms := c.kube.CoreV1().ConfigMaps(ns)
	web := map[string]string{"app": "web"}
	db := map[string]string{"app": "db"}
	for _, cm := range []*corev1.ConfigMap{configMap(ns, "web-0", web, "0"), configMap(ns, "db-0", db, "0")} {
		created, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cachedAt(t, created.ResourceVersion, cms.List)
	}
	inf, rec, _ := configMapInformer(t, c, ns, kubernetes.Options{LabelSelector: "app=web"}, nil)
	rec.ExpectNext(t, "add*"+ns+"/web-0=0")

	if _, err := cms.Create(ctx, configMap(ns, "web-1", web, "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, configMap(ns, "db-1", db, "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// relabel sets the labels and changes the data, so that every call is a real update.
	relabel := func(name string, labels map[string]string) {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Labels = labels
		cm.Data["v"] += "+"
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel("db-0", web)  // enters the selection
	relabel("web-0", db)  // leaves it
	relabel("db-1", db)   // changed, never selected: nothing
	relabel("web-1", web) // changed, still selected: an update
	rec.ExpectNext(t, "add "+ns+"/web-1=1", "add "+ns+"/db-0=0+", "delete "+ns+"/web-0=0", "update "+ns+"/web-1=1→1+")
	rec.ExpectNoMore(t)
	var keys []string
	for k := range inf.All() {
		keys = append(keys, k)
	}
	if len(keys) != 2 || keys[0] != ns+"/db-0" || keys[1] != ns+"/web-1" {
		t.Errorf("cache keys = %v, want db-0 and web-1", keys)
	}
}
