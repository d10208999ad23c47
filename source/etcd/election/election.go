// Package election is leader election on etcd for the manager package, with fencing: a
// lease-backed election under a key prefix (etcd's concurrency.Election), whose term is
// the create revision of this replica's election key, and Fenced, which makes a write a
// transaction that etcd refuses once that term is no longer current.
//
// It designs against etcd's known traps. The session's own Done fires only a full TTL
// after the last acknowledged keepalive, when the server may already have let another
// replica lead; so the election renews the lease itself and ends the term when no renewal
// was acknowledged within its renew deadline, below the TTL, measured from when the
// renewal was sent. Campaign can return with the session already expired; so Campaign
// reads its key back and fails unless it is still there with its revision and lease. A
// busy shared client can starve renewal; so the Elector dials its own client.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/informer-go/informer/manager"
)

// Defaults of Options.
const (
	DefaultTTL         = 15 * time.Second
	DefaultStopTimeout = time.Second
)

// Options configures an Elector. Every zero value is a documented default.
type Options struct {
	// Prefix is the election's key prefix, shared by every replica; required. Each
	// candidate's key is Prefix, a "/" unless Prefix ends with one, and its lease ID in hex.
	Prefix string
	// Identity is this replica's value under its key, and Term.Holder; default
	// hostname-pid.
	Identity string
	// TTL is the lease's time to live, in whole seconds (etcd's unit); default DefaultTTL
	// (15 s). A replica that stops renewing loses the lease TTL after its last renewal.
	TTL time.Duration
	// RenewDeadline is how long a term survives without an acknowledged renewal; default
	// two thirds of TTL. It must be below TTL: the gap is the time the leader-only
	// runnables have to stop before another replica may lead.
	RenewDeadline time.Duration
	// RetryPeriod is the pause between renewals; default a fifth of RenewDeadline. It
	// must be below RenewDeadline.
	RetryPeriod time.Duration
	// StopTimeout bounds each call to etcd made on the way out: withdrawing a candidacy
	// when Campaign's context ends, revoking the lease when a campaign fails or a term is
	// resigned. Default DefaultStopTimeout (1 s). A stop never waits on etcd longer: what
	// such a call leaves undone, etcd does itself when the lease expires, TTL later.
	StopTimeout time.Duration
	// Logger receives the election's logs; default slog.Default().
	Logger *slog.Logger
}

// Elector is a manager.Elector on etcd. It owns its client: Close closes it.
type Elector struct {
	client *clientv3.Client
	opts   Options
	log    *slog.Logger
	wg     sync.WaitGroup // candidacies withdrawn after Campaign returned; Close waits
}

var (
	_ manager.TimedElector   = (*Elector)(nil)
	_ manager.LeaderObserver = (*Elector)(nil)
)

// New dials etcd with cfg, for the election alone (a client shared with busy informers or
// writers can starve renewals), and returns an Elector. It fails on invalid options and
// if the client cannot be created (clientv3.New's errors).
func New(cfg clientv3.Config, opts Options) (*Elector, error) {
	if opts.Prefix == "" {
		return nil, errors.New("election: Options.Prefix is required")
	}
	if opts.Identity == "" {
		host, _ := os.Hostname()
		opts.Identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	opts.TTL = opts.TTL.Round(time.Second)
	if opts.TTL < 2*time.Second {
		return nil, fmt.Errorf("election: TTL %v is below etcd's minimum of 2s", opts.TTL)
	}
	if opts.RenewDeadline <= 0 {
		opts.RenewDeadline = opts.TTL * 2 / 3
	}
	if opts.RenewDeadline >= opts.TTL {
		return nil, fmt.Errorf("election: RenewDeadline %v must be below TTL %v", opts.RenewDeadline, opts.TTL)
	}
	if opts.RetryPeriod <= 0 {
		opts.RetryPeriod = opts.RenewDeadline / 5
	}
	if opts.RetryPeriod >= opts.RenewDeadline {
		return nil, fmt.Errorf("election: RetryPeriod %v must be below RenewDeadline %v, so that a renewal can be retried before the term ends", opts.RetryPeriod, opts.RenewDeadline)
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("election: dialing etcd: %w", err)
	}
	return &Elector{client: c, opts: opts, log: opts.Logger.With("election", opts.Prefix, "identity", opts.Identity)}, nil
}

// Close closes the Elector's client and waits for the calls left in flight after a stop
// (which the closed client ends); a term still held then ends within its renew deadline.
func (e *Elector) Close() error {
	err := e.client.Close()
	e.wg.Wait()
	return err
}

// Timing returns the Elector's TTL, RenewDeadline and RetryPeriod, which manager.New
// checks its LeaderStopMargin against.
func (e *Elector) Timing() manager.Timing {
	return manager.Timing{TTL: e.opts.TTL, RenewDeadline: e.opts.RenewDeadline, RetryPeriod: e.opts.RetryPeriod}
}

// Campaign grants a lease, keeps it renewed, and waits until this replica's key is the
// oldest under the prefix. Once elected it reads the key back: a session that expired
// while campaigning fails here instead of returning a phantom leadership. It returns
// ctx's error when ctx ends first (its key is then deleted), and any other error of etcd.
func (e *Elector) Campaign(ctx context.Context) (manager.Leadership, error) {
	sent := time.Now()
	grant, err := e.client.Grant(ctx, int64(e.opts.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("election %s: granting a lease: %w", e.opts.Prefix, err)
	}
	l := newTerm(e, grant.ID, sent, time.Duration(grant.TTL)*time.Second)
	ok := false
	var stopBy time.Time // when ctx ended: the withdrawal and the revocation share StopTimeout
	defer func() {
		if !ok {
			if stopBy.IsZero() {
				stopBy = time.Now().Add(e.opts.StopTimeout)
			}
			rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), stopBy)
			defer cancel()
			l.release(rctx)
		}
	}()
	sess, err := concurrency.NewSession(e.client, concurrency.WithLease(grant.ID), concurrency.WithContext(l.ctx))
	if err != nil {
		return nil, fmt.Errorf("election %s: session: %w", e.opts.Prefix, err)
	}
	el := concurrency.NewElection(sess, strings.TrimSuffix(e.opts.Prefix, "/")) // it adds the "/"
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel) // the lease lost while waiting: give up
	defer stop()
	if err := e.campaign(cctx, el, &stopBy); err != nil {
		if ctx.Err() == nil && l.ctx.Err() != nil {
			return nil, fmt.Errorf("election %s: lease lost while campaigning: %v", e.opts.Prefix, context.Cause(l.ctx))
		}
		return nil, fmt.Errorf("election %s: campaigning: %w", e.opts.Prefix, err)
	}
	resp, err := e.client.Get(ctx, el.Key())
	if err != nil {
		return nil, fmt.Errorf("election %s: reading back the elected key %s: %w", e.opts.Prefix, el.Key(), err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != el.Rev() || clientv3.LeaseID(resp.Kvs[0].Lease) != grant.ID {
		return nil, fmt.Errorf("election %s: elected, but key %s (revision %d, lease %x) is gone: the session expired while campaigning",
			e.opts.Prefix, el.Key(), el.Rev(), grant.ID)
	}
	select {
	case <-l.lost:
		return nil, fmt.Errorf("election %s: elected, but the lease was lost meanwhile: %v", e.opts.Prefix, context.Cause(l.ctx))
	default:
	}
	l.term = manager.Term{Key: el.Key(), Holder: e.opts.Identity, Value: el.Rev()}
	l.watchKey(resp.Header.Revision)
	ok = true
	e.log.Info("elected", "key", el.Key(), "term", el.Rev())
	return l, nil
}

// campaign runs el.Campaign until ctx ends, and then at most StopTimeout more (until
// stopBy, which it sets): when its
// context ends, etcd's Campaign withdraws the candidacy with the client's own context,
// waiting for etcd however long it takes (forever, through a partition). The withdrawal
// goes on in the background until etcd answers or Close; the lease's revocation or expiry
// removes the candidacy anyway.
func (e *Elector) campaign(ctx context.Context, el *concurrency.Election, stopBy *time.Time) error {
	errc := make(chan error, 1)
	e.wg.Go(func() { errc <- el.Campaign(ctx, e.opts.Identity) })
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	*stopBy = time.Now().Add(e.opts.StopTimeout)
	t := time.NewTimer(e.opts.StopTimeout)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		return fmt.Errorf("%w (etcd did not answer the withdrawal within %v)", ctx.Err(), e.opts.StopTimeout)
	}
}

// rpcLeaseNotFound is etcd's error for a lease that expired or was revoked.
var rpcLeaseNotFound = rpctypes.ErrLeaseNotFound

// term is one campaign's lease and, once elected, its term.
type term struct {
	e     *Elector
	lease clientv3.LeaseID
	term  manager.Term

	ctx    context.Context // ends when the term ends: lost or released
	cancel context.CancelCauseFunc
	lost   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	renewed atomic.Int64 // unix nanos: when the last acknowledged renewal was sent
	ttl     atomic.Int64 // the lease's TTL as granted or last renewed
}

func newTerm(e *Elector, id clientv3.LeaseID, sent time.Time, ttl time.Duration) *term {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &term{e: e, lease: id, ctx: ctx, cancel: cancel, lost: make(chan struct{})}
	l.renewed.Store(sent.UnixNano())
	l.ttl.Store(int64(ttl))
	l.wg.Go(l.renew)
	return l
}

func (l *term) Term() manager.Term           { return l.term }
func (l *term) Lost() <-chan struct{}        { return l.lost }
func (l *term) Renewed() time.Time           { return time.Unix(0, l.renewed.Load()) }
func (l *term) RenewDeadline() time.Duration { return l.e.opts.RenewDeadline }
func (l *term) Expires() time.Time           { return l.Renewed().Add(time.Duration(l.ttl.Load())) }

// lose ends the term for why, once.
func (l *term) lose(why error) {
	l.once.Do(func() {
		l.e.log.Warn("term lost", "term", l.term.Value, "why", why)
		l.cancel(why)
		close(l.lost)
	})
}

// renew keeps the lease alive, sending a renewal every RetryPeriod, and ends the term
// when none was acknowledged within RenewDeadline of its sending, or etcd says the lease
// is gone.
func (l *term) renew() {
	opts := l.e.opts
	for {
		deadline := l.Renewed().Add(opts.RenewDeadline)
		if !time.Now().Before(deadline) {
			l.lose(fmt.Errorf("no renewal acknowledged within the renew deadline %v", opts.RenewDeadline))
			return
		}
		sent := time.Now()
		cctx, cancel := context.WithDeadline(l.ctx, deadline)
		resp, err := l.e.client.KeepAliveOnce(cctx, l.lease)
		cancel()
		switch {
		case l.ctx.Err() != nil:
			return
		case err == nil && resp.TTL > 0:
			l.renewed.Store(sent.UnixNano())
			l.ttl.Store(int64(time.Duration(resp.TTL) * time.Second))
		case err == nil || errors.Is(err, rpcLeaseNotFound):
			l.lose(fmt.Errorf("lease %x expired", l.lease))
			return
		}
		next := min(opts.RetryPeriod, time.Until(l.Renewed().Add(opts.RenewDeadline)))
		t := time.NewTimer(max(next, 0))
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchKey ends the term when its key is deleted (the lease expired or was revoked, or
// someone deleted it), from the revision rev on.
func (l *term) watchKey(rev int64) {
	wch := l.e.client.Watch(clientv3.WithRequireLeader(l.ctx), l.term.Key, clientv3.WithRev(rev+1))
	l.wg.Go(func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					l.lose(fmt.Errorf("election key %s deleted", l.term.Key))
				}
			}
		}
	})
}

// Resign deletes the term's key (revoking its lease), so that another replica may lead at
// once, and stops renewing. It is safe after Lost and more than once; it returns etcd's
// error if the revocation failed (the lease then expires after its TTL).
func (l *term) Resign(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.e.opts.StopTimeout)
	defer cancel()
	return l.release(ctx)
}

func (l *term) release(ctx context.Context) error {
	l.once.Do(func() {
		l.cancel(errors.New("resigned"))
		close(l.lost)
	})
	l.wg.Wait()
	_, err := l.e.client.Revoke(ctx, l.lease)
	if err != nil && !errors.Is(err, rpcLeaseNotFound) {
		return fmt.Errorf("election %s: revoking lease %x: %w", l.e.opts.Prefix, l.lease, err)
	}
	return nil
}
