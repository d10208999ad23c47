package e2e

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// newRecorder records an informer's calls in informertest's notation ("add*ns/a=1",
// "update ns/a=1→2", "delete?ns/a=1", …); describe names an object by its key and
// renders what the test changes in it. Its waits allow for a loaded machine.
func newRecorder[V any](describe func(V) (key, state string)) *informertest.Recorder[V] {
	return informertest.NewRecorder(describe).WithTimeout(60 * time.Second)
}

// metaKey is kubernetes.Key without the error, for recorders of Kubernetes objects.
func metaKey[V metav1.Object](o V) string { k, _ := kubernetes.Key(o); return k }

// configMapState describes a ConfigMap by its key and its data "v", which the tests set.
func configMapState(cm *corev1.ConfigMap) (key, state string) { return metaKey(cm), cm.Data["v"] }

// run runs inf until the test ends and waits for its cache to sync.
func run[K comparable, V any](t *testing.T, inf *informer.Informer[K, V]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	syncCtx, syncCancel := context.WithTimeout(ctx, 60*time.Second)
	defer syncCancel()
	if informer.WaitForCacheSync(syncCtx, inf) != nil {
		t.Fatal("informer did not sync")
	}
}

// errorLog collects the errors an informer reports, for the test log.
func errorLog(t *testing.T) func(error) {
	return func(err error) { t.Logf("informer error: %v", err) }
}

// testLogger sends an informer's logs to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}
