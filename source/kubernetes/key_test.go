package kubernetes_test

import (
	"slices"
	"testing"

	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestKey(t *testing.T) {
	tests := []struct {
		obj     *corev1.ConfigMap
		key     string
		typed   types.NamespacedName
		failing bool
	}{
		{cm("ns", "a", nil), "ns/a", types.NamespacedName{Namespace: "ns", Name: "a"}, false},
		{cm("", "cluster-wide", nil), "cluster-wide", types.NamespacedName{Name: "cluster-wide"}, false},
		{cm("ns", "", nil), "", types.NamespacedName{}, true},
	}
	for _, tt := range tests {
		k, err := kubernetes.Key(tt.obj)
		if k != tt.key || (err != nil) != tt.failing {
			t.Errorf("Key(%s/%s) = %q, %v", tt.obj.Namespace, tt.obj.Name, k, err)
		}
		nk, err := kubernetes.NamespacedKey(tt.obj)
		if nk != tt.typed || (err != nil) != tt.failing {
			t.Errorf("NamespacedKey(%s/%s) = %v, %v", tt.obj.Namespace, tt.obj.Name, nk, err)
		}
	}
}

func TestCompareNamespacedNames(t *testing.T) {
	keys := []types.NamespacedName{{Namespace: "b", Name: "a"}, {Name: "z"}, {Namespace: "a", Name: "b"}, {Namespace: "a", Name: "a"}}
	slices.SortFunc(keys, kubernetes.CompareNamespacedNames)
	want := []types.NamespacedName{{Name: "z"}, {Namespace: "a", Name: "a"}, {Namespace: "a", Name: "b"}, {Namespace: "b", Name: "a"}}
	if !slices.Equal(keys, want) {
		t.Errorf("sorted = %v, want %v", keys, want)
	}
}
