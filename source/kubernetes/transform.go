package kubernetes

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StripManagedFields removes metadata.managedFields (server-side apply's field ownership
// records) from an object and returns it. Informers rarely need them, and they are often
// the largest part of a small object; use StripManagedFields as informer.Options.Transform
// to keep them out of the cache.
//
// It changes the object in place, which is safe as a Transform: the informer calls it on
// objects freshly decoded from the server, before anything else holds them. Do not call it
// on an object from an informer's cache.
func StripManagedFields[V metav1.Object](obj V) (V, error) {
	if obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	return obj, nil
}

// ResourceVersion returns an object's resourceVersion. Use it as informer.Options.Revision,
// so that an object listed again unchanged (after a reconnect) counts as a resync, not as
// an update.
func ResourceVersion[V metav1.Object](obj V) string { return obj.GetResourceVersion() }
