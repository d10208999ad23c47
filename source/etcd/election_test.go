package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/etcd/election"
)

// candidate is one manager with its own elector (through a proxy the test can cut) and a
// leader-only writer making fenced writes under /acc/.
type candidate struct {
	name   string
	proxy  *proxy
	el     *election.Elector
	m      *manager.Manager
	cancel context.CancelFunc
	done   chan error
	terms  chan manager.Term // each term the writer starts in
	seen   int64             // the last term taken from terms
}

// startReplica starts a candidate whose elector dials endpoint through a proxy, and whose
// writer writes through data.
func startReplica(t *testing.T, name, endpoint string, data *clientv3.Client, ttl time.Duration) *candidate {
	t.Helper()
	r := &candidate{name: name, proxy: startProxy(t, endpoint), done: make(chan error, 1), terms: make(chan manager.Term, 100)}
	var err error
	r.el, err = election.New(clientv3.Config{
		Endpoints:   []string{r.proxy.Addr()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	}, election.Options{Prefix: "/election/", Identity: name, TTL: ttl, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.m = manager.New(manager.Options{
		Elector:       r.el,
		CampaignRetry: 50 * time.Millisecond,
		OnLeaderStuck: func(names []string) { t.Errorf("%s: leader-only runnables stuck: %v", name, names) },
		Logger:        slog.New(slog.DiscardHandler),
	})
	r.m.AddLeader("writer", manager.RunnableFunc(func(ctx context.Context) error {
		term, _ := manager.TermFrom(ctx)
		r.terms <- term
		tick := time.NewTicker(10 * time.Millisecond) // the writer's pace, not synchronisation
		defer tick.Stop()
		for n := 0; ; n++ {
			key := fmt.Sprintf("/acc/%020d-%s-%d", term.Value, name, n)
			if _, err := election.Fenced(ctx, data, clientv3.OpPut(key, strconv.FormatInt(term.Value, 10))); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, election.ErrStaleTerm) {
					return nil // the term is over; the manager hears it too
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.m.Start(ctx) }()
	t.Cleanup(func() { r.stop(t); r.el.Close() })
	return r
}

// waitWriter waits until r's writer has started in term.
func (r *candidate) waitWriter(t *testing.T, term manager.Term) {
	t.Helper()
	for r.seen != term.Value {
		r.seen = recvOne(t, r.terms, r.name+"'s writer").Value
	}
}

func (r *candidate) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := recvOne(t, r.done, r.name+" to stop"); err != nil {
		t.Errorf("%s: Start: %v", r.name, err)
	}
}

func recvOne[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// leaderOf waits until exactly one of rs leads and returns it and its term.
func leaderOf(t *testing.T, rs []*candidate) (*candidate, manager.Term) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var leaders []*candidate
		var term manager.Term
		for _, r := range rs {
			if tm, ok := r.m.Leading(); ok {
				leaders, term = append(leaders, r), tm
			}
		}
		if len(leaders) == 1 {
			return leaders[0], term
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatal("no single leader within 30s")
	panic("unreachable")
}

// acceptedTerms returns the term of every accepted write, in etcd's commit order.
func acceptedTerms(t *testing.T, c *clientv3.Client) []int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), "/acc/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kvs := resp.Kvs
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].ModRevision < kvs[j].ModRevision })
	var terms []int64
	for _, kv := range kvs {
		v, _ := strconv.ParseInt(string(kv.Value), 10, 64)
		terms = append(terms, v)
	}
	return terms
}

// Three managers elect one leader; cutting the leader off etcd ends its term within the
// renew deadline and another leads once the lease expired; the cut-off leader's write under
// its old term is refused by etcd, and the accepted writes never interleave two terms.
func TestElectionFailoverAndFencing(t *testing.T) {
	srv, data := startWithClient(t)
	const ttl = 2 * time.Second
	var rs []*candidate
	for i := range 3 {
		rs = append(rs, startReplica(t, fmt.Sprint("r", i), srv.Endpoint(), data, ttl))
	}
	var failovers []time.Duration
	stale := 0
	for round := range 3 {
		old, oldTerm := leaderOf(t, rs)
		t.Logf("round %d: %s leads term %d", round, old.name, oldTerm.Value)
		old.waitWriter(t, oldTerm)
		cut := time.Now()
		old.proxy.Cut()
		// The old leader stops within its renew deadline, before its lease can expire.
		deadline := cut.Add(ttl * 2 / 3).Add(500 * time.Millisecond)
		for {
			if _, ok := old.m.Leading(); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s still leads %v after the renew deadline", round, old.name, time.Since(cut))
			}
			time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
		}
		var others []*candidate
		for _, r := range rs {
			if r != old {
				others = append(others, r)
			}
		}
		next, nextTerm := leaderOf(t, others)
		next.waitWriter(t, nextTerm)
		failovers = append(failovers, time.Since(cut))
		if nextTerm.Value <= oldTerm.Value {
			t.Fatalf("round %d: new term %d not above the old %d", round, nextTerm.Value, oldTerm.Value)
		}
		// The old leader, resuming with its old term, is refused by etcd itself.
		_, err := election.Fenced(manager.WithTerm(context.Background(), oldTerm), data, clientv3.OpPut("/acc/stale", strconv.FormatInt(oldTerm.Value, 10)))
		if !errors.Is(err, election.ErrStaleTerm) {
			t.Fatalf("round %d: a write under the old term %d: %v; want ErrStaleTerm", round, oldTerm.Value, err)
		}
		stale++
		old.proxy.Resume() // it campaigns again, as a follower
	}
	terms := acceptedTerms(t, data)
	if !slices.IsSorted(terms) {
		t.Fatalf("accepted writes interleave terms: %v", terms)
	}
	if slices.Contains(terms, 0) {
		t.Fatalf("a stale write was accepted: %v", terms)
	}
	t.Logf("failovers after a cut leader (TTL %v): %v; stale writes refused %d, accepted 0; %d writes accepted in %d terms",
		ttl, failovers, stale, len(terms), len(slices.Compact(slices.Clone(terms))))
}

// Fenced needs a term, and refuses one whose key is gone or was never there.
func TestFencedRefusesWithoutACurrentTerm(t *testing.T) {
	_, c := startWithClient(t)
	if _, err := election.Fenced(context.Background(), c, clientv3.OpPut("/x", "1")); !errors.Is(err, election.ErrNoTerm) {
		t.Fatalf("Fenced without a term: %v; want ErrNoTerm", err)
	}
	rev := put(t, c, "/election/k", "me")
	ctx := manager.WithTerm(context.Background(), manager.Term{Key: "/election/k", Holder: "me", Value: rev})
	if _, err := election.Fenced(ctx, c, clientv3.OpPut("/x", "1")); err != nil {
		t.Fatalf("Fenced under the current term: %v", err)
	}
	del(t, c, "/election/k")
	put(t, c, "/election/k", "me") // the same key again: a newer create revision
	_, err := election.Fenced(ctx, c, clientv3.OpPut("/x", "2"))
	if !errors.Is(err, election.ErrStaleTerm) || !strings.Contains(err.Error(), fmt.Sprintf("term %d", rev)) {
		t.Fatalf("Fenced under a recreated key: %v; want ErrStaleTerm naming term %d", err, rev)
	}
	resp, err := c.Get(context.Background(), "/x")
	if err != nil || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("/x = %v, %v; want 1: the stale write must not apply", resp, err)
	}
}

// A manager stopped while leading resigns: another candidate leads at once, well before the
// lease would have expired.
func TestElectionResignsOnStop(t *testing.T) {
	srv, data := startWithClient(t)
	const ttl = 10 * time.Second
	a := startReplica(t, "a", srv.Endpoint(), data, ttl)
	leaderOf(t, []*candidate{a})
	b := startReplica(t, "b", srv.Endpoint(), data, ttl)
	t0 := time.Now()
	a.stop(t)
	leaderOf(t, []*candidate{b})
	if took := time.Since(t0); took > ttl/2 {
		t.Fatalf("b led %v after a stopped; a resignation must not wait for the TTL (%v)", took, ttl)
	}
}
