package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// seenStates records the states of the cache seen under each revision label, as
// "key=value …" in key order.
type seenStates struct {
	mu     sync.Mutex
	byRev  map[string]map[string]int // label → state → times seen
	states int
}

func (s *seenStates) add(rev, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byRev == nil {
		s.byRev = map[string]map[string]int{}
	}
	if s.byRev[rev] == nil {
		s.byRev[rev] = map[string]int{}
	}
	s.byRev[rev][state]++
	s.states++
}

// stateOf renders a snapshot as "key=value …" in key order.
func stateOf(sn *informer.Snapshot[string, *item]) string {
	var b strings.Builder
	for k, it := range sn.All() {
		fmt.Fprintf(&b, "%s=%s ", k, it.Value)
	}
	return b.String()
}

// recordingFile is a persist.File that records every state it saves.
type recordingFile struct {
	*persist.File[string, *item]
	saved *seenStates
}

func (f recordingFile) Save(ctx context.Context, desc informer.PersistedCache, state *informer.Snapshot[string, *item]) error {
	f.saved.add(state.Revision(), stateOf(state))
	return f.File.Save(ctx, desc, state)
}

// A transaction is one unit from etcd to every reader: with multi-key transactions (and
// a write outside the prefix before each, so that revisions skip), a Transform slow
// enough for the writer to catch up with the reflector inside a transaction, goroutines
// reading snapshots and the cache saved every millisecond, every state read or saved
// under revision R is etcd's state of the prefix at R.
func TestTransactionsAreReadAndSavedWhole(t *testing.T) {
	_, c := startWithClient(t)
	const p = "/atomic/"
	src := newSource(t, c, p, etcd.Options{})
	f, err := persist.New[string, *item](t.TempDir(), persist.Options[*item]{Schema: "v1", Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	read, saved := new(seenStates), new(seenStates)
	errs := new(testkit.Errors)
	inf, err := informer.New(src, informer.Options[string, *item]{
		Key:          itemKey,
		ErrorHandler: errs.Report,
		Persist:      recordingFile{File: f, saved: saved},
		Transform: func(it *item) (*item, error) {
			time.Sleep(200 * time.Microsecond) // a slow Transform, not a synchronisation
			return it, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, stop, synced := runSynced(t, inf, 30*time.Second)
	if !synced {
		t.Fatal("informer did not sync")
	}

	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			var last *informer.Snapshot[string, *item]
			for {
				select {
				case <-done:
					return
				default:
				}
				if sn := inf.Snapshot(); sn != last {
					last = sn
					read.add(sn.Revision(), stateOf(sn))
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(35, 1))
	var last int64
	for round := range 60 {
		put(t, c, "/outside", fmt.Sprint(round))
		n := 2 + rng.IntN(7) // 2 to 8 keys
		ops := make([]clientv3.Op, 0, n)
		for _, k := range rng.Perm(16)[:n] {
			key := fmt.Sprintf("%sk%02d", p, k)
			if rng.IntN(4) == 0 {
				ops = append(ops, clientv3.OpDelete(key))
			} else {
				ops = append(ops, clientv3.OpPut(key, fmt.Sprint(round)))
			}
		}
		last = txn(t, c, ops...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitForRevision(t, ctx, inf, src, last)
	close(done)
	readers.Wait()
	stop() // and the final save
	for _, err := range errs.All() {
		if !errors.Is(err, context.Canceled) { // a periodic save the stop cut short
			t.Errorf("error reported: %v", err)
		}
	}

	for _, seen := range []struct {
		what   string
		states *seenStates
	}{{"read", read}, {"saved", saved}} {
		torn := 0
		for rev, states := range seen.states.byRev {
			if rev == "" {
				continue // before the first list
			}
			r, err := etcd.ParseRevision(rev)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithRev(r))
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, kv := range resp.Kvs {
				fmt.Fprintf(&b, "%s=%s ", kv.Key, kv.Value)
			}
			want := b.String()
			for state, times := range states {
				if state != want {
					torn += times
					if torn <= 3 {
						t.Errorf("a state %s under revision %d:\n got %s\nwant %s", seen.what, r, state, want)
					}
				}
			}
		}
		t.Logf("%s: %d states under %d revisions, %d not etcd's state at their revision", seen.what, seen.states.states, len(seen.states.byRev), torn)
		if torn > 0 {
			t.Errorf("%d states %s were not etcd's state at their revision", torn, seen.what)
		}
	}
	if saved.states < 2 {
		t.Fatalf("%d saves; want periodic saves and the final one", saved.states)
	}
}
