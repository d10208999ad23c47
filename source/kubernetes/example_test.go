package kubernetes_test

import (
	"context"
	"fmt"
	"log"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// An informer over the ConfigMaps of one namespace, with a label index. A real program
// passes a clientset made with kubernetes.NewForConfig; this one uses client-go's fake.
func ExampleNew() {
	clientset := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prices", Labels: map[string]string{"team": "payments"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "stock", Labels: map[string]string{"team": "warehouse"}}},
	)
	src, err := kubernetes.New[*corev1.ConfigMap](clientset.CoreV1().ConfigMaps("shop"), kubernetes.Options{
		DisableStreamingList: true, // the fake's watches cannot stream lists; a real server can
	})
	if err != nil {
		log.Fatal(err)
	}
	inf, err := informer.New(src, informer.Options[string, *corev1.ConfigMap]{
		Key:       kubernetes.Key[*corev1.ConfigMap],
		Transform: kubernetes.StripManagedFields[*corev1.ConfigMap],
		Revision:  kubernetes.ResourceVersion[*corev1.ConfigMap],
		Indexers: informer.Indexers[*corev1.ConfigMap]{
			"team": kubernetes.LabelIndex[*corev1.ConfigMap]("team"),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if informer.WaitForCacheSync(ctx, inf) != nil {
		log.Fatal("not synced")
	}

	for key, cm := range inf.All() {
		fmt.Println(key, cm.Labels["team"])
	}
	payments, _ := inf.ByIndex("team", "payments") // an iterator, in key order
	for key := range payments {
		fmt.Println("payments:", key)
	}
	// Output:
	// shop/prices payments
	// shop/stock warehouse
	// payments: shop/prices
}

// An informer over any resource through the dynamic client: here a custom resource.
func ExampleNewDynamic() {
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("example.com/v1")
	w.SetKind("Widget")
	w.SetNamespace("shop")
	w.SetName("gear")
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "WidgetList"}, w)

	src, err := kubernetes.NewDynamic(client, gvr, "shop", kubernetes.Options{})
	if err != nil {
		log.Fatal(err)
	}
	inf, err := informer.New(src, informer.Options[string, *unstructured.Unstructured]{
		Key: kubernetes.Key[*unstructured.Unstructured],
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	_ = informer.WaitForCacheSync(ctx, inf)
	obj, ok := inf.Get("shop/gear")
	fmt.Println(obj.GetKind(), obj.GetName(), ok)
	// Output:
	// Widget gear true
}

// Key gives client-go's namespace/name keys; NamespacedKey a typed one.
func ExampleKey() {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prices"}}
	k, _ := kubernetes.Key(cm)
	nk, _ := kubernetes.NamespacedKey(cm)
	fmt.Println(k, nk.Namespace, nk.Name)
	// Output:
	// shop/prices shop prices
}
