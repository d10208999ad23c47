package kubernetes

import (
	"github.com/informer-go/informer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceIndexName is the conventional name of the index NamespaceIndex builds (client-go
// calls its own namespace index "namespace" too).
const NamespaceIndexName = "namespace"

// NamespaceIndex indexes objects by namespace ("" for cluster-scoped objects). It is
// single-valued and allocates nothing per object.
//
//	Indexers: informer.Indexers[*corev1.ConfigMap]{kubernetes.NamespaceIndexName: kubernetes.NamespaceIndex[*corev1.ConfigMap]()}
//	cms, err := inf.ByIndex(kubernetes.NamespaceIndexName, "kube-system")
func NamespaceIndex[V metav1.Object]() informer.Index[V] {
	return informer.IndexBy(func(obj V) (string, error) { return obj.GetNamespace(), nil })
}

// LabelIndex indexes objects by the value of one label; objects without the label are not
// in the index. Query it with the label's value:
//
//	Indexers: informer.Indexers[*corev1.Pod]{"app": kubernetes.LabelIndex[*corev1.Pod]("app.kubernetes.io/name")}
//	pods, err := inf.ByIndex("app", "web")
func LabelIndex[V metav1.Object](label string) informer.Index[V] {
	return informer.IndexByValues(func(obj V) ([]string, error) {
		if v, ok := obj.GetLabels()[label]; ok {
			return []string{v}, nil
		}
		return nil, nil
	})
}
