package kubernetes_test

import (
	"testing"

	"github.com/informer-go/informer/source/kubernetes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestStripManagedFields(t *testing.T) {
	c := cm("ns", "a", nil)
	c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	c.ResourceVersion = "12"
	got, err := kubernetes.StripManagedFields(c)
	if err != nil || got != c || got.ManagedFields != nil {
		t.Errorf("StripManagedFields = %+v, %v", got.ObjectMeta, err)
	}
	if kubernetes.ResourceVersion(got) != "12" {
		t.Errorf("ResourceVersion = %q", kubernetes.ResourceVersion(got))
	}

	u := &unstructured.Unstructured{}
	u.SetName("x")
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
	if got, _ := kubernetes.StripManagedFields(u); got.GetManagedFields() != nil {
		t.Errorf("unstructured: managedFields = %v", got.GetManagedFields())
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "managedFields"); found {
		t.Error("unstructured: metadata.managedFields still present")
	}
}
