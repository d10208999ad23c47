// Command kubernetes mirrors the ConfigMaps of one namespace of a Kubernetes cluster,
// reached through the current kubeconfig, and prints every change until interrupted. The
// cache has a namespace index; after the initial sync, and then on every change, the
// command reads the namespace's ConfigMaps from it.
//
//	go run ./examples/kubernetes [-kubeconfig path] [-namespace ns] [-selector app=web]
//
// Without a cluster at hand, the end-to-end test servers of source/kubernetes do:
//
//	eval "$(source/kubernetes/e2e/servers.sh start)"
//	go run ./examples/kubernetes -namespace kube-system
//	source/kubernetes/e2e/servers.sh stop
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/informer-go/informer"
	kubesource "github.com/informer-go/informer/source/kubernetes"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file; default $KUBECONFIG or ~/.kube/config")
	namespace := flag.String("namespace", "", "namespace to mirror; default the current context's")
	selector := flag.String("selector", "", "label selector, e.g. app=web")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *selector); err != nil {
		fmt.Fprintln(os.Stderr, "kubernetes:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, selector string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	if namespace == "" {
		ns, _, err := cc.Namespace()
		if err != nil {
			return err
		}
		namespace = ns
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return err
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	src, err := kubesource.New[*corev1.ConfigMap](clientset.CoreV1().ConfigMaps(namespace), kubesource.Options{LabelSelector: selector})
	if err != nil {
		return err
	}
	inf, err := informer.New(src, informer.Options[string, *corev1.ConfigMap]{
		Name:      "configmaps",
		Key:       kubesource.Key[*corev1.ConfigMap],
		Transform: kubesource.StripManagedFields[*corev1.ConfigMap],
		Revision:  kubesource.ResourceVersion[*corev1.ConfigMap],
		Indexers: informer.Indexers[*corev1.ConfigMap]{
			kubesource.NamespaceIndexName: kubesource.NamespaceIndex[*corev1.ConfigMap](),
		},
		ErrorHandler: func(err error) { slog.Warn("informer", "err", err) },
	})
	if err != nil {
		return err
	}
	count := func() (n int) {
		cms, _ := inf.ByIndex(kubesource.NamespaceIndexName, namespace)
		for range cms {
			n++
		}
		return n
	}
	_, err = inf.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{
		AddFunc: func(cm *corev1.ConfigMap, initial bool) {
			if initial {
				fmt.Printf("existing  %s/%s rv=%s keys=%v\n", cm.Namespace, cm.Name, cm.ResourceVersion, keys(cm))
				return
			}
			fmt.Printf("added     %s/%s rv=%s keys=%v (%d in %s)\n", cm.Namespace, cm.Name, cm.ResourceVersion, keys(cm), count(), namespace)
		},
		UpdateFunc: func(old, cm *corev1.ConfigMap) {
			fmt.Printf("updated   %s/%s rv=%s changed=%v\n", cm.Namespace, cm.Name, cm.ResourceVersion, changed(old, cm))
		},
		DeleteFunc: func(cm *corev1.ConfigMap, finalStateUnknown bool) {
			how := ""
			if finalStateUnknown {
				how = " (while disconnected)"
			}
			fmt.Printf("deleted   %s/%s%s (%d in %s)\n", cm.Namespace, cm.Name, how, count(), namespace)
		},
	}, informer.HandlerOptions{Name: "printer"})
	if err != nil {
		return err
	}

	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	// If the cluster cannot be reached, the error says why (the source's last error).
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		return fmt.Errorf("ConfigMaps in %s: %w", namespace, err)
	}
	fmt.Printf("synced: %d ConfigMaps in %s; watching (Ctrl-C to stop)\n", count(), namespace)
	return <-done
}

// keys returns the sorted data keys of a ConfigMap.
func keys(cm *corev1.ConfigMap) []string {
	return slices.Sorted(maps.Keys(cm.Data))
}

// changed names the data keys that differ between two states, or "metadata".
func changed(old, cm *corev1.ConfigMap) string {
	var diff []string
	for k, v := range cm.Data {
		if ov, ok := old.Data[k]; !ok || ov != v {
			diff = append(diff, k)
		}
	}
	for k := range old.Data {
		if _, ok := cm.Data[k]; !ok {
			diff = append(diff, "-"+k)
		}
	}
	if len(diff) == 0 {
		return "metadata"
	}
	slices.Sort(diff)
	return strings.Join(diff, ",")
}
