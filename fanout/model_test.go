package fanout

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

const modelDeleted = informertest.Deleted

var modelSeeds = flag.Int("model.seeds", 0, "number of seeds of TestModelHTTP (0: 6, or 2 with -short); make soak raises it")

// TestModelHTTP runs seeded random writes through memory source → upstream informer →
// Server → (faults) → Client → downstream informer, with the server killed and restarted
// and connections cut mid-stream, and checks the invariants of the root package's
// TestModel on the downstream handler: convergence of cache and handler to the source,
// per key a subsequence of the key's real states, a valid life cycle.
func TestModelHTTP(t *testing.T) {
	for _, seed := range testkit.Seeds(6, 2, *modelSeeds, 0) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runModelHTTP(t, seed) })
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
		wiretest.Put(u.src, key, val)
	}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for range 4 {
		write(keys[rng.IntN(len(keys))])
	}

	// A stable address in front of the current Server: "killed" is 503 and every open
	// connection cut; "restarted" is a new Server of the upstream informer. The front
	// knows which watch streams are open, and can cut one in the middle of a frame.
	var cur atomic.Pointer[Server[string, *wiretest.Obj]]
	watches := newWatchTracker()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := cur.Load()
		if s == nil {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Query().Get("watch") == "" {
			s.ServeHTTP(w, r)
			return
		}
		id := watches.open()
		defer watches.close(id)
		s.ServeHTTP(&cutWriter{ResponseWriter: w, t: watches, id: id}, r)
	}))
	var servers []*Server[string, *wiretest.Obj]
	start := func() {
		s := newServer(t, u, ServerOptions[*wiretest.Obj]{})
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
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
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

	// The downstream handler checks every key's life cycle and keeps the states it saw
	// (the default Coalesce policy: a delete may carry a state merged away).
	v := informertest.NewLifeCycle(func(o *wiretest.Obj) (string, string) { return o.Name, o.Val }, informertest.LifeCycleOptions{Coalesce: true})
	c := newTestClient(t, front.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	d := &wiretest.Mirror{Rec: wiretest.NewRecorder()}
	inf, err := informer.New(c.Ordered(), informer.Options[string, *wiretest.Obj]{
		Key: wiretest.ObjKey, Name: "client", Backoff: wiretest.TestBackoff, ErrorHandler: func(error) {},
		MaxBatch: 1 + rng.IntN(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := inf.AddHandler(v, informer.HandlerOptions{QueueLength: 1 + rng.IntN(4), Policy: informer.QueuePolicy(rng.IntN(2))})
	if err != nil {
		t.Fatal(err)
	}
	d.Inf = inf
	wiretest.Run(t, inf)

	liveCuts, midFrameCuts := 0, 0
	for op := 0; op < 60; op++ {
		switch r := rng.IntN(100); {
		case r < 76:
			write(keys[rng.IntN(len(keys))])
		case r < 84:
			// Cut a live stream: wait for a watch opened since the last cut.
			watches.waitFresh(t)
			front.CloseClientConnections()
			liveCuts++
		case r < 88:
			// Cut a stream in the middle of a frame: the next frame written to a fresh
			// watch is cut after half its bytes, and the connection aborted.
			cut := watches.arm(watches.waitFresh(t))
			// Each put is a change, so a frame for an open watch; if the client was
			// between watches the put may come by a list instead: put again until a
			// frame is cut.
			deadline := time.After(wiretest.WaitTimeout)
		cutting:
			for {
				key := keys[rng.IntN(len(keys))]
				val := key + "." + strconv.Itoa(len(history[key]))
				history[key] = append(history[key], val)
				wiretest.Put(u.src, key, val)
				select {
				case <-cut:
					break cutting
				case <-time.After(50 * time.Millisecond):
				case <-deadline:
					t.Fatalf("seed %d: no frame reached an open watch to be cut", seed)
				}
			}
			midFrameCuts++
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
	deadline := time.Now().Add(wiretest.WaitTimeout)
	for {
		// Converged can hold for a moment while the handler is behind (an earlier delete
		// is the final state too): its queue must be empty as well.
		ok := wiretest.State(wiretest.Cached(inf)) == wiretest.State(u.src.Items()) && v.Converged(final) && reg.Stats().Queued == 0
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: no convergence: cache %q, source %q", seed, wiretest.State(wiretest.Cached(inf)), wiretest.State(u.src.Items()))
		}
		time.Sleep(time.Millisecond) // polling: nothing signals "handler caught up"
	}
	// Every cut hit a stream opened since the previous cut. A frame cut in the middle is
	// bad input: that watch fails and the client lists again. (A plain cut may be absorbed
	// by the client reconnecting within one informer watch, so it is not counted here.)
	st := inf.Stats()
	if failed := st.WatchErrors; failed < uint64(midFrameCuts) {
		t.Errorf("seed %d: %d mid-frame cuts, but only %d failed watches", seed, midFrameCuts, failed)
	}
	if relists := st.Relists; relists < uint64(1+midFrameCuts) {
		t.Errorf("seed %d: %d mid-frame cuts, but only %d lists", seed, midFrameCuts, relists)
	}
	t.Logf("seed %d: %d cuts of live streams, %d mid-frame, %d watches failed", seed, liveCuts, midFrameCuts, inf.Stats().WatchErrors)
	if errs := v.Errors(); len(errs) > 0 {
		t.Fatalf("seed %d: handler: %q", seed, errs)
	}
	for _, k := range v.Keys() {
		// A relist (a frame cut in the middle ends the watch as bad input, and the client
		// lists again) repeats each object's current state as an update, as documented
		// for informers without Options.Revision: a state seen twice in a row is one.
		seen, h := slices.Compact(v.States(k)), history[k]
		if !informertest.IsSubsequence(seen, h) {
			t.Fatalf("seed %d, key %s: saw %q, not a subsequence of %q", seed, k, seen, h)
		}
	}
}

// watchTracker knows the watch streams open at the front, and arms a cut in the middle of
// the next frame written to one.
type watchTracker struct {
	mu      sync.Mutex
	nextID  int
	openIDs map[int]bool
	lastCut int // streams opened up to this id have been cut
	changed chan struct{}
	armed   chan struct{} // closed by the writer that performs the armed cut
	armMin  int           // the first watch id the armed cut may hit
}

func newWatchTracker() *watchTracker {
	return &watchTracker{openIDs: map[int]bool{}, changed: make(chan struct{}, 1)}
}

func (w *watchTracker) open() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	w.openIDs[w.nextID] = true
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return w.nextID
}

func (w *watchTracker) close(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.openIDs, id)
}

// waitFresh waits until a watch opened after the last cut is open, marks every watch open
// now as cut, and returns the first id of the watches opened since the last cut.
func (w *watchTracker) waitFresh(t *testing.T) int {
	t.Helper()
	deadline := time.After(wiretest.WaitTimeout)
	for {
		w.mu.Lock()
		for id := range w.openIDs {
			if id > w.lastCut {
				first := w.lastCut + 1
				w.lastCut = w.nextID
				w.mu.Unlock()
				return first
			}
		}
		w.mu.Unlock()
		select {
		case <-w.changed:
		case <-deadline:
			t.Fatal("no watch stream opened: the client did not reconnect")
		}
	}
}

// arm makes the next frame written to a watch opened as minID or later the one cut (older
// streams may be dying from an earlier cut); the returned channel is closed once it has
// been.
func (w *watchTracker) arm(minID int) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = make(chan struct{})
	w.armMin = minID
	return w.armed
}

// take reports whether the writer of watch id must cut its next frame, and disarms.
func (w *watchTracker) take(id int) (chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed == nil || id < w.armMin {
		return nil, false
	}
	c := w.armed
	w.armed = nil
	return c, true
}

// cutWriter is the ResponseWriter of one watch stream at the front: when armed it writes
// the start of an event frame, flushes it, and aborts the connection.
type cutWriter struct {
	http.ResponseWriter
	t  *watchTracker
	id int
}

func (c *cutWriter) Write(p []byte) (int, error) {
	// Cut inside an event frame (a write may also be a keep-alive or a frame's end): just
	// after the start of its "type" field.
	if at := bytes.Index(p, []byte(`"type"`)); at >= 0 {
		if done, ok := c.t.take(c.id); ok {
			c.ResponseWriter.Write(p[:at+3])
			http.NewResponseController(c.ResponseWriter).Flush()
			close(done)
			panic(http.ErrAbortHandler) // the server closes the connection mid-chunk
		}
	}
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (c *cutWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
