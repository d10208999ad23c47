package manager

import (
	"testing"
	"time"

	"github.com/informer-go/informer"
)

// Progress is counted from the observation before the one that saw it, since it came
// after that one: a source that then goes silent is not ready within the bound of its
// last progress, however far apart the observations (the progress requests are a
// quarter of the bound apart).
func TestProgressCountedFromTheObservationBefore(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var h sourceHealth
	h.observe(informer.Stats{Synced: true, Relists: 1, ReceivedRevision: "5"}, t0)
	h.observe(informer.Stats{Synced: true, Relists: 1, ReceivedRevision: "5"}, t0.Add(time.Second))
	h.observe(informer.Stats{Synced: true, Relists: 1, Added: 1, ReceivedRevision: "6"}, t0.Add(6*time.Second))
	if want := t0.Add(time.Second); !h.progressAt.Equal(want) {
		t.Fatalf("progress seen at +6s after an observation at +1s counted from %v; want %v", h.progressAt.Sub(t0), want.Sub(t0))
	}
	h.observe(informer.Stats{Synced: true, Relists: 1, Added: 1, ReceivedRevision: "6"}, t0.Add(9*time.Second))
	if want := t0.Add(time.Second); !h.progressAt.Equal(want) {
		t.Fatalf("no progress moved progressAt to %v", h.progressAt.Sub(t0))
	}
}
