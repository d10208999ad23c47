package informer_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/memory"
)

// A key function that fails for one object: reported, counted, skipped; others go on.
func TestInformer_KeyErrorSkipsObject(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("bad", "g", "1"))
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{
		Key: func(o *obj) (string, error) {
			if o.Key == "bad" {
				return "", errors.New("no key")
			}
			if o.Val == "panic" {
				panic("key function panicked")
			}
			return o.Key, nil
		},
	}, ev)
	src.Put(newObj("c", "g", "panic"))
	src.Put(newObj("d", "g", "1"))
	ev.Expect(t, "add*a=1", "add d=1")
	if n := f.inf.Stats().KeyErrors; n != 2 {
		t.Fatalf("KeyErrors = %d, want 2", n)
	}
	var oe *informer.ObjectError
	if reported := f.errs.All(); len(reported) == 0 || !errors.As(reported[0], &oe) || oe.Op != "key" {
		t.Fatalf("reported %v", reported)
	}
}

// With no ErrorHandler a failing key function still shows: a Warn line that names the
// informer and the object, at most one per kind per 10 s on the informer's clock, which
// counts the ones left out.
func TestInformer_KeyErrorWarnsWithoutErrorHandler(t *testing.T) {
	src := newSource(memory.Options{})
	var log testkit.LogBuffer
	fc := clock.NewFake(time.Unix(1000, 0))
	inf, err := informer.New[string, *obj](src, informer.Options[string, *obj]{
		Name: "items", Logger: log.Logger(slog.LevelInfo), Clock: fc,
		Key: func(o *obj) (string, error) {
			if strings.HasPrefix(o.Key, "bad") {
				return "", errors.New("no key")
			}
			return o.Key, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvents()
	inf.AddHandler(ev, informer.HandlerOptions{})
	ctx := informertest.Run(t, inf)
	_ = informer.WaitForCacheSync(ctx, inf)
	warns := func() []string {
		var ws []string
		for l := range strings.Lines(log.String()) {
			if strings.Contains(l, "level=WARN") {
				ws = append(ws, strings.TrimSpace(l))
			}
		}
		return ws
	}
	for i := range 5 {
		src.Put(newObj(fmt.Sprintf("bad%d", i), "g", "1"))
	}
	src.Put(newObj("ok1", "g", "1")) // a barrier: the failures before it are reported
	ev.Expect(t, "add ok1=1")
	fc.Step(10 * time.Second)
	src.Put(newObj("bad5", "g", "1"))
	src.Put(newObj("ok2", "g", "1"))
	ev.Expect(t, "add ok1=1", "add ok2=1")
	ws := warns()
	if len(ws) != 2 {
		t.Fatalf("Warn lines:\n%s\nwant 2", strings.Join(ws, "\n"))
	}
	for i, want := range []string{`key of object &{Key:bad0 `, `key of object &{Key:bad5 `} {
		for _, w := range []string{`msg="informer error (set Options.ErrorHandler to handle these)"`, "kind=key", `informer \"items\"`, want, fmt.Sprintf("suppressed=%d", 4*i)} {
			if !strings.Contains(ws[i], w) {
				t.Errorf("Warn line %d lacks %s:\n%s", i, w, ws[i])
			}
		}
	}
}

// An index function that fails for one object: the object is skipped and reported.
func TestInformer_IndexErrorSkipsObject(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(newObj("a", "g", "1"))
	src.Put(newObj("b", "", "1"))
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{Indexers: informer.Indexers[*obj]{
		"group": informer.IndexBy(func(o *obj) (string, error) {
			if o.Group == "" {
				return "", errors.New("no group")
			}
			return o.Group, nil
		}),
	}}, ev)
	src.Put(newObj("c", "g", "1"))
	ev.Expect(t, "add*a=1", "add c=1")
	if f.inf.Stats().IndexErrors != 1 {
		t.Fatalf("IndexErrors = %d", f.inf.Stats().IndexErrors)
	}
}

// Transform runs before anything is stored; a failing transform skips the object.
func TestInformer_Transform(t *testing.T) {
	src := newSource(memory.Options{})
	src.Put(&obj{Key: "a", Group: "g", Val: "secret"})
	src.Put(&obj{Key: "b", Group: "g", Val: "fail"})
	ev := newEvents()
	f := start(t, src, informer.Options[string, *obj]{Transform: func(o *obj) (*obj, error) {
		if o.Val == "fail" {
			return nil, errors.New("cannot transform")
		}
		c := *o
		c.Val = strings.ToUpper(c.Val)
		return &c, nil
	}}, ev)
	src.Put(&obj{Key: "c", Group: "g", Val: "x"})
	ev.Expect(t, "add*a=SECRET", "add c=X")
	if f.inf.Stats().TransformErrors != 1 {
		t.Fatal("transform error not counted")
	}
}
