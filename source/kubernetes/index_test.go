package kubernetes_test

import (
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

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
