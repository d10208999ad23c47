package metrics_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
)

// A registry outlives the informers registered on it (prometheus.DefaultRegisterer lives
// as long as the program): an informer that stopped, its series gone, is collected once
// the program drops it, though the program keeps the registry and the InformerMetrics
// of the registration.
func TestRegistryDoesNotKeepStoppedInformers(t *testing.T) {
	src := memory.New(itemName, memory.Options{})
	src.Put(&item{Name: "a"})
	reg := prometheus.NewRegistry()
	var im *metrics.InformerMetrics
	first := func() weak.Pointer[informer.Informer[string, *item]] {
		inf := newInformer(t, src, "items")
		var err error
		if im, err = metrics.RegisterInformer(reg, inf); err != nil {
			t.Fatal(err)
		}
		testkit.SyncThenStop(t, inf)
		return weak.Make(inf)
	}()
	waitUntil(t, func() bool { families, err := reg.Gather(); return err == nil && len(families) == 0 })
	if !testkit.Collected(first) {
		t.Fatal("the stopped informer is still reachable after the program dropped it: its registration keeps it")
	}
	if im.Unregister() {
		t.Error("Unregister after the stop removed the series: true, want false")
	}
	runtime.KeepAlive(reg)
}
