package fanout

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/internal/wire"
)

// gate admits requests: it counts the requests in progress (Shutdown waits for them),
// holds the slots of watches and lists against the limits in all and per client, gives
// each request its context (ended by Shutdown), and keeps the ServeStats counters. A
// request the gate refuses is answered here: 429 beyond a limit, 503 while shutting down.
type gate struct {
	maxWatchers, maxClientWatchers int
	maxLists, maxClientLists       int
	maxWatchDuration               time.Duration
	retryAfter                     time.Duration

	stats counters

	mu       sync.Mutex
	closed   bool
	watchers slots
	lists    slots
	requests sync.WaitGroup
	stopCtx  context.Context
	stop     context.CancelFunc
}

// newGate returns the gate of o's limits, with their defaults applied.
func newGate(o ServeOptions) *gate {
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	g := &gate{
		maxWatchers:       def(o.MaxWatchers, DefaultMaxWatchers),
		maxClientWatchers: def(o.MaxWatchersPerClient, DefaultMaxWatchersPerClient),
		maxLists:          def(o.MaxLists, DefaultMaxLists),
		maxClientLists:    def(o.MaxListsPerClient, DefaultMaxListsPerClient),
		maxWatchDuration:  o.MaxWatchDuration,
		retryAfter:        o.RetryAfter,
	}
	if g.maxWatchDuration == 0 {
		g.maxWatchDuration = DefaultMaxWatchDuration
	}
	if g.retryAfter <= 0 {
		g.retryAfter = DefaultRetryAfter
	}
	g.stopCtx, g.stop = context.WithCancel(context.Background())
	return g
}

// Enter counts a request in progress, or answers 503 if the server is shutting down.
// A request entered calls Leave when it is done.
func (g *gate) Enter(w http.ResponseWriter) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.ShuttingDown(w)
		return false
	}
	g.requests.Add(1)
	g.mu.Unlock()
	return true
}

// Leave ends a request Enter counted.
func (g *gate) Leave() { g.requests.Done() }

// AdmitWatch takes a watch slot for client, or answers 429 naming the limit reached
// and counts the refusal (Stats.Rejected). release gives the slot back.
func (g *gate) AdmitWatch(w http.ResponseWriter, client string) (release func(), ok bool) {
	return g.admit(w, &g.watchers, client, g.maxWatchers, g.maxClientWatchers, &g.stats.rejected, "watchers")
}

// AdmitList takes a list slot for client, as AdmitWatch does (Stats.ListsRejected).
func (g *gate) AdmitList(w http.ResponseWriter, client string) (release func(), ok bool) {
	return g.admit(w, &g.lists, client, g.maxLists, g.maxClientLists, &g.stats.listsRejected, "lists in progress")
}

func (g *gate) admit(w http.ResponseWriter, set *slots, client string, limit, clientLimit int, refused *atomic.Uint64, what string) (release func(), ok bool) {
	g.mu.Lock()
	ok, which := set.take(client, limit, clientLimit)
	g.mu.Unlock()
	if !ok {
		refused.Add(1)
		writeStatus(w, &wire.Status{Code: http.StatusTooManyRequests, Reason: "TooManyRequests",
			Message: fmt.Sprintf("too many %s (%s)", what, which)}, g.retryAfter)
		return nil, false
	}
	return func() {
		g.mu.Lock()
		set.release(client)
		g.mu.Unlock()
	}, true
}

// InUse returns the watch and list slots taken now.
func (g *gate) InUse() (watches, lists int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.watchers.total, g.lists.total
}

// Context returns the request's context, also ended by Shutdown and, if timeout is
// positive, after timeout; done releases it.
func (g *gate) Context(r *http.Request, timeout time.Duration) (ctx context.Context, done func()) {
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(r.Context(), timeout)
	} else {
		ctx, cancel = context.WithCancel(r.Context())
	}
	stop := context.AfterFunc(g.stopCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// WatchLifetime draws how long one watch is served: a random duration in
// [MaxWatchDuration/2, MaxWatchDuration], or 0 (no bound).
func (g *gate) WatchLifetime() time.Duration {
	if g.maxWatchDuration <= 0 {
		return 0
	}
	half := g.maxWatchDuration / 2
	return half + rand.N(g.maxWatchDuration-half+1)
}

// Stopping reports whether Shutdown has begun.
func (g *gate) Stopping() bool { return g.stopCtx.Err() != nil }

// Stopped returns a channel closed when Shutdown begins.
func (g *gate) Stopped() <-chan struct{} { return g.stopCtx.Done() }

// RetryAfter is the delay a 429 or 503 answer advertises.
func (g *gate) RetryAfter() time.Duration { return g.retryAfter }

// ShuttingDown answers 503 to a request that came in, or was cut, while the server shuts
// down.
func (g *gate) ShuttingDown(w http.ResponseWriter) {
	writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server is shutting down"}, g.retryAfter)
}

// Shutdown refuses new requests, ends the context of every request in progress and
// waits for them to leave, or for ctx.
func (g *gate) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.stop()
	done := make(chan struct{})
	go func() {
		g.requests.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the counters.
func (g *gate) Stats() *counters { return &g.stats }

// slots counts requests in progress, in all and per client, under gate.mu.
type slots struct {
	total     int
	perClient map[string]int
}

// take reserves a slot for client unless a limit (negative: none) is reached; it reports
// which limit refused it.
func (s *slots) take(client string, limit, clientLimit int) (ok bool, which string) {
	switch {
	case limit > 0 && s.total >= limit:
		return false, fmt.Sprintf("the server's limit is %d", limit)
	case clientLimit > 0 && s.perClient[client] >= clientLimit:
		return false, fmt.Sprintf("the limit per client is %d", clientLimit)
	}
	if s.perClient == nil {
		s.perClient = make(map[string]int)
	}
	s.total++
	s.perClient[client]++
	return true, ""
}

func (s *slots) release(client string) {
	s.total--
	if n := s.perClient[client] - 1; n > 0 {
		s.perClient[client] = n
	} else {
		delete(s.perClient, client)
	}
}

// counters are the counters behind ServeStats, updated atomically; each method counts
// one of its field's kind.
type counters struct {
	lists, watches, rejected, listsRejected, evicted, badRequests, denied atomic.Uint64
	encodeErrors, tooLarge, indexErrors                                   atomic.Uint64
	openWatches                                                           atomic.Int64
}

func (c *counters) List()        { c.lists.Add(1) }
func (c *counters) BadRequest()  { c.badRequests.Add(1) }
func (c *counters) Denied()      { c.denied.Add(1) }
func (c *counters) Evicted()     { c.evicted.Add(1) }
func (c *counters) EncodeError() { c.encodeErrors.Add(1) }
func (c *counters) TooLarge()    { c.tooLarge.Add(1) }
func (c *counters) IndexError()  { c.indexErrors.Add(1) }

// WatchOpened counts a watch started and open; WatchClosed counts it closed.
func (c *counters) WatchOpened() { c.watches.Add(1); c.openWatches.Add(1) }
func (c *counters) WatchClosed() { c.openWatches.Add(-1) }

// Read returns the counters' values.
func (c *counters) Read() ServeStats {
	return ServeStats{
		Lists: c.lists.Load(), Watches: c.watches.Load(), OpenWatches: c.openWatches.Load(),
		Rejected: c.rejected.Load(), ListsRejected: c.listsRejected.Load(), Evicted: c.evicted.Load(),
		BadRequests: c.badRequests.Load(), Denied: c.denied.Load(), EncodeErrors: c.encodeErrors.Load(),
		TooLarge: c.tooLarge.Load(), IndexErrors: c.indexErrors.Load(),
	}
}
