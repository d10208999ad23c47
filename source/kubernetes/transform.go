package kubernetes

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/informer-go/informer/intern"
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

// StripAndIntern drops metadata.managedFields, as StripManagedFields does, and interns the
// strings of the object that repeat across objects (see package
// github.com/informer-go/informer/intern), so that the cache holds one copy of each
// instead of one per object. Use it as informer.Options.Transform. Like
// StripManagedFields it changes the object in place.
//
// What it interns:
//
//   - Every object: the metadata strings that repeat (namespace, generateName, the keys and
//     values of labels and annotations, owner references' apiVersion, kind, name and uid,
//     finalizers). Name, uid and resourceVersion are left alone: they differ per object.
//   - A *corev1.Pod: also every string of its spec (images, container names, commands,
//     environment, ports, volumes, node name, service account, scheduler name, restart
//     policy, tolerations: they come from the pod template and the node) and of its status
//     (phase, conditions, host IPs, QoS class, container statuses), with the reflective
//     walk of intern.Strings.
//   - An *unstructured.Unstructured: every string of the object, with intern.Strings.
//
// For another type with a heavy spec, use intern.Strings on the whole object (after
// StripManagedFields), or on the parts known to repeat.
//
// Cost: for a typical Pod (2 containers, 5 conditions, a dozen labels and annotations)
// about 10 µs, a fifth of the cost of decoding it from JSON; the benchmarks of this
// package and W6 in bench/ give the figures. It never fails.
func StripAndIntern[V metav1.Object](obj V) (V, error) {
	obj, _ = StripManagedFields(obj)
	switch o := any(obj).(type) {
	case *corev1.Pod:
		internMeta(&o.ObjectMeta)
		internPodSpec(&o.Spec)
		internPodStatus(&o.Status)
		return obj, nil
	case *unstructured.Unstructured:
		internUnstructured(o)
		return obj, nil
	case metav1.ObjectMetaAccessor:
		if m, ok := o.GetObjectMeta().(*metav1.ObjectMeta); ok {
			internMeta(m)
			return obj, nil
		}
	}
	internMetaAccessors(obj)
	return obj, nil
}

var (
	internPodSpec      = intern.Strings[*corev1.PodSpec]()
	internPodStatus    = intern.Strings[*corev1.PodStatus]()
	internUnstructured = intern.Strings[*unstructured.Unstructured]()
)

// internMeta interns the strings of m that repeat across objects.
func internMeta(m *metav1.ObjectMeta) {
	m.Namespace = intern.String(m.Namespace)
	m.GenerateName = intern.String(m.GenerateName)
	internMap(m.Labels)
	internMap(m.Annotations)
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion = intern.String(r.APIVersion)
		r.Kind = intern.String(r.Kind)
		r.Name = intern.String(r.Name)
		r.UID = types.UID(intern.String(string(r.UID)))
	}
	for i, f := range m.Finalizers {
		m.Finalizers[i] = intern.String(f)
	}
}

// internMap interns the keys and values of m in place.
func internMap(m map[string]string) {
	for k, v := range m {
		m[intern.String(k)] = intern.String(v) // an existing key: the map keeps the interned key
	}
}

// internMetaAccessors is internMeta for an object whose metadata is not a
// *metav1.ObjectMeta, through the metav1.Object getters and setters.
func internMetaAccessors(o metav1.Object) {
	o.SetNamespace(intern.String(o.GetNamespace()))
	if s := o.GetGenerateName(); s != "" {
		o.SetGenerateName(intern.String(s))
	}
	if l := o.GetLabels(); len(l) > 0 {
		internMap(l)
		o.SetLabels(l)
	}
	if a := o.GetAnnotations(); len(a) > 0 {
		internMap(a)
		o.SetAnnotations(a)
	}
	if refs := o.GetOwnerReferences(); len(refs) > 0 {
		for i := range refs {
			r := &refs[i]
			r.APIVersion, r.Kind, r.Name = intern.String(r.APIVersion), intern.String(r.Kind), intern.String(r.Name)
			r.UID = types.UID(intern.String(string(r.UID)))
		}
		o.SetOwnerReferences(refs)
	}
	if fs := o.GetFinalizers(); len(fs) > 0 {
		for i, f := range fs {
			fs[i] = intern.String(f)
		}
		o.SetFinalizers(fs)
	}
}
