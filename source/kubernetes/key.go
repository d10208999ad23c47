package kubernetes

import (
	"cmp"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// errNoName is returned by the key functions for an object without a name.
var errNoName = errors.New("kubernetes: object has no name")

// Key returns an object's key in the form client-go uses: "namespace/name", or "name" for
// a cluster-scoped object. Use it as informer.Options.Key; it fails for an object without
// a name. Keys sort by namespace first, so a namespace's objects are adjacent in the cache.
func Key[V metav1.Object](obj V) (string, error) {
	name := obj.GetName()
	if name == "" {
		return "", errNoName
	}
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + name, nil
	}
	return name, nil
}

// NamespacedKey returns an object's key as a types.NamespacedName, a typed alternative to
// Key that needs no string building or parsing. Use it with CompareNamespacedNames as
// informer.Options.CompareKeys. It fails for an object without a name.
func NamespacedKey[V metav1.Object](obj V) (types.NamespacedName, error) {
	if obj.GetName() == "" {
		return types.NamespacedName{}, errNoName
	}
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, nil
}

// CompareNamespacedNames orders keys by namespace, then name: the order Key's strings
// sort in, for names without "/".
func CompareNamespacedNames(a, b types.NamespacedName) int {
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}
