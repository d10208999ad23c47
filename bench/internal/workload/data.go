// Package workload runs the side-by-side workloads of issue #8 (W1–W5) through client-go's
// SharedIndexInformer and through informer.Informer[K, V], with the same *corev1.ConfigMap
// values fed by equally thin in-memory sources. It is shared by the benchmarks of the bench
// module and by cmd/compare.
package workload

import (
	"fmt"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientgofeatures "k8s.io/client-go/features"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
)

// DisableWatchList turns client-go's WatchListClient feature gate off, so that its
// reflector lists and then watches, as ours does. client-go reads its gates from the
// environment (KUBE_FEATURE_<gate>) the first time a gate is queried, so this must run
// before any client-go informer is started (TestMain, main). Every other gate keeps its
// default (InOrderInformers, InOrderInformersBatchProcess, AtomicFIFO,
// UnlockWhileProcessingFIFO: on in v0.37).
func DisableWatchList() {
	os.Setenv("KUBE_FEATURE_WatchListClient", "false")
}

func checkGates() error {
	if clientgofeatures.FeatureGates().Enabled(clientgofeatures.WatchListClient) {
		return fmt.Errorf("client-go's WatchListClient gate is on: call DisableWatchList first")
	}
	return nil
}

const (
	namespaces = 100
	apps       = 500
)

// payload is the Data of every ConfigMap: 64 bytes, shared, so that objects differ only in
// their metadata maps and strings.
var payload = string(make([]byte, 64))

// fill sets *cm to object i at resource version rev; gen (stored in Generation, which
// neither informer reads) is the number of the event that carries it, used by W3 to find
// the emit time.
func fill(cm *corev1.ConfigMap, i int, rev string, gen int64) {
	*cm = corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       fmt.Sprintf("ns-%03d", i%namespaces),
			Name:            fmt.Sprintf("obj-%07d", i),
			ResourceVersion: rev,
			Generation:      gen,
			Labels:          map[string]string{"app": fmt.Sprintf("app-%03d", (i*7919)%apps)},
		},
		Data: map[string]string{"payload": payload},
	}
}

// list builds the objects 0..n-1 at revision rev, as one array (the Items of a
// ConfigMapList).
func list(n int, rev string) []corev1.ConfigMap {
	items := make([]corev1.ConfigMap, n)
	for i := range items {
		fill(&items[i], i, rev, 0)
	}
	return items
}

// Stream is a list followed by a sequence of watch events (70 % modify, 15 % add, 15 %
// delete), built before anything is timed, in both informers' event types.
type Stream struct {
	Initial    []corev1.ConfigMap // the list
	InitialRev string             // the list's revision
	Objects    int                // objects listed
	Events     int                // watch events after the list

	cg   []watch.Event
	ours []informer.Event[*corev1.ConfigMap]
	gens []int64 // the Generation of each event's object (1-based event number)
}

// NewStream builds a list of initial objects and events events after it: testkit.W1's
// changes, the workload the pipeline benchmarks of every module run.
func NewStream(initial, events int) *Stream {
	s := &Stream{InitialRev: "1", Objects: initial, Events: events, Initial: make([]corev1.ConfigMap, initial)}
	arena := make([]corev1.ConfigMap, events)
	_, ops := testkit.W1(initial, events, func(i, rev int) *corev1.ConfigMap {
		if rev == 0 { // listed
			fill(&s.Initial[i], i, s.InitialRev, 0)
			return &s.Initial[i]
		}
		fill(&arena[rev-1], i, strconv.Itoa(rev+1), int64(rev))
		return &arena[rev-1]
	})
	s.cg = make([]watch.Event, 0, events)
	s.ours = make([]informer.Event[*corev1.ConfigMap], 0, events)
	s.gens = make([]int64, 0, events)
	live := make(map[int]bool, initial*2) // W1 changes only live ids: a change of another adds it
	for i := range initial {
		live[i] = true
	}
	for _, op := range ops {
		obj := op.Obj
		id, _ := strconv.Atoi(obj.Name[len("obj-"):])
		typ := informer.Modified
		switch {
		case op.Delete:
			typ = informer.Deleted
			delete(live, id)
		case !live[id]:
			typ = informer.Added
			live[id] = true
		}
		s.ours = append(s.ours, informer.Event[*corev1.ConfigMap]{Type: typ, Object: obj, Revision: obj.ResourceVersion})
		s.cg = append(s.cg, watch.Event{Type: cgType(typ), Object: obj})
		s.gens = append(s.gens, obj.Generation)
	}
	return s
}

func cgType(t informer.EventType) watch.EventType {
	switch t {
	case informer.Added:
		return watch.Added
	case informer.Modified:
		return watch.Modified
	case informer.Deleted:
		return watch.Deleted
	}
	return watch.Error
}
