// Package election is leader election on a coordination.k8s.io/v1 Lease for the manager
// package. Every acquisition of the Lease increments its leaseTransitions, which is the
// term (manager.Term.Value): a replica that takes the Lease again after losing it gets a
// new, higher term. Every write to the Lease is conditional on its resourceVersion, so two
// replicas never both take it.
//
// Kubernetes has no transaction across objects, so no write can be made conditional on
// the Lease. FencedUpdate offers the pattern that works for one object at a time: the term
// is stored in the object (annotation TermAnnotation), a write under a lower term than the
// object's is refused, and the write is conditional on the resourceVersion read, so a
// newer term's write in between makes it fail.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/informer-go/informer/manager"
)

// Defaults of Options, client-go's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Options configures an Elector. Every zero value is a documented default.
type Options struct {
	// Namespace and Name locate the Lease; both required.
	Namespace, Name string
	// Identity is this replica's holderIdentity; default hostname-pid.
	Identity string
	// LeaseDuration is how long the other candidates wait, from when they last saw the
	// Lease change, before they take it; default DefaultLeaseDuration (15 s).
	LeaseDuration time.Duration
	// RenewDeadline is how long a term survives without a successful renewal; default
	// DefaultRenewDeadline (10 s). It must be below LeaseDuration.
	RenewDeadline time.Duration
	// RetryPeriod is the pause between attempts to take or renew the Lease; default
	// DefaultRetryPeriod (2 s), at most a quarter of RenewDeadline. It must be below
	// RenewDeadline.
	RetryPeriod time.Duration
	// Labels are set on the Lease each time this replica creates or takes it, over those
	// it has, as client-go's LeaseLock Labels: a selector finds the service's Leases by
	// them. The holder is the Lease's spec.holderIdentity (Identity), as client-go writes
	// it, so that kubectl and client-go's own candidates read it.
	Labels map[string]string
	// Logger receives the election's logs; default slog.Default().
	Logger *slog.Logger
}

// Elector is a manager.Elector on a Lease. Give it a client of its own: a client shared
// with busy informers can be throttled until renewals miss their deadline.
type Elector struct {
	leases coordinationclient.LeaseInterface
	opts   Options
	log    *slog.Logger
}

var (
	_ manager.TimedElector   = (*Elector)(nil)
	_ manager.LeaderObserver = (*Elector)(nil)
)

// New returns an Elector for the Lease opts.Namespace/opts.Name, through client. It fails
// on invalid options.
func New(client coordinationclient.LeasesGetter, opts Options) (*Elector, error) {
	if opts.Namespace == "" || opts.Name == "" {
		return nil, errors.New("election: Options.Namespace and Options.Name are required")
	}
	if opts.Identity == "" {
		host, _ := os.Hostname()
		opts.Identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.RenewDeadline <= 0 {
		opts.RenewDeadline = min(DefaultRenewDeadline, opts.LeaseDuration*2/3)
	}
	if opts.RenewDeadline >= opts.LeaseDuration {
		return nil, fmt.Errorf("election: RenewDeadline %v must be below LeaseDuration %v", opts.RenewDeadline, opts.LeaseDuration)
	}
	if opts.RetryPeriod <= 0 {
		opts.RetryPeriod = min(DefaultRetryPeriod, opts.RenewDeadline/4)
	}
	if opts.RetryPeriod >= opts.RenewDeadline {
		return nil, fmt.Errorf("election: RetryPeriod %v must be below RenewDeadline %v, so that a renewal can be retried before the term ends", opts.RetryPeriod, opts.RenewDeadline)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Elector{
		leases: client.Leases(opts.Namespace),
		opts:   opts,
		log:    opts.Logger.With("lease", opts.Namespace+"/"+opts.Name, "identity", opts.Identity),
	}, nil
}

// Timing returns the Elector's LeaseDuration (as TTL), RenewDeadline and RetryPeriod,
// which manager.New checks its LeaderStopMargin against.
func (e *Elector) Timing() manager.Timing {
	return manager.Timing{TTL: e.opts.LeaseDuration, RenewDeadline: e.opts.RenewDeadline, RetryPeriod: e.opts.RetryPeriod}
}

// Campaign takes the Lease when it is free, released, or has not changed for
// LeaseDuration (as this replica observed it, on its own clock), incrementing its
// leaseTransitions; it retries every RetryPeriod until then or until ctx is done.
func (e *Elector) Campaign(ctx context.Context) (manager.Leadership, error) {
	var seenRV string
	var seenAt time.Time
	for {
		sent := time.Now()
		lease, err := e.leases.Get(ctx, e.opts.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			lease, err = e.leases.Create(ctx, e.record(nil, sent), metav1.CreateOptions{})
			if err == nil {
				return e.won(lease, sent), nil
			}
		case err == nil:
			if lease.ResourceVersion != seenRV {
				seenRV, seenAt = lease.ResourceVersion, time.Now()
			}
			holder := lease.Spec.HolderIdentity
			if holder == nil || *holder == "" || time.Since(seenAt) > e.opts.LeaseDuration {
				lease, err = e.leases.Update(ctx, e.record(lease, sent), metav1.UpdateOptions{})
				if err == nil {
					return e.won(lease, sent), nil
				}
			}
		}
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			e.log.Debug("campaign attempt failed", "err", err)
		}
		t := time.NewTimer(e.opts.RetryPeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// ObserveLeader calls fn with the Lease's holderIdentity ("" while none holds it: no
// Lease, or a released one) now and at each change, until ctx is done. It reads the Lease
// every RetryPeriod, as a candidate does, and goes on through errors. Like client-go's
// OnNewLeader, it reports the holder the Lease names, even one that has stopped renewing
// and not yet been replaced.
func (e *Elector) ObserveLeader(ctx context.Context, fn func(identity string)) {
	t := time.NewTicker(e.opts.RetryPeriod)
	defer t.Stop()
	reported, last := false, ""
	for {
		lease, err := e.leases.Get(ctx, e.opts.Name, metav1.GetOptions{})
		id, ok := "", err == nil || apierrors.IsNotFound(err)
		if err == nil && lease.Spec.HolderIdentity != nil {
			id = *lease.Spec.HolderIdentity
		}
		if ok && (!reported || id != last) {
			reported, last = true, id
			fn(id)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// record returns the Lease taken by this replica at now: from old (nil to create it) with
// leaseTransitions incremented.
func (e *Elector) record(old *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.opts.Namespace, Name: e.opts.Name}}
	var transitions int32
	if old != nil {
		l = old.DeepCopy()
		if old.Spec.LeaseTransitions != nil {
			transitions = *old.Spec.LeaseTransitions
		}
	}
	transitions++
	for k, v := range e.opts.Labels {
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels[k] = v
	}
	t := metav1.NewMicroTime(now)
	secs := int32(e.opts.LeaseDuration / time.Second)
	id := e.opts.Identity
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.LeaseTransitions = &id, &secs, &transitions
	l.Spec.AcquireTime, l.Spec.RenewTime = &t, &t
	return l
}

func (e *Elector) won(lease *coordinationv1.Lease, sent time.Time) *term {
	l := &term{
		e:     e,
		term:  manager.Term{Key: e.opts.Namespace + "/" + e.opts.Name, Holder: e.opts.Identity, Value: int64(*lease.Spec.LeaseTransitions)},
		lost:  make(chan struct{}),
		lease: lease,
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.renewed.Store(sent.UnixNano())
	l.wg.Go(l.renew)
	e.log.Info("elected", "term", l.term.Value)
	return l
}

// term is one acquisition of the Lease.
type term struct {
	e    *Elector
	term manager.Term

	lost    chan struct{}
	ctx     context.Context // done when the term ends
	cancel  context.CancelFunc
	once    sync.Once
	wg      sync.WaitGroup
	renewed atomic.Int64 // unix nanos: when the last successful renewal was sent

	mu    sync.Mutex
	lease *coordinationv1.Lease // the last version written
}

func (l *term) Term() manager.Term           { return l.term }
func (l *term) Lost() <-chan struct{}        { return l.lost }
func (l *term) Renewed() time.Time           { return time.Unix(0, l.renewed.Load()) }
func (l *term) RenewDeadline() time.Duration { return l.e.opts.RenewDeadline }

// Expires is when the other candidates may take the Lease at the earliest: they wait
// LeaseDuration from when they saw the last renewal, which was after it was sent.
func (l *term) Expires() time.Time { return l.Renewed().Add(l.e.opts.LeaseDuration) }

func (l *term) end(why error) {
	l.once.Do(func() {
		l.e.log.Warn("term ended", "term", l.term.Value, "why", why)
		l.cancel()
		close(l.lost)
	})
}

// renew updates the Lease's renewTime every RetryPeriod, conditional on its
// resourceVersion, and ends the term at the renew deadline (checked at the deadline
// itself, whatever the RetryPeriod) or when the Lease is no longer this term's.
func (l *term) renew() {
	opts := l.e.opts
	for {
		// The next attempt, or the renew deadline if it comes first: a term whose
		// renewals fail ends at the deadline, not up to a RetryPeriod after it.
		t := time.NewTimer(max(0, min(opts.RetryPeriod, time.Until(l.Renewed().Add(opts.RenewDeadline)))))
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		deadline := l.Renewed().Add(opts.RenewDeadline)
		if !time.Now().Before(deadline) {
			l.end(fmt.Errorf("no renewal within the renew deadline %v", opts.RenewDeadline))
			return
		}
		ctx, cancel := context.WithDeadline(l.ctx, deadline)
		sent := time.Now()
		l.mu.Lock()
		next := l.lease.DeepCopy()
		l.mu.Unlock()
		now := metav1.NewMicroTime(sent)
		next.Spec.RenewTime = &now
		updated, err := l.e.leases.Update(ctx, next, metav1.UpdateOptions{})
		cancel()
		switch {
		case l.ctx.Err() != nil:
			return
		case err == nil:
			l.mu.Lock()
			l.lease = updated
			l.mu.Unlock()
			l.renewed.Store(sent.UnixNano())
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			l.end(fmt.Errorf("the Lease changed under term %d: %w", l.term.Value, err))
			return
		}
	}
}

// Resign releases the Lease (holderIdentity cleared, conditional on the resourceVersion
// this term last wrote) so another replica may take it at once, and stops renewing. It is
// safe after Lost and more than once.
func (l *term) Resign(ctx context.Context) error {
	l.once.Do(func() {
		l.cancel()
		close(l.lost)
	})
	l.wg.Wait()
	l.mu.Lock()
	next := l.lease.DeepCopy()
	l.mu.Unlock()
	empty := ""
	one := int32(1)
	next.Spec.HolderIdentity, next.Spec.LeaseDurationSeconds = &empty, &one
	if _, err := l.e.leases.Update(ctx, next, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("election: releasing Lease %s: %w", l.term.Key, err)
	}
	return nil
}
