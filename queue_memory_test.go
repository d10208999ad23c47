package informer_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/memory"
)

// Memory: the delta queue lets go of every object it no longer holds. One key is updated
// with 1 MB objects while the writer is stalled on a Block handler, so that the key's
// pending deltas outgrow their share of the queue's spare room and move to a larger
// buffer; once everything is applied and the source compacted, the live heap holds the
// newest object (cache and handler share it) and not the old ones left in the room the
// deltas moved out of.
func TestMemory_DeltaQueueLetsGoOfOldObjects(t *testing.T) {
	const size = 1 << 20
	updates := 200
	if raceEnabled {
		updates = 60
	}
	src := memory.New[string, *obj](objKey, memory.Options{})
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          func(o *obj) (string, error) { return o.Key, nil },
		ErrorHandler: func(error) {},
		Name:         "large",
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &stalledHandler{allow: make(chan struct{}), last: map[string]string{}}
	if _, err := inf.AddHandler(h, informer.HandlerOptions{QueueLength: 1, Policy: informer.Block}); err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(func() { close(h.allow) })
	ctx := informertest.Run(t, inf, release)
	if informer.WaitForCacheSync(ctx, inf) != nil {
		t.Fatal("no sync")
	}
	rev0 := src.Revision()
	base := heapAfterGC()
	for i := range updates {
		src.Put(&obj{Key: "k", Val: strings.Repeat(strconv.Itoa(i%10), size)})
		if i%16 == 15 {
			// The source's own history is not what is measured: keep it to what the
			// informer has not read yet.
			st := inf.Stats()
			src.Compact(rev0 + int64(st.Added+st.Modified))
		}
	}
	release()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := inf.WaitForRevision(wctx, strconv.FormatInt(src.Revision(), 10)); err != nil {
		t.Fatalf("WaitForRevision: %v", err)
	}
	for h.processed.Load() < int64(updates) {
		if wctx.Err() != nil {
			t.Fatalf("the handler processed %d of %d updates", h.processed.Load(), updates)
		}
		time.Sleep(time.Millisecond) // polling: nothing signals "handler caught up"
	}
	src.Compact(src.Revision())
	grown := int64(heapAfterGC()) - int64(base)
	// The newest object (1 MB, shared by the source, the cache and the handler) and
	// slack for the runtime; a single old object left in the queue is another 1 MB.
	const ceiling = size + size/2
	t.Logf("%d updates of %d bytes: live heap grew by %d bytes (ceiling %d)", updates, size, grown, ceiling)
	if grown > ceiling {
		t.Fatalf("live heap grew by %d bytes after %d updates of one key with 1 MB objects: the delta queue keeps old objects alive (ceiling %d)", grown, updates, ceiling)
	}
}
