package httpsource

import (
	"context"
	"fmt"
	"math/rand/v2"
	nethttp "net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

const modelDeleted = "<deleted>"

// modelView is a handler that checks the life cycle of every key and records the states
// it saw, per key.
type modelView struct {
	mu     sync.Mutex
	states map[string][]string
	errs   []string
}

func (v *modelView) see(key, state string, isAdd bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.states[key]
	live := len(s) > 0 && s[len(s)-1] != modelDeleted
	if isAdd && live {
		v.errs = append(v.errs, fmt.Sprintf("add %s=%s on top of %q", key, state, s[len(s)-1]))
	}
	if !isAdd && !live {
		v.errs = append(v.errs, fmt.Sprintf("%s=%s without a preceding add", key, state))
	}
	v.states[key] = append(s, state)
}
func (v *modelView) OnAdd(o *obj, _ bool)    { v.see(o.Name, o.Val, true) }
func (v *modelView) OnUpdate(_, o *obj)      { v.see(o.Name, o.Val, false) }
func (v *modelView) OnDelete(o *obj, _ bool) { v.see(o.Name, modelDeleted, false) }

// TestModelHTTP runs seeded random writes through memory source → upstream informer →
// Server → (faults) → Client → downstream informer, with the server killed and restarted
// and connections cut mid-stream, and checks the invariants of the root package's
// TestModel on the downstream handler: convergence of cache and handler to the source,
// per key a subsequence of the key's real states, a valid life cycle.
func TestModelHTTP(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for s := 1; s <= seeds; s++ {
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) { runModelHTTP(t, uint64(s)) })
	}
}

func runModelHTTP(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	u := newUpstream(t, memory.Options{})
	history := map[string][]string{}
	write := func(key string) {
		if rng.IntN(4) == 0 {
			if _, ok := u.src.Delete(key); ok {
				history[key] = append(history[key], modelDeleted)
			}
			return
		}
		val := key + "." + strconv.Itoa(len(history[key]))
		history[key] = append(history[key], val)
		put(u.src, key, val)
	}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for range 4 {
		write(keys[rng.IntN(len(keys))])
	}

	// A stable address in front of the current Server: "killed" is 503 and every open
	// connection cut; "restarted" is a new Server of the upstream informer.
	var cur atomic.Pointer[Server[string, *obj]]
	front := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if s := cur.Load(); s != nil {
			s.ServeHTTP(w, r)
			return
		}
		nethttp.Error(w, "down", nethttp.StatusServiceUnavailable)
	}))
	var servers []*Server[string, *obj]
	start := func() {
		s, err := newServer(t, u, ServerOptions[*obj]{})
		if err != nil {
			t.Fatal(err)
		}
		waitSynced(t, s)
		servers = append(servers, s)
		cur.Store(s)
	}
	kill := func() {
		s := cur.Swap(nil)
		if s == nil {
			return
		}
		front.CloseClientConnections()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
	t.Cleanup(func() {
		kill()
		front.Close()
	})
	start()

	v := &modelView{states: map[string][]string{}}
	c := newTestClient(t, front.URL, ClientOptions[*obj]{})
	d := &downstream{rec: newRecorder()}
	inf, err := informer.New(c.Ordered(), informer.Options[string, *obj]{
		Key: objKey, Name: "client", Backoff: testBackoff, ErrorHandler: func(error) {},
		MaxBatch: 1 + rng.IntN(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	inf.AddHandler(v, informer.HandlerOptions{QueueLength: 1 + rng.IntN(4), Policy: informer.QueuePolicy(rng.IntN(2))})
	d.inf = inf
	run(t, inf)

	for op := 0; op < 60; op++ {
		switch r := rng.IntN(100); {
		case r < 80:
			write(keys[rng.IntN(len(keys))])
		case r < 88:
			front.CloseClientConnections() // a cut, most often in the middle of a stream
		case r < 94:
			kill()
			for range rng.IntN(3) { // writes while the server is down
				write(keys[rng.IntN(len(keys))])
			}
			start()
		default:
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // let the client catch up sometimes
		}
	}
	if cur.Load() == nil {
		start()
	}

	final := map[string]string{}
	for _, o := range u.src.Items() {
		final[o.Name] = o.Val
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		ok := state(inf.List()) == state(u.src.Items())
		v.mu.Lock()
		for k, h := range v.states {
			fv, live := final[k]
			last := h[len(h)-1]
			ok = ok && ((live && last == fv) || (!live && last == modelDeleted))
		}
		for k := range final {
			_, seen := v.states[k]
			ok = ok && seen
		}
		v.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			v.mu.Lock()
			defer v.mu.Unlock()
			t.Fatalf("seed %d: no convergence: cache %q, source %q, handler %v", seed, state(inf.List()), state(u.src.Items()), v.states)
		}
		time.Sleep(time.Millisecond) // polling: nothing signals "handler caught up"
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.errs) > 0 {
		t.Fatalf("seed %d: handler: %q", seed, v.errs)
	}
	for k, seen := range v.states {
		h := history[k]
		i := 0
		for _, s := range h {
			if i < len(seen) && seen[i] == s {
				i++
			}
		}
		if i != len(seen) {
			t.Fatalf("seed %d, key %s: saw %q, not a subsequence of %q", seed, k, seen, h)
		}
	}
}
