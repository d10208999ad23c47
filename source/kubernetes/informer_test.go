package kubernetes_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
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

// labelApp describes a Kubernetes object by its key and its label "app", which the tests
// set and change, for informertest's recorder.
func labelApp[V metav1.Object](o V) (key, state string) {
	k, _ := kubernetes.Key(o)
	return k, o.GetLabels()["app"]
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
	rec := informertest.NewRecorder(labelApp[*corev1.ConfigMap])
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	informertest.RunSynced(t, inf)
	rec.ExpectNextUnordered(t, "add*ns/a=web", "add*ns/b=db")
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
	rec.ExpectNext(t, "add ns/d=", "update ns/a=web→api", "delete ns/b=db")

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
	rec := informertest.NewRecorder(labelApp[*unstructured.Unstructured])
	if _, err := inf.AddHandler(rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	informertest.RunSynced(t, inf)
	rec.Expect(t, "add*ns/w1=")
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

// TestIndexes checks the namespace and label indexes through an informer over every
// namespace.
func TestIndexes(t *testing.T) {
	c := fake.NewClientset(
		cm("a", "one", map[string]string{"tier": "web"}),
		cm("a", "two", nil),
		cm("b", "three", map[string]string{"tier": "web"}),
		cm("b", "four", map[string]string{"tier": "db"}),
	)
	src := newConfigMaps(t, c, "", kubernetes.Options{DisableStreamingList: true})
	inf, err := informer.New(src, informer.Options[string, *corev1.ConfigMap]{
		Key: kubernetes.Key[*corev1.ConfigMap],
		Indexers: informer.Indexers[*corev1.ConfigMap]{
			kubernetes.NamespaceIndexName: kubernetes.NamespaceIndex[*corev1.ConfigMap](),
			"tier":                        kubernetes.LabelIndex[*corev1.ConfigMap]("tier"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	informertest.RunSynced(t, inf)
	tests := []struct {
		index, value string
		want         []string // keys, in key order
	}{
		{kubernetes.NamespaceIndexName, "a", []string{"a/one", "a/two"}},
		{kubernetes.NamespaceIndexName, "b", []string{"b/four", "b/three"}},
		{kubernetes.NamespaceIndexName, "c", nil},
		{"tier", "web", []string{"a/one", "b/three"}},
		{"tier", "db", []string{"b/four"}},
		{"tier", "", nil}, // objects without the label are not indexed
	}
	for _, tt := range tests {
		objs, err := inf.ByIndex(tt.index, tt.value)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range objs {
			k, _ := kubernetes.Key(o)
			got = append(got, k)
		}
		if len(got) != len(tt.want) {
			t.Errorf("ByIndex(%s, %q) = %v, want %v", tt.index, tt.value, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("ByIndex(%s, %q) = %v, want %v", tt.index, tt.value, got, tt.want)
				break
			}
		}
	}
}
