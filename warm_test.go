package informer_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

// fixedState is a Persister that holds one saved state in memory and saves nothing.
type fixedState struct {
	objs []*obj
	rev  string
}

func (p *fixedState) Load(_ context.Context, _ informer.PersistedCache, add func(*obj)) (string, error) {
	for _, o := range p.objs {
		add(o)
	}
	return p.rev, nil
}

func (p *fixedState) Save(context.Context, informer.PersistedCache, *informer.Snapshot[string, *obj]) error {
	return nil
}

func (p *fixedState) Interval() time.Duration { return 0 }

func (p *fixedState) Equal(a, b *obj) bool { return *a == *b }

// A warm start publishes its revision with its sync: right after WaitForCacheSync (and
// Synced) LastSyncRevision is the restored state's revision, not "", even while a Block
// handler holds the restore's delivery of the initial adds.
func TestInformer_WarmStartRevisionBeforeSync(t *testing.T) {
	for i := range 5 {
		src := memory.New[string, *obj](objKey, memory.Options{})
		var objs []*obj
		for j := range 5 {
			o := newObj("k"+strconv.Itoa(j), "", "v")
			src.Put(o)
			objs = append(objs, o)
		}
		rev := strconv.FormatInt(src.Revision(), 10)
		inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
			Key:          objKeyErr,
			ErrorHandler: func(error) {},
			Persist:      &fixedState{objs: objs, rev: rev},
		})
		if err != nil {
			t.Fatal(err)
		}
		h := &stalledHandler{allow: make(chan struct{}), last: map[string]string{}}
		if _, err := inf.AddHandler(h, informer.HandlerOptions{QueueLength: 1, Policy: informer.Block}); err != nil {
			t.Fatal(err)
		}
		ctx, stop := runStoppable(t, inf)
		if err := informer.WaitForCacheSync(ctx, inf); err != nil {
			t.Fatal(err)
		}
		got := inf.Stats().ReceivedRevision
		close(h.allow)
		stop()
		if !inf.Stats().Restored {
			t.Fatalf("run %d: not restored", i)
		}
		if got != rev {
			t.Fatalf("run %d: LastSyncRevision right after a warm sync = %q, want %q", i, got, rev)
		}
	}
}
