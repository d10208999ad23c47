package kubernetes_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// recorder is a handler that turns notifications into lines on a channel.
type recorder[V metav1.Object] chan string

func (r recorder[V]) handler() informer.Handler[V] {
	key := func(o V) string { k, _ := kubernetes.Key(o); return k }
	return informer.HandlerFuncs[V]{
		AddFunc: func(o V, initial bool) {
			if initial {
				r <- "add " + key(o) + " initial"
				return
			}
			r <- "add " + key(o)
		},
		UpdateFunc: func(_, o V) { r <- "update " + key(o) },
		DeleteFunc: func(o V, unknown bool) {
			if unknown {
				r <- "delete " + key(o) + " unknown"
				return
			}
			r <- "delete " + key(o)
		},
	}
}

// expect reads len(want) lines and compares them, in any order if unordered.
func (r recorder[V]) expect(t *testing.T, unordered bool, want ...string) {
	t.Helper()
	var got []string
	deadline := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case l := <-r:
			got = append(got, l)
		case <-deadline:
			t.Fatalf("timed out: got %q, want %q", got, want)
		}
	}
	if unordered {
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("notifications %q, want %q", got, want)
	}
}

// run runs inf until the test ends, and waits for it to sync.
func run[K comparable, V any](t *testing.T, inf *informer.Informer[K, V]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	if informer.WaitForCacheSync(syncCtx, inf) != nil {
		t.Fatal("informer did not sync")
	}
}

// watchStarted makes the fake clientset signal each watch it opens: its tracker keeps no
// history, so a change made before the watch is open would be lost.
func watchStarted(c *fake.Clientset) <-chan struct{} {
	started := make(chan struct{}, 16)
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		wa := a.(k8stesting.WatchActionImpl)
		w, err := c.Tracker().Watch(wa.GetResource(), wa.GetNamespace(), wa.ListOptions)
		started <- struct{}{}
		return true, w, err
	})
	return started
}

// TestInformerFakeClientset runs an informer over client-go's fake clientset: initial
// list, then create, update and delete, with the helpers as options.
func TestInformerFakeClientset(t *testing.T) {
	ctx := context.Background()
	a := cm("ns", "a", map[string]string{"app": "web"})
	a.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	c := fake.NewClientset(a, cm("ns", "b", map[string]string{"app": "db"}), cm("other", "c", nil))
	started := watchStarted(c)

	src := newConfigMaps(t, c, "ns", kubernetes.Options{DisableStreamingList: true})
	inf, err := informer.New(src, informer.Options[string, *corev1.ConfigMap]{
		Key:       kubernetes.Key[*corev1.ConfigMap],
		Transform: kubernetes.StripManagedFields[*corev1.ConfigMap],
		Revision:  kubernetes.ResourceVersion[*corev1.ConfigMap],
		Indexers: informer.Indexers[*corev1.ConfigMap]{
			kubernetes.NamespaceIndexName: kubernetes.NamespaceIndex[*corev1.ConfigMap](),
			"app":                         kubernetes.LabelIndex[*corev1.ConfigMap]("app"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := make(recorder[*corev1.ConfigMap], 100)
	if _, err := inf.AddHandler(rec.handler(), informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	rec.expect(t, true, "add ns/a initial", "add ns/b initial")
	<-started

	if got, ok := inf.Get("ns/a"); !ok || got.ManagedFields != nil {
		t.Errorf("Get(ns/a) = %v, %v; want an object without managedFields", got, ok)
	}
	webSeq, err := inf.ByIndex("app", "web")
	web := maps.Collect(webSeq)
	if err != nil || len(web) != 1 || web["ns/a"] == nil {
		t.Errorf("ByIndex(app, web) = %v, %v", web, err)
	}

	cms := c.CoreV1().ConfigMaps("ns")
	if _, err := cms.Create(ctx, cm("ns", "d", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	upd := cm("ns", "a", map[string]string{"app": "api"})
	if _, err := cms.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.expect(t, false, "add ns/d", "update ns/a", "delete ns/b")

	inNSSeq, err := inf.ByIndex(kubernetes.NamespaceIndexName, "ns")
	inNS := maps.Collect(inNSSeq)
	if err != nil || len(inNS) != 2 || inNS["ns/a"] == nil || inNS["ns/d"] == nil {
		t.Errorf("ByIndex(namespace, ns) = %v, %v; want a and d", inNS, err)
	}
	if web, _ := inf.ByIndex("app", "web"); len(maps.Collect(web)) != 0 {
		t.Errorf("ByIndex(app, web) after relabel = %v", web)
	}
	if api, _ := inf.ByIndex("app", "api"); len(maps.Collect(api)) != 1 {
		t.Errorf("ByIndex(app, api) = %v", api)
	}
}

// TestInformerDynamicFake runs an informer over the dynamic fake client.
func TestInformerDynamicFake(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widget := func(ns, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("example.com/v1")
		u.SetKind("Widget")
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "WidgetList"}, widget("ns", "w1"), widget("other", "w2"))
	src, err := kubernetes.NewDynamic(dyn, gvr, "ns", kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if src.StreamingList() {
		t.Error("the dynamic fake client does not stream lists, but StreamingList() = true")
	}
	inf, err := informer.New(src, informer.Options[string, *unstructured.Unstructured]{Key: kubernetes.Key[*unstructured.Unstructured]})
	if err != nil {
		t.Fatal(err)
	}
	rec := make(recorder[*unstructured.Unstructured], 10)
	if _, err := inf.AddHandler(rec.handler(), informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	rec.expect(t, false, "add ns/w1 initial")
	if got := fmt.Sprint(slices.Collect(func(yield func(string) bool) {
		for k := range inf.All() {
			if !yield(k) {
				return
			}
		}
	})); got != "[ns/w1]" {
		t.Errorf("keys = %s", got)
	}
}
