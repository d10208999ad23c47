package manager

import (
	"context"
	"fmt"
	"time"
)

// Elector campaigns for leadership among the replicas of a service. Implementations: the
// etcd one in github.com/informer-go/informer/source/etcd/election; any store with a
// lease and a monotonic counter can provide one.
type Elector interface {
	// Campaign blocks until this replica leads, and returns its Leadership; or until ctx
	// is done, and returns ctx's error. An error other than ctx's means this attempt
	// failed (the store is unreachable, the session expired while waiting): the manager
	// campaigns again after Options.CampaignRetry. Campaign must not return a Leadership
	// whose term is already lost (for etcd: it checks that its key is still there).
	Campaign(ctx context.Context) (Leadership, error)
}

// Timing is an Elector's timing, as New checks it: a term ends when no renewal was
// acknowledged within RenewDeadline, renewals are sent every RetryPeriod, and the store
// keeps the lease TTL after the last acknowledged renewal was sent.
type Timing struct {
	// TTL is how long the store keeps the lease after the last acknowledged renewal
	// was sent (a Lease's LeaseDuration).
	TTL time.Duration
	// RenewDeadline is how long a term survives without an acknowledged renewal.
	RenewDeadline time.Duration
	// RetryPeriod is the pause between renewals.
	RetryPeriod time.Duration
}

// TimedElector is an Elector that tells its Timing; both electors of this repository are.
// New checks it (RetryPeriod < RenewDeadline < TTL) and fits Options.LeaderStopMargin in
// the time a lost term leaves, TTL − RenewDeadline.
type TimedElector interface {
	Elector
	// Timing returns the elector's timing; it never changes.
	Timing() Timing
}

// LeaderObserver is an Elector that can tell who leads. ObserveLeader calls fn with the
// leader's identity (Term.Holder; "" while none leads) now and at each change, until ctx
// is done; it retries by itself while the store is unreachable and returns only then.
// The manager logs each change, passes it to Options.OnNewLeader and shows it in
// /readyz?verbose.
type LeaderObserver interface {
	// ObserveLeader calls fn at each change of leader until ctx is done.
	ObserveLeader(ctx context.Context, fn func(identity string))
}

// Leadership is one term of leadership, from a successful Campaign until it is lost or
// resigned. Its methods are safe for concurrent use.
type Leadership interface {
	// Term is the term's fencing token; it never changes.
	Term() Term
	// Lost is closed when the term ends without Resign: no renewal was acknowledged
	// within the renew deadline, or the store says the term is over (its key deleted).
	// The manager then cancels the leader-only runnables at once.
	Lost() <-chan struct{}
	// Renewed returns when the last acknowledged renewal was sent: the store holds the
	// lease until at least Renewed plus the lease's TTL.
	Renewed() time.Time
	// RenewDeadline is how long the term survives without an acknowledged renewal: Lost
	// closes at Renewed + RenewDeadline at the latest. It is below the lease's TTL.
	RenewDeadline() time.Duration
	// Expires returns the earliest time at which the store may end the term (the lease
	// expire) if no renewal is acknowledged after Renewed: the leader-only runnables must
	// have returned before it. The zero time means never (no election).
	Expires() time.Time
	// Resign ends the term: the store deletes the term's key so another replica may lead
	// at once, and renewal stops. The manager calls it only after every leader-only
	// runnable has returned. It is safe to call after Lost and more than once.
	Resign(ctx context.Context) error
}

// Term identifies one term of leadership. Value increases from term to term of the same
// election, so a store that remembers or can check the current term refuses a write made
// under an older one (fencing): see the etcd election package's Fenced for a store that
// checks it itself.
type Term struct {
	// Key is the record of the term in the store: for etcd the election key of this
	// replica (its create revision is Value).
	Key string
	// Holder is the identity of the replica holding the term.
	Holder string
	// Value is the fencing token: etcd's create revision of Key, or a Lease's transitions.
	// It is zero when there is no election.
	Value int64
}

// IsZero reports whether t is the zero Term (no election: the manager leads alone).
func (t Term) IsZero() bool { return t == Term{} }

// String renders the term for logs and the health page.
func (t Term) String() string {
	if t.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%d (%s, key %s)", t.Value, t.Holder, t.Key)
}

type termKey struct{}

// WithTerm returns a copy of ctx that carries t. The manager gives every leader-only
// runnable a context made with it.
func WithTerm(ctx context.Context, t Term) context.Context {
	return context.WithValue(ctx, termKey{}, t)
}

// TermFrom returns the term ctx carries, and false if it carries none (a context that is
// not a leader-only runnable's).
func TermFrom(ctx context.Context) (Term, bool) {
	t, ok := ctx.Value(termKey{}).(Term)
	return t, ok
}
