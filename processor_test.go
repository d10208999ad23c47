package informer

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
)

// newRecorder records a listener's calls in the test kit's notation; the listener's values
// are "key=state" (as add, upd and del build them).
func newRecorder() *testkit.Recorder[string] {
	return testkit.NewRecorder(func(v string) (string, string) { k, s, _ := strings.Cut(v, "="); return k, s })
}

// add, upd and del build the notifications of key k whose states the recorder shows.
func add(k, v string) notification[string, string] {
	return notification[string, string]{kind: notifyAdd, key: k, new: k + "=" + v}
}
func upd(k, o, n string) notification[string, string] {
	return notification[string, string]{kind: notifyUpdate, key: k, old: k + "=" + o, new: k + "=" + n}
}
func del(k, v string) notification[string, string] {
	return notification[string, string]{kind: notifyDelete, key: k, old: k + "=" + v}
}

// runListener starts l and returns a function that stops it and waits.
func runListener(l *listener[string, string]) func() {
	go l.Run()
	return func() { l.Stop(); <-l.done }
}

// Strict FIFO per listener; the synced marker flips HasSynced after what
// precedes it was delivered and is never passed to the handler.
func TestListener_FIFOAndSyncMarker(t *testing.T) {
	r := newRecorder()
	l := newListener[string, string](r, HandlerOptions{}, nil, nil)
	stop := runListener(l)
	defer stop()
	l.Enqueue(newNoteBatch([]notification[string, string]{add("a", "1"), upd("a", "1", "2"), {kind: notifySynced}, del("a", "2")}), false)
	r.Expect(t, "add a=1", "update a=1→2", "delete a=2")
	<-l.syncedCh
	r.ExpectNoMore(t)
}

// Coalesce policy (client-go's queue grows without bound instead): once the queue is full, each key keeps its newest state
// with a valid life cycle, and per-key order holds.
func TestListener_CoalesceSequences(t *testing.T) {
	cases := []struct {
		name string
		in   []notification[string, string]
		want []string
	}{
		{"updates fold", []notification[string, string]{upd("k", "1", "2"), upd("k", "2", "3"), upd("k", "3", "4")},
			[]string{"update k=1→4"}},
		{"add then updates is an add of the newest", []notification[string, string]{add("k", "1"), upd("k", "1", "2")},
			[]string{"add k=2"}},
		{"add then delete vanishes", []notification[string, string]{add("k", "1"), upd("k", "1", "2"), del("k", "2")},
			nil},
		{"update then delete is the delete", []notification[string, string]{upd("k", "1", "2"), del("k", "2")},
			[]string{"delete k=2"}},
		{"delete then add keeps both", []notification[string, string]{del("k", "1"), add("k", "9"), upd("k", "9", "10")},
			[]string{"delete k=1", "add k=10"}},
		{"delete add delete is one delete", []notification[string, string]{del("k", "1"), add("k", "9"), del("k", "9")},
			[]string{"delete k=1"}},
		{"keys keep first-arrival order", []notification[string, string]{upd("a", "1", "2"), upd("b", "1", "2"), upd("a", "2", "3")},
			[]string{"update a=1→3", "update b=1→2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRecorder().Hold()
			l := newListener[string, string](r, HandlerOptions{QueueLength: 1}, nil, nil)
			stop := runListener(l)
			defer stop()
			// Hold the handler inside its first call, so what follows queues up.
			l.Enqueue(newNoteBatch([]notification[string, string]{add("first", "x")}), false)
			waitFor(t, func() bool { return l.inFlight.Load() == 1 })
			l.Enqueue(newNoteBatch([]notification[string, string]{add("filler", "f")}), false) // fills the queue of 1
			l.Enqueue(newNoteBatch(c.in), false)                                               // all into the overflow
			want := append([]string{"add first=x", "add filler=f"}, c.want...)
			for range want {
				r.Step(t)
			}
			equal(t, r.Calls(), want)
			// The handler signals from inside its last call; the listener counts the call
			// done once it returns.
			waitFor(t, func() bool { return l.stats().Queued == 0 })
		})
	}
}

// Block policy: the producer queues a whole batch, then waits for room before the next;
// the handler sees every notification.
func TestListener_BlockPolicyBackpressure(t *testing.T) {
	r := newRecorder().Hold()
	l := newListener[string, string](r, HandlerOptions{QueueLength: 2, Policy: Block}, nil, nil)
	stop := runListener(l)
	defer stop()
	var in []notification[string, string]
	var want []string
	for i := range 6 {
		v := fmt.Sprint(i)
		in = append(in, upd("k", v, v+"'"))
		want = append(want, "update k="+v+"→"+v+"'")
	}
	added := make(chan struct{})
	go func() {
		var abort atomic.Bool
		for i := 0; i < len(in); i += 2 {
			l.Enqueue(newNoteBatch(in[i:i+2]), false)
			l.WaitForRoom(&abort)
		}
		close(added)
	}()
	waitFor(t, func() bool { return l.blocked.Load() > 0 })
	for range want {
		r.Step(t)
	}
	<-added
	equal(t, r.Calls(), want)
}

// A panicking handler is recovered, reported, the item skipped, and
// delivery goes on.
func TestListener_PanicSkipsItem(t *testing.T) {
	var reported []string
	var mu sync.Mutex
	seen := make(chan struct{}, 10)
	h := HandlerFuncs[string]{AddFunc: func(v string, _ bool) {
		defer func() { seen <- struct{}{} }()
		if v == "b=boom" {
			panic("bad object")
		}
		mu.Lock()
		reported = append(reported, "ok:"+v)
		mu.Unlock()
	}}
	l := newListener[string, string](h, HandlerOptions{Name: "h"}, nil, func(p *HandlerPanicError) {
		mu.Lock()
		reported = append(reported, fmt.Sprintf("panic:%s:%v:%v", p.Handler, p.Key, p.Value))
		if !strings.Contains(string(p.Stack), "TestListener_PanicSkipsItem") {
			reported = append(reported, "the stack does not show the handler")
		}
		mu.Unlock()
	})
	stop := runListener(l)
	defer stop()
	l.Enqueue(newNoteBatch([]notification[string, string]{add("a", "a"), add("b", "boom"), add("c", "c")}), false)
	for range 3 {
		<-seen
	}
	waitFor(t, func() bool { return l.panics.Load() == 1 })
	mu.Lock()
	defer mu.Unlock()
	equal(t, reported, []string{"ok:a=a", "panic:h:b:bad object", "ok:c=c"})
}

// waitFor polls cond with a deadline (for state that has no event to wait on).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testkit.Until(t, "the condition", time.Millisecond, cond)
}

var _ = strings.Join

// Shared batches: the last release returns a batch to the pool, cleared; after a small
// batch (low traffic) a burst's large buffer is let go at its release and a small one kept.
func TestProcessor_BatchPool(t *testing.T) {
	p := newBatchPool[string, string]()
	big, _ := p.Get()
	big.notes = append(big.notes, make([]notification[string, string], 2*idleBufferCap)...)
	big.notes[0] = add("k", "v")
	big.refs.Add(1) // a listener's segment
	big.Release()   // the writer's reference
	if len(p.free) != 0 {
		t.Fatal("batch pooled while a listener still holds it")
	}
	big.Release() // the listener's
	if len(p.free) != 1 {
		t.Fatalf("pooled %d batches after the last release, want 1", len(p.free))
	}
	again, _ := p.Get()
	if again != big || len(again.notes) != 0 || again.notes[:1][0].key != "" {
		t.Fatal("pooled batch not reused empty and cleared")
	}
	tiny, _ := p.Get()
	tiny.notes = make([]notification[string, string], 0, 8)
	p.low.Store(true) // the writer's last batch was small
	again.Release()
	tiny.Release()
	if len(p.free) != 1 {
		t.Fatalf("pool holds %d after a small batch, want 1", len(p.free))
	}
	if b := <-p.free; b != tiny {
		t.Fatal("the large batch was kept after a small batch")
	}
}
