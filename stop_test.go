package informer_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// Run returns within Options.StopTimeout after its context ends even if a handler never
// returns, and a Warn names the handler and the key of its call.
func TestInformer_RunReturnsDespiteStuckHandler(t *testing.T) {
	const bound = 100 * time.Millisecond
	src := memory.New[string, *obj](objKey, memory.Options{})
	src.Put(newObj("stuck-key", "", "1"))
	logs := &testkit.LogBuffer{}
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Key:          objKeyErr,
		Name:         "stopping",
		StopTimeout:  bound,
		Logger:       logs.Logger(slog.LevelWarn),
		ErrorHandler: func(error) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) }) // the handler's goroutine ends with its call
	var once sync.Once
	h := informer.HandlerFuncs[*obj]{AddFunc: func(*obj, bool) {
		once.Do(func() { close(entered) })
		<-release
	}}
	if _, err := inf.AddHandler(h, informer.HandlerOptions{Name: "never-returns"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the handler was never called")
	}
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10 s after its context ended, with a stuck handler and StopTimeout 100 ms")
	}
	took := time.Since(start)
	out := logs.String()
	t.Logf("Run returned %v after cancel; log: %s", took, out)
	if took < bound {
		t.Fatalf("Run returned after %v, before StopTimeout (%v), while a handler was in a call", took, bound)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "handler=never-returns") || !strings.Contains(out, "key=stuck-key") || !strings.Contains(out, "informer=stopping") {
		t.Fatalf("no Warn naming the informer, the handler and its key: %q", out)
	}
}
