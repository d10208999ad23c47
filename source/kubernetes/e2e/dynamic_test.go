package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"strconv"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// createCRD creates a namespaced custom resource "widgets" in a group of its own and
// waits, with an informer over CustomResourceDefinitions, until the apiserver serves it.
func createCRD(t *testing.T, c *clients) schema.GroupVersionResource {
	t.Helper()
	ctx := testContext(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	gvr := schema.GroupVersionResource{Group: "e2e-" + hex.EncodeToString(b) + ".example.com", Version: "v1", Resource: "widgets"}
	name := gvr.Resource + "." + gvr.Group
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group": gvr.Group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}

	// The CRD informer: cluster-scoped, one object, selected by a field selector.
	src, err := kubernetes.NewDynamic(c.dynamic, crdGVR, "", kubernetes.Options{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	crds, err := informer.New(src, informer.Options[string, *unstructured.Unstructured]{
		Name: "crds", Key: kubernetes.Key[*unstructured.Unstructured], ErrorHandler: errorLog(t), Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	established := make(chan struct{})
	check := func(u *unstructured.Unstructured) {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				select {
				case <-established:
				default:
					close(established)
				}
			}
		}
	}
	if _, err := crds.AddHandler(informer.HandlerFuncs[*unstructured.Unstructured]{
		AddFunc:    func(u *unstructured.Unstructured, _ bool) { check(u) },
		UpdateFunc: func(_, u *unstructured.Unstructured) { check(u) },
	}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	crdCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- crds.Run(crdCtx) }()
	defer func() { stop(); <-done }()

	if _, err := c.dynamic.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-established:
	case <-ctx.Done():
		t.Fatal("CRD not established")
	}
	return gvr
}

// TestDynamicCRD runs the dynamic adapter over a custom resource created by the test:
// create, update and delete, with a label index over unstructured objects.
func TestDynamicCRD(t *testing.T) {
	checkLeaks(t)
	c := newClients(t, envURL)
	ctx := testContext(t)
	gvr := createCRD(t, c)
	ns := namespace(t, c)
	widgets := c.dynamic.Resource(gvr).Namespace(ns)
	widget := func(name, color string, size int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvr.GroupVersion().String(),
			"kind":       "Widget",
			"metadata":   map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"color": color}},
			"spec":       map[string]any{"size": size},
		}}
	}
	pre, err := widgets.Create(ctx, widget("pre", "red", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cachedAt(t, pre.GetResourceVersion(), widgets.List)

	src, err := kubernetes.NewDynamic(c.dynamic, gvr, ns, kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(src, informer.Options[string, *unstructured.Unstructured]{
		Name:         t.Name(),
		Key:          kubernetes.Key[*unstructured.Unstructured],
		Transform:    kubernetes.StripManagedFields[*unstructured.Unstructured],
		Revision:     kubernetes.ResourceVersion[*unstructured.Unstructured],
		ErrorHandler: errorLog(t),
		Logger:       testLogger(t),
		Indexers: informer.Indexers[*unstructured.Unstructured]{
			"color": kubernetes.LabelIndex[*unstructured.Unstructured]("color"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, inf, func(w *unstructured.Unstructured) (string, string) {
		size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size")
		return metaKey(w), strconv.FormatInt(size, 10)
	})
	rec.ExpectNext(t, "add*"+ns+"/pre=1")

	w, err := widgets.Create(ctx, widget("w", "blue", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "add "+ns+"/w=1")
	if err := unstructured.SetNestedField(w.Object, int64(2), "spec", "size"); err != nil {
		t.Fatal(err)
	}
	w, err = widgets.Update(ctx, w, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "update "+ns+"/w=1→2")
	if err := inf.WaitForRevision(ctx, w.GetResourceVersion()); err != nil {
		t.Fatal(err)
	}
	got, ok := inf.Get(ns + "/w")
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); !ok || size != 2 || got.GetManagedFields() != nil || got.GetKind() != "Widget" {
		t.Errorf("Get(w) = %v (size %d), want kind Widget, spec.size 2, no managedFields", got, size)
	}
	blueSeq, _ := inf.ByIndex("color", "blue")
	if blue := maps.Collect(blueSeq); len(blue) != 1 || blue[ns+"/w"] == nil {
		t.Errorf("ByIndex(color, blue) = %v", blue)
	}
	if err := widgets.Delete(ctx, "w", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.ExpectNext(t, "delete "+ns+"/w=2")
	rec.ExpectNoMore(t)
}
