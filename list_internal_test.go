package informer

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
)

// A source that does not answer a list (unreachable, its client retrying) is said at Warn
// within answerWarning (5 s; shortened here), long before the client gives up; the list
// goes on and the informer syncs once the source answers.
func TestReflector_UnansweredListWarnsEarly(t *testing.T) {
	saved := answerWarning
	answerWarning = 20 * time.Millisecond
	t.Cleanup(func() { answerWarning = saved }) // after the informer's cleanup: it stops first
	release := make(chan struct{})
	lw := ListerWatcherFuncs[*string]{
		ListFunc: func(ctx context.Context, opts ListOptions) (List[*string], error) {
			select {
			case <-release:
				return goodList(), nil
			case <-ctx.Done():
				return List[*string]{}, ctx.Err()
			}
		},
		WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[*string], error) { return newIdleWatch(ctx), nil },
	}
	logs := &testkit.LogBuffer{}
	inf, err := New[string, *string](lw, Options[string, *string]{Key: ptrKey, Name: "far", Logger: logs.Logger(slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	const want = `level=WARN msg="the source has not answered a list request in 20ms; still waiting: check that it is reachable" informer=far op=list`
	testkit.Until(t, "a Warn that the source has not answered", time.Millisecond, func() bool { return strings.Contains(logs.String(), want) })
	if st := inf.Stats(); st.ListStarted.IsZero() || st.Synced {
		t.Fatalf("while the source is silent: ListStarted %v, Synced %v", st.ListStarted, st.Synced)
	}
	close(release)
	if err := WaitForCacheSync(ctx, inf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "has not answered"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
}
