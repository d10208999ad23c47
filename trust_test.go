package informer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// New refuses a source that would crash the informer at its first call.
func TestNew_RefusesNilSourceFunctions(t *testing.T) {
	list := func(context.Context, informer.ListOptions) (informer.List[*obj], error) {
		return informer.List[*obj]{}, nil
	}
	watch := func(context.Context, informer.WatchOptions) (informer.Watch[*obj], error) {
		return nil, nil
	}
	for name, lw := range map[string]informer.ListerWatcher[*obj]{
		"nil":              nil,
		"no functions":     informer.ListerWatcherFuncs[*obj]{},
		"no WatchFunc":     informer.ListerWatcherFuncs[*obj]{ListFunc: list},
		"no ListFunc":      informer.ListerWatcherFuncs[*obj]{WatchFunc: watch},
		"pointer, no func": &informer.ListerWatcherFuncs[*obj]{ListFunc: list},
		"nil pointer":      (*informer.ListerWatcherFuncs[*obj])(nil),
	} {
		t.Run(name, func(t *testing.T) {
			inf, err := informer.New[string, *obj](lw, informer.Options[string, *obj]{Key: objKeyErr})
			if err == nil || inf != nil {
				t.Fatalf("New accepted %s: informer %v, error %v", name, inf, err)
			}
			t.Logf("%s: %v", name, err)
		})
	}
	if _, err := informer.New[string, *obj](informer.ListerWatcherFuncs[*obj]{ListFunc: list, WatchFunc: watch},
		informer.Options[string, *obj]{Key: objKeyErr}); err != nil {
		t.Fatalf("New refused complete ListerWatcherFuncs: %v", err)
	}
}

// panicky wraps a memory source and panics once in the named call: "List", "Watch",
// "Watch.Next" or "Watch.Stop".
type panicky struct {
	*memory.Source[string, *obj]
	call     string
	panicked atomic.Bool
}

func (p *panicky) once(call string) {
	if call == p.call && p.panicked.CompareAndSwap(false, true) {
		panic("boom in " + call)
	}
}

func (p *panicky) List(ctx context.Context, opts informer.ListOptions) (informer.List[*obj], error) {
	p.once("List")
	return p.Source.List(ctx, opts)
}

func (p *panicky) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*obj], error) {
	p.once("Watch")
	w, err := p.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &panickyWatch{Watch: w, p: p}, nil
}

type panickyWatch struct {
	informer.Watch[*obj]
	p *panicky
}

func (w *panickyWatch) Next() (informer.Event[*obj], error) {
	w.p.once("Watch.Next")
	return w.Watch.Next()
}
func (w *panickyWatch) Stop() { w.Watch.Stop(); w.p.once("Watch.Stop") }

// A panic in a source call is recovered and reported as bad input that names the
// informer and the call; the informer backs off, tries again and converges.
func TestReflector_SourcePanicIsBadInput(t *testing.T) {
	for _, call := range []string{"List", "Watch", "Watch.Next", "Watch.Stop"} {
		t.Run(call, func(t *testing.T) {
			src := &panicky{Source: memory.New[string, *obj](objKey, memory.Options{}), call: call}
			src.Put(newObj("a", "", "1"))
			e := &testkit.Errors{}
			inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
				Key:          objKeyErr,
				Name:         "panicky",
				Logger:       quiet,
				ErrorHandler: e.Report,
				Backoff:      fastBackoff,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := informertest.Run(t, inf)
			if call == "Watch.Stop" {
				// A watch is stopped when it ends: end the first one.
				if err := src.WaitForWatches(ctx, 1); err != nil {
					t.Fatal(err)
				}
				src.DropWatches(informer.ErrUnavailable)
			}
			waitUntil(t, src.panicked.Load)
			e.WaitFor(t, informer.ErrBadInput)
			bad := e.Matching(informer.ErrBadInput)
			msg := bad[len(bad)-1].Error()
			if !strings.Contains(msg, `"panicky"`) || !strings.Contains(msg, call+" panicked") || !strings.Contains(msg, "boom") {
				t.Fatalf("the error does not name the informer, the call and the panic: %v", msg)
			}
			t.Logf("reported: %v", msg)
			// Converges once the source behaves.
			src.Put(newObj("b", "", "2"))
			waitUntil(t, func() bool {
				_, ok := inf.Get("b")
				return ok && inf.Stats().Synced
			})
			if st := inf.Stats(); st.SourceErrors == 0 {
				t.Fatalf("the panic is not counted in Stats.SourceErrors: %+v", st)
			}
		})
	}
}
