package informer_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
)

// A list page that never returns (a source that stalls after its headers) is ended after
// Options.ProgressTimeout: the list in progress shows in Stats while it waits, then
// LastError and a Warn say that the source made no progress, and the informer lists again
// and syncs once the source answers.
func TestReflector_StalledListEndsAfterProgressTimeout(t *testing.T) {
	var calls atomic.Int64
	entered := make(chan struct{})
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
			if calls.Add(1) == 1 {
				close(entered)
				<-ctx.Done() // stalled: nothing more comes until the call is ended
				return informer.List[*obj]{}, ctx.Err()
			}
			return informer.List[*obj]{Items: []*obj{newObj("a", "", "1")}, Revision: "5"}, nil
		},
		WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
			return newChanWatch(ctx, make(chan watchResult)), nil
		},
	}
	logs := &testkit.LogBuffer{}
	var reported atomic.Pointer[error]
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{
		Key:             objKeyErr,
		Name:            "stalled-list",
		ProgressTimeout: 200 * time.Millisecond,
		Logger:          logs.Logger(slog.LevelWarn),
		ErrorHandler: func(err error) {
			if errors.Is(err, informer.ErrNoProgress) {
				reported.Store(&err)
			}
		},
		Backoff: fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := informertest.Run(t, inf)
	<-entered
	if st := inf.Stats(); st.ListStarted.IsZero() {
		t.Fatalf("a list is in progress but Stats.ListStarted is zero: %+v", st)
	}
	if err := informer.WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	if p := reported.Load(); p == nil {
		t.Fatal("the stalled list was not reported with ErrNoProgress")
	} else if msg := (*p).Error(); !strings.Contains(msg, `"stalled-list"`) || !strings.Contains(msg, "ProgressTimeout") {
		t.Fatalf("the error does not name the informer and the timeout: %v", msg)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "no progress") {
		t.Fatalf("no Warn says the list made no progress: %q", out)
	}
	if st := inf.Stats(); !st.ListStarted.IsZero() || st.ListErrors != 1 {
		t.Fatalf("after the sync: ListStarted %v (want zero), ListErrors %d (want 1)", st.ListStarted, st.ListErrors)
	}
	t.Logf("reported: %v", *reported.Load())
}

// A watch that delivers nothing, long past the timeout it was asked to end at, is ended
// and watched again from the same revision (no relist), with LastError saying so.
func TestReflector_SilentWatchEndsAfterProgressTimeout(t *testing.T) {
	var lists, watches atomic.Int64
	lw := informer.ListerWatcherFuncs[*obj]{
		ListFunc: func(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
			lists.Add(1)
			return informer.List[*obj]{Items: []*obj{newObj("a", "", "1")}, Revision: "5"}, nil
		},
		WatchFunc: func(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
			watches.Add(1)
			return newChanWatch(ctx, make(chan watchResult)), nil // never sends, never ends
		},
	}
	inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{
		Key:             objKeyErr,
		Name:            "silent-watch",
		MinWatchTimeout: 20 * time.Millisecond,
		ProgressTimeout: 50 * time.Millisecond,
		Logger:          quiet,
		ErrorHandler:    func(error) {},
		Backoff:         fastBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	informertest.Run(t, inf)
	waitUntil(t, func() bool { return watches.Load() >= 3 })
	lastErr := inf.Stats().LastError
	if !errors.Is(lastErr, informer.ErrNoProgress) || !strings.Contains(lastErr.Error(), "delivered nothing") {
		t.Fatalf("LastError after silent watches: %v", lastErr)
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("a silent watch is watched again from the same revision, but the informer listed %d times", n)
	}
	t.Logf("LastError: %v", lastErr)
}
