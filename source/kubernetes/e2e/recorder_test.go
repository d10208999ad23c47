package e2e

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recorder is a handler that turns notifications into lines ("add ns/name", "update
// ns/name", "delete ns/name unknown", …) on a channel.
type recorder[V any] chan string

func newRecorder[V any]() recorder[V] { return make(recorder[V], 1000) }

// metaKey is kubernetes.Key without the error, for recorders of Kubernetes objects.
func metaKey[V metav1.Object](o V) string { k, _ := kubernetes.Key(o); return k }

// handler returns the handler that records; key names the objects in the lines.
func (r recorder[V]) handler(key func(V) string) informer.Handler[V] {
	return informer.HandlerFuncs[V]{
		AddFunc: func(o V, initial bool) {
			if initial {
				r <- "add " + key(o) + " initial"
				return
			}
			r <- "add " + key(o)
		},
		UpdateFunc: func(_, o V) { r <- "update " + key(o) },
		DeleteFunc: func(o V, unknown bool) {
			if unknown {
				r <- "delete " + key(o) + " unknown"
				return
			}
			r <- "delete " + key(o)
		},
	}
}

// expect reads len(want) notifications and compares them with want, in order, or in any
// order if unordered.
func (r recorder[V]) expect(t *testing.T, unordered bool, want ...string) {
	t.Helper()
	var got []string
	deadline := time.After(60 * time.Second)
	for len(got) < len(want) {
		select {
		case l := <-r:
			got = append(got, l)
		case <-deadline:
			t.Fatalf("timed out: got %q, want %q", got, want)
		}
	}
	if unordered {
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("notifications %q, want %q", got, want)
	}
}

// none checks that no notification is waiting.
func (r recorder[V]) none(t *testing.T) {
	t.Helper()
	select {
	case l := <-r:
		t.Fatalf("unexpected notification %q", l)
	default:
	}
}

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
