package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/etcd"
)

// retryDelays collects the delays of the informer's retried watches, read from the
// reported errors ("… (retrying in 50ms): …"), and the informer's debug messages.
type retryDelays struct {
	mu     sync.Mutex
	delays []time.Duration
	msgs   []string
}

var retryingIn = regexp.MustCompile(`\(retrying in ([0-9.]+[mµn]?s)\)`)

func (r *retryDelays) report(err error) {
	if m := retryingIn.FindStringSubmatch(err.Error()); m != nil {
		d, _ := time.ParseDuration(m[1])
		r.mu.Lock()
		r.delays = append(r.delays, d)
		r.mu.Unlock()
	}
}

// take returns and forgets what was collected.
func (r *retryDelays) take() ([]time.Duration, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, m := r.delays, r.msgs
	r.delays, r.msgs = nil, nil
	return d, m
}

func (r *retryDelays) Enabled(context.Context, slog.Level) bool { return true }
func (r *retryDelays) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *retryDelays) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *retryDelays) WithGroup(string) slog.Handler      { return r }

// Seven back-to-back faults, as in the report that found catch-up times growing from 1 s
// to 55 s: each round the informer is cut off from etcd by a proxy, keys change, the
// history is compacted past its revision, and the connection comes back. Each round the
// retries of the cut-off watch start again from Backoff.Initial (the healthy watch before
// the fault reset the backoff), and the watch's expiry after the reconnect leads to a
// relist at once (it followed progress), never to a backoff: the recovery does not grow
// from round to round. Measured in backoff delays and relists, not wall time; the wall
// catch-up times are logged.
func TestRepeatedCompactionsRecoverBounded(t *testing.T) {
	srv, direct := startWithClient(t)
	px := startProxy(t, srv.Endpoint())
	viaProxy := newClient(t, px.Addr())
	const p = "/rounds/"
	put(t, direct, p+"a", "0")
	var lastRev int64
	src, err := etcd.NewKV(viaProxy, p, decodeKV, etcd.Options{RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rec := &retryDelays{}
	const initial = 50 * time.Millisecond
	inf, _ := startInformer(t, src, informer.Options[string, *item]{
		Revision:     func(it *item) string { return etcd.FormatRevision(it.ModRevision) },
		Backoff:      informer.Backoff{Initial: initial, Max: 5 * time.Second, Jitter: -1},
		ErrorHandler: rec.report,
		Logger:       slog.New(rec),
	}, nil)
	ctx := context.Background()
	var catchUp []time.Duration
	for round := range 7 {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		lastRev = put(t, direct, p+"a", fmt.Sprint(round+1))
		waitForRevision(t, wctx, inf, src, lastRev) // healthy: the watch delivers
		rec.take()
		relists := inf.Stats().Relists

		px.Cut()
		put(t, direct, p+"b", fmt.Sprint(round))
		lastRev = put(t, direct, p+"c", fmt.Sprint(round))
		if _, err := direct.Compact(ctx, lastRev, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		px.Resume()
		waitForRevision(t, wctx, inf, src, lastRev)
		catchUp = append(catchUp, time.Since(start).Round(time.Millisecond))
		cancel()

		delays, msgs := rec.take()
		if len(delays) > 0 && delays[0] != initial {
			t.Errorf("round %d: first retry after %v, want Backoff.Initial %v (the backoff must start again after a healthy watch); delays %v", round, delays[0], initial, delays)
		}
		for i := 1; i < len(delays); i++ {
			if delays[i] != min(2*delays[i-1], 5*time.Second) {
				t.Errorf("round %d: delays %v do not double from Initial", round, delays)
			}
		}
		if n := inf.Stats().Relists - relists; n != 1 {
			t.Errorf("round %d: %d relists, want 1", round, n)
		}
		var prompt, backedOff int
		for _, m := range msgs {
			switch {
			case strings.Contains(m, "expired after progress; relisting promptly"):
				prompt++
			case strings.Contains(m, "expired with no progress"):
				backedOff++
			}
		}
		if prompt != 1 || backedOff != 0 {
			t.Errorf("round %d: %d prompt relists and %d after a backoff, want 1 and 0; log %q", round, prompt, backedOff, msgs)
		}
		if o, ok := inf.Get(p + "c"); !ok || o.Value != fmt.Sprint(round) {
			t.Errorf("round %d: cache has %s = %+v", round, p+"c", o)
		}
		t.Logf("round %d: retry delays %v, catch-up %v", round, delays, catchUp[round])
	}
	if n := inf.Stats().ConsistentLists; n != 0 {
		t.Errorf("%d consistent lists: a relist at the last revision seen is enough for etcd", n)
	}
	t.Logf("catch-up after each fault: %v", catchUp)
}

// With no ErrorHandler and etcd unreachable, the informer says why it cannot sync: the
// error names the informer once, the operation, and the endpoints, with no second
// "informer:" prefix.
func TestUnreachableErrorNamesEndpoints(t *testing.T) {
	ln := freeURL(t) // nothing listens there
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ln.Host}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	src, err := etcd.New(c, "/cfg/", decodeItem, etcd.Options{RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(src, informer.Options[string, *item]{
		Key:    itemKey,
		Name:   "config",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := run(inf)
	defer stop()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	if informer.WaitForCacheSync(sctx, inf) == nil {
		t.Fatal("synced with nothing to sync from")
	}
	st := inf.Stats()
	at, lastErr := st.LastErrorAt, st.LastError
	if lastErr == nil || at.IsZero() {
		t.Fatal("no LastError")
	}
	want := `informer "config": list: etcd list at ` + ln.Host + `: unavailable`
	if msg := lastErr.Error(); !strings.HasPrefix(msg, want) || strings.Count(msg, "informer") != 1 {
		t.Fatalf("error %q, want it to start with %q and say \"informer\" once", msg, want)
	}
	if !errors.Is(lastErr, informer.ErrUnavailable) || !errors.Is(lastErr, informer.ErrRetryable) {
		t.Fatalf("error %v does not match ErrUnavailable and ErrRetryable", lastErr)
	}
}
