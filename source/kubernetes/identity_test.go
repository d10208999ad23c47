package kubernetes_test

import (
	"context"
	"strings"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// A Source's identity names the cluster, the resource, the namespace and the selectors:
// a cache saved from another of any of them is not restored.
func TestSourceID(t *testing.T) {
	ctx := context.Background()
	id := func(t *testing.T, lw informer.ListerWatcher[*corev1.ConfigMap]) string {
		t.Helper()
		si, ok := lw.(informer.SourceIdentifier)
		if !ok {
			t.Fatal("the Source does not implement informer.SourceIdentifier")
		}
		s, err := si.SourceID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	client := fake.NewClientset().CoreV1().ConfigMaps("ns")
	a := kubernetes.ClusterID(&rest.Config{Host: "https://a.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca of a")}})
	a2 := kubernetes.ClusterID(&rest.Config{Host: "https://a.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca of a, renewed")}})
	b := kubernetes.ClusterID(&rest.Config{Host: "https://b.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca of a")}})
	if a == a2 || a == b || !strings.Contains(a, "https://a.example:6443") {
		t.Fatalf("ClusterID: %q, %q (another CA), %q (another host): want three, with the host", a, a2, b)
	}
	src := func(opts kubernetes.Options) informer.ListerWatcher[*corev1.ConfigMap] {
		s, err := kubernetes.New[*corev1.ConfigMap](client, opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := id(t, src(kubernetes.Options{Cluster: a + " namespace ns"}))
	if again := id(t, src(kubernetes.Options{Cluster: a + " namespace ns"})); again != base {
		t.Fatalf("the same configuration: %q and %q", base, again)
	}
	for name, opts := range map[string]kubernetes.Options{
		"another cluster":   {Cluster: b + " namespace ns"},
		"another CA":        {Cluster: a2 + " namespace ns"},
		"a label selector":  {Cluster: a + " namespace ns", LabelSelector: "app=web"},
		"a field selector":  {Cluster: a + " namespace ns", FieldSelector: "metadata.name=x"},
		"no cluster at all": {},
	} {
		if other := id(t, src(opts)); other == base {
			t.Errorf("%s: the same identity %q", name, other)
		}
	}
	if !strings.Contains(base, "ConfigMap") {
		t.Errorf("identity %q does not name the resource", base)
	}

	// NewDynamic knows its resource and namespace.
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ids := map[string]bool{}
	for _, ns := range []string{"", "ns1", "ns2"} {
		s, err := kubernetes.NewDynamic(dyn, gvr, ns, kubernetes.Options{Cluster: a})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.SourceID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids[got] = true
	}
	if len(ids) != 3 {
		t.Fatalf("three namespaces gave %d identities: %v", len(ids), ids)
	}
}
