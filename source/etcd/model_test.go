package etcd_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
)

var (
	etcdModelSeed  = flag.Uint64("model.seed", 0, "run only this seed of TestEtcdModel (to reproduce a failure)")
	etcdModelSeeds = flag.Int("model.seeds", 0, "number of seeds of TestEtcdModel (0: 3, or 1 with -short); make soak raises it")
)

// modelDeleted marks a delete in a key's history.
const modelDeleted = informertest.Deleted

// modelView is one handler of the model: informertest's life-cycle checker, named.
type modelView struct {
	*informertest.LifeCycle[*item]
	name string
}

func newModelView(name string, coalesce bool) *modelView {
	return &modelView{
		LifeCycle: informertest.NewLifeCycle(func(it *item) (string, string) { return it.Key, it.Value },
			informertest.LifeCycleOptions{Coalesce: coalesce}),
		name: name,
	}
}

// TestEtcdModel runs seeded random scenarios of puts and deletes against a real embedded
// etcd, with two faults per run: a compaction while the informer is cut off by a proxy
// (its watch then finds its revision compacted and it lists again, deletes arriving as
// tombstones), and an etcd stop and restart on the same data directory. After each run
// the cache equals a direct Get of the prefix, and each handler saw, per key, a
// subsequence of the key's real states, in order, with a valid life cycle, ending at the
// final state. A failing seed is printed; rerun it with -run TestEtcdModel -model.seed=N.
func TestEtcdModel(t *testing.T) {
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	if *etcdModelSeeds > 0 {
		seeds = *etcdModelSeeds
	}
	for s := 1; s <= seeds; s++ {
		seed := uint64(s)
		if *etcdModelSeed != 0 {
			if s > 1 {
				break
			}
			seed = *etcdModelSeed
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			start := time.Now()
			runEtcdModel(t, seed)
			t.Logf("seed %d: %v", seed, time.Since(start).Round(time.Millisecond))
		})
	}
}

func runEtcdModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (rerun with -run TestEtcdModel -model.seed=%d): %s", seed, seed, fmt.Sprintf(format, args...))
	}

	srv, direct := startWithClient(t)
	px := startProxy(t, srv.Endpoint())
	viaProxy := newClient(t, px.Addr())
	const prefix = "/model/"

	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sk%d", prefix, i)
	}
	history := map[string][]string{}
	live := map[string]bool{}
	lastRev := int64(0)
	// write puts or deletes a random key (a put when forcePut) and returns the key and
	// etcd's revision after the write (a delete of a missing key does not change it).
	write := func(forcePut ...bool) (string, int64) {
		key := keys[rng.IntN(len(keys))]
		if len(forcePut) > 0 || rng.IntN(100) < 65 {
			val := fmt.Sprintf("%s.%d", strings.TrimPrefix(key, prefix), len(history[key]))
			history[key] = append(history[key], val)
			live[key] = true
			lastRev = put(t, direct, key, val)
			return key, lastRev
		}
		resp, err := direct.Delete(context.Background(), key)
		if err != nil {
			fail("delete %s: %v", key, err)
		}
		if resp.Deleted > 0 {
			history[key] = append(history[key], modelDeleted)
			live[key] = false
		}
		lastRev = resp.Header.Revision
		return key, lastRev
	}
	for range 3 + rng.IntN(6) {
		write()
	}
	initial := map[string]string{}
	for k, h := range history {
		if live[k] {
			initial[k] = h[len(h)-1]
		}
	}

	// With NewKV the objects carry their ModRevision, so that a relist does not report
	// the objects that did not change.
	src, err := etcd.NewKV(viaProxy, prefix, decodeKV, etcd.Options{RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := new(testkit.Errors)
	inf, err := informer.New(src, informer.Options[string, *item]{
		Key:             itemKey,
		Revision:        func(it *item) string { return etcd.FormatRevision(it.ModRevision) },
		Backoff:         informer.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		MinWatchTimeout: time.Second,
		ErrorHandler:    errs.Report,
		MaxBatch:        1 + rng.IntN(8),
	})
	if err != nil {
		t.Fatal(err)
	}
	views := []*modelView{newModelView("block", false), newModelView("coalesce", true)}
	var regs [2]*informer.Registration
	if regs[0], err = inf.AddHandler(views[0], informer.HandlerOptions{Name: "block", Policy: informer.Block, QueueLength: 1 + rng.IntN(4)}); err != nil {
		t.Fatal(err)
	}
	if regs[1], err = inf.AddHandler(views[1], informer.HandlerOptions{Name: "coalesce", Policy: informer.Coalesce, QueueLength: 1 + rng.IntN(3)}); err != nil {
		t.Fatal(err)
	}
	ctx, _, synced := runSynced(t, inf, 15*time.Second)
	if !synced {
		fail("informer did not sync")
	}
	// HasSynced: the initial list is in the cache (no write happened since).
	got := map[string]string{}
	for k, it := range inf.All() {
		got[k] = it.Value
	}
	if !maps.Equal(got, initial) {
		fail("synced cache differs from the initial list:\n%s", mapDiff(got, initial))
	}

	const ops = 40
	compactAt := 5 + rng.IntN(ops-10)
	restartAt := 5 + rng.IntN(ops-10)
	for restartAt == compactAt {
		restartAt = 5 + rng.IntN(ops-10)
	}
	for op := range ops {
		switch op {
		case compactAt:
			// Cut off, writes, a physical compaction at the last revision, reconnect:
			// the watch's revision is gone and the informer must relist.
			// The informer first catches up, so that it is watching when cut off.
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			waitForRevision(t, wctx, inf, src, lastRev)
			wcancel()
			listsBefore := inf.Stats().Relists
			px.Cut()
			// Two puts: the informer resumes watching at its revision + 1, and etcd still
			// serves a watch that starts at the compaction revision itself, so the
			// compaction must be past that to force a relist.
			write(true)
			write(true)
			for range 1 + rng.IntN(5) {
				write()
			}
			if _, err := direct.Compact(context.Background(), lastRev, clientv3.WithCompactPhysical()); err != nil {
				fail("compact at %d: %v", lastRev, err)
			}
			for range rng.IntN(3) {
				write()
			}
			px.Resume()
			wctx, wcancel = context.WithTimeout(ctx, 10*time.Second)
			waitForRevision(t, wctx, inf, src, lastRev)
			wcancel()
			// The changes the informer missed are compacted away: it must have listed
			// again. Whether the source said so (an expiration) or the informer listed
			// after another failure of its reconnection is not fixed.
			if inf.Stats().Relists == listsBefore {
				fail("compaction during the disconnect at op %d: no relist", op)
			}
		case restartAt:
			// etcd goes down (its connections drop at once) and comes back on the same
			// data directory; writes before and after.
			px.Cut()
			srv.Stop()
			px.Resume() // nothing listens behind the proxy: connections are refused
			srv.Restart()
			for range 1 + rng.IntN(4) {
				write()
			}
		}
		key, rev := write()
		if rng.IntN(100) < 15 {
			// Read-your-writes: a write's revision, once waited for, is visible.
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			waitForRevision(t, wctx, inf, src, rev)
			wcancel()
			it, ok := inf.Get(key)
			switch h := history[key]; {
			case live[key] && (!ok || it.Value != h[len(h)-1]):
				fail("after WaitForRevision(%d): %s is %+v (present %v), want %s", rev, key, it, ok, h[len(h)-1])
			case !live[key] && ok:
				fail("after WaitForRevision(%d): %s is %+v, want it gone", rev, key, it)
			}
		}
	}

	// Writes stop. The cache must reach etcd's revision, and every handler must converge
	// to the final state (there is no order across keys: no single last notification
	// can serve as a barrier, so poll each view with a deadline).
	assertMirrors(t, inf, src, direct, prefix)
	final := map[string]string{}
	for k, h := range history {
		if live[k] {
			final[k] = h[len(h)-1]
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for i, v := range views {
		// Converged can hold for a moment while a handler is behind (an earlier delete is
		// the final state too): its queue must be empty as well.
		for (!v.Converged(final) || regs[i].Stats().Queued != 0) && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond) // polling: nothing signals "handler caught up"
		}
	}
	cache := map[string]string{}
	for k, it := range inf.All() {
		cache[k] = it.Value
	}
	if !maps.Equal(cache, final) {
		fail("cache differs from the model:\n%s", mapDiff(cache, final))
	}
	for _, v := range views {
		for _, problem := range v.Check(history, final) {
			fail("handler %s: %s", v.name, problem)
		}
	}
	for _, err := range errs.All() {
		if !errors.Is(err, informer.ErrRetryable) && !errors.Is(err, informer.ErrExpired) {
			fail("unexpected error reported: %v", err)
		}
	}
}
