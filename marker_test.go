package informer_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/memory"
)

// revisionRecorder is a handler that waits for gate in every change and records the
// revisions it is told of.
type revisionRecorder struct {
	gate    chan struct{}
	changes atomic.Int64
	rev     atomic.Pointer[string]
}

func (h *revisionRecorder) wait()                 { <-h.gate; h.changes.Add(1) }
func (h *revisionRecorder) OnAdd(*obj, bool)      { h.wait() }
func (h *revisionRecorder) OnUpdate(_, _ *obj)    { h.wait() }
func (h *revisionRecorder) OnDelete(*obj, bool)   { h.wait() }
func (h *revisionRecorder) OnRevision(rev string) { h.rev.Store(&rev) }
func (h *revisionRecorder) revision() (r string) {
	if p := h.rev.Load(); p != nil {
		r = *p
	}
	return r
}

// A Coalesce handler whose queue overflows still learns the newest revision: when the
// overflow drains, the marker of the last revision it holds is delivered, even if the
// source is quiet from then on and no later batch brings another marker.
func TestProcessor_CoalesceOverflowKeepsRevisionMarker(t *testing.T) {
	src := memory.New[string, *obj](objKey, memory.Options{})
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		ErrorHandler: func(error) {},
		Name:         "marker",
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &revisionRecorder{gate: make(chan struct{})}
	if _, err := inf.AddHandler(h, informer.HandlerOptions{QueueLength: 4, Policy: informer.Coalesce}); err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(func() { close(h.gate) })
	ctx := informertest.Run(t, inf, release)
	if informer.WaitForCacheSync(ctx, inf) != nil {
		t.Fatal("no sync")
	}
	for i := range 500 {
		src.Put(newObj("k"+strconv.Itoa(i%50), "", strconv.Itoa(i)))
	}
	last := strconv.FormatInt(src.Revision(), 10)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := inf.WaitForRevision(wctx, last); err != nil {
		t.Fatalf("WaitForRevision: %v", err)
	}
	release() // the source stays quiet from now on
	for h.revision() != last {
		if wctx.Err() != nil {
			t.Fatalf("after an overflow of a Coalesce handler and a quiet source, the handler's last revision is %q, want %q (%d changes delivered)", h.revision(), last, h.changes.Load())
		}
		time.Sleep(time.Millisecond) // polling: the handler's state has no signal of its own
	}
}
