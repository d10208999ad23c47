package workqueue

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/informer-go/informer/clock"
)

// AddRateLimited adds item after the delay the queue's RateLimiter returns for it, as
// AddAfter would; it is how a worker retries an item that failed. Each call counts as a
// failure for the limiter (its When is called) and as a retry for the metrics. It is
// ignored, and the limiter is not consulted, once the queue is shutting down.
func (q *Queue[T]) AddRateLimited(item T) {
	if q.closed.Load() {
		return
	}
	d := q.rateLimiter().When(item)
	if q.metrics != nil {
		q.metrics.retries.Inc()
	}
	q.AddAfter(item, d)
}

// Forget tells the RateLimiter to drop item's failure history, so that its next
// AddRateLimited waits as for a first failure. Call it once item has been processed
// successfully (or given up on). It does not remove item from the queue, and Done must
// still be called.
func (q *Queue[T]) Forget(item T) {
	q.rateLimiter().Forget(item)
}

// NumRequeues returns how many failures the RateLimiter has recorded for item since it was
// last forgotten.
func (q *Queue[T]) NumRequeues(item T) int {
	return q.rateLimiter().NumRequeues(item)
}

func (q *Queue[T]) rateLimiter() RateLimiter[T] {
	q.limiterOnce.Do(func() {
		if q.limiter == nil {
			q.limiter = defaultRateLimiter[T](q.clock())
		}
	})
	return q.limiter
}

// RateLimiter decides how long an item waits before it is retried. Implementations must be
// safe for concurrent use; the queue calls them without holding its lock.
type RateLimiter[T comparable] interface {
	// When records a failure of item and returns how long it should wait before its
	// next attempt.
	When(item T) time.Duration
	// Forget drops item's failure history. The item is not retried any sooner by it;
	// the next When simply starts over.
	Forget(item T)
	// NumRequeues returns the number of failures recorded for item since it was last
	// forgotten.
	NumRequeues(item T) int
}

// Defaults of the rate limiters, as in client-go.
const (
	DefaultBaseDelay = 5 * time.Millisecond // ExponentialRateLimiter.Base
	DefaultMaxDelay  = 1000 * time.Second   // ExponentialRateLimiter.Max
	DefaultQPS       = 10                   // BucketRateLimiter.QPS
	DefaultBurst     = 100                  // BucketRateLimiter.Burst
)

// DefaultRateLimiter returns the usual controller policy: the larger of a per-item
// exponential backoff (DefaultBaseDelay doubling up to DefaultMaxDelay) and an overall
// token bucket (DefaultQPS, burst DefaultBurst) on the real clock. A Queue with no
// RateLimiter configured uses the same policy on its own clock.
func DefaultRateLimiter[T comparable]() RateLimiter[T] {
	return defaultRateLimiter[T](nil)
}

func defaultRateLimiter[T comparable](clk clock.Clock) RateLimiter[T] {
	return MaxOf[T](&ExponentialRateLimiter[T]{}, &BucketRateLimiter[T]{Clock: clk})
}

// ExponentialRateLimiter delays an item by Base·2^n after its n-th recorded failure
// (counting from zero), capped at Max: with the defaults 5 ms, 10 ms, 20 ms, … up to
// 1000 s, which it reaches after 18 failures. It keeps one counter per item until Forget,
// so forgetting items is what bounds its memory.
//
// The zero value is ready to use with DefaultBaseDelay and DefaultMaxDelay. Base and Max
// must not change after first use.
type ExponentialRateLimiter[T comparable] struct {
	// Base is the delay after the first failure. Zero or less means DefaultBaseDelay.
	Base time.Duration
	// Max caps the delay. Zero or less means DefaultMaxDelay.
	Max time.Duration

	failures failureCounts[T]
}

// NewExponentialRateLimiter returns an ExponentialRateLimiter with the given base and cap.
func NewExponentialRateLimiter[T comparable](base, max time.Duration) *ExponentialRateLimiter[T] {
	return &ExponentialRateLimiter[T]{Base: base, Max: max}
}

// When records a failure of item and returns Base·2^(failures before this one), capped at
// Max. It does not overflow, however many failures there were.
func (r *ExponentialRateLimiter[T]) When(item T) time.Duration {
	exp := r.failures.add(item) - 1

	base, maxDelay := r.Base, r.Max
	if base <= 0 {
		base = DefaultBaseDelay
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	// base·2^exp > maxDelay  ⟺  base > ⌊maxDelay / 2^exp⌋, without computing the product.
	if exp >= 63 || base > maxDelay>>exp {
		return maxDelay
	}
	return base << exp
}

// Forget drops item's failure count.
func (r *ExponentialRateLimiter[T]) Forget(item T) { r.failures.forget(item) }

// NumRequeues returns the number of failures recorded for item.
func (r *ExponentialRateLimiter[T]) NumRequeues(item T) int { return r.failures.count(item) }

// FastSlowRateLimiter retries an item after Fast for its first FastAttempts failures and
// after Slow from then on. It keeps one counter per item until Forget.
//
// The zero value retries every item at once (both delays zero, no fast attempts). Fields
// must not change after first use.
type FastSlowRateLimiter[T comparable] struct {
	// Fast is the delay for the first FastAttempts failures.
	Fast time.Duration
	// Slow is the delay for every later failure.
	Slow time.Duration
	// FastAttempts is how many failures get the Fast delay.
	FastAttempts int

	failures failureCounts[T]
}

// NewFastSlowRateLimiter returns a FastSlowRateLimiter with the given delays and number of
// fast attempts.
func NewFastSlowRateLimiter[T comparable](fast, slow time.Duration, fastAttempts int) *FastSlowRateLimiter[T] {
	return &FastSlowRateLimiter[T]{Fast: fast, Slow: slow, FastAttempts: fastAttempts}
}

// When records a failure of item and returns Fast if it is one of the first FastAttempts
// failures, Slow otherwise.
func (r *FastSlowRateLimiter[T]) When(item T) time.Duration {
	if r.failures.add(item) <= r.FastAttempts {
		return r.Fast
	}
	return r.Slow
}

// Forget drops item's failure count.
func (r *FastSlowRateLimiter[T]) Forget(item T) { r.failures.forget(item) }

// NumRequeues returns the number of failures recorded for item.
func (r *FastSlowRateLimiter[T]) NumRequeues(item T) int { return r.failures.count(item) }

// failureCounts counts the failures of each item until it is forgotten: the per-item state
// of ExponentialRateLimiter and FastSlowRateLimiter. The zero value is ready to use.
type failureCounts[T comparable] struct {
	mu sync.Mutex
	n  map[T]int
}

// add records a failure of item and returns its failures so far, this one included.
func (c *failureCounts[T]) add(item T) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[T]int)
	}
	c.n[item]++
	return c.n[item]
}

func (c *failureCounts[T]) forget(item T) {
	c.mu.Lock()
	delete(c.n, item)
	c.mu.Unlock()
}

func (c *failureCounts[T]) count(item T) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[item]
}

// BucketRateLimiter is a token bucket shared by all items (golang.org/x/time/rate): Burst
// retries go through at once, then one every 1/QPS. Every When takes a token, reserving the
// next free slot, so its delay grows with the number of retries waiting. It keeps no
// per-item state: Forget does nothing and NumRequeues is always 0.
//
// The zero value is ready to use with DefaultQPS, DefaultBurst and the real clock. Fields
// must not change after first use.
type BucketRateLimiter[T comparable] struct {
	// QPS is the rate at which tokens refill, per second. Zero or less means DefaultQPS;
	// math.Inf(1) means no limit.
	QPS float64
	// Burst is the size of the bucket, which starts full. Zero or less means DefaultBurst.
	Burst int
	// Clock is read on every When, so that a clock.Fake makes the delays deterministic.
	// Nil means clock.Real.
	Clock clock.Clock

	once    sync.Once
	limiter *rate.Limiter
}

// NewBucketRateLimiter returns a BucketRateLimiter with the given rate, burst and clock
// (nil for the real clock).
func NewBucketRateLimiter[T comparable](qps float64, burst int, clk clock.Clock) *BucketRateLimiter[T] {
	return &BucketRateLimiter[T]{QPS: qps, Burst: burst, Clock: clk}
}

// When takes a token and returns how long until it is available: zero while the bucket
// holds tokens.
func (r *BucketRateLimiter[T]) When(T) time.Duration {
	r.once.Do(func() {
		qps, burst := r.QPS, r.Burst
		if qps <= 0 {
			qps = DefaultQPS
		}
		if burst <= 0 {
			burst = DefaultBurst
		}
		limit := rate.Limit(qps)
		if math.IsInf(qps, 1) {
			limit = rate.Inf // rate's own "no limit", which is not +Inf
		}
		r.limiter = rate.NewLimiter(limit, burst)
	})
	var now time.Time
	if r.Clock != nil {
		now = r.Clock.Now()
	} else {
		now = time.Now()
	}
	// ReserveN of one token with burst ≥ 1 always succeeds.
	return r.limiter.ReserveN(now, 1).DelayFrom(now)
}

// Forget does nothing: the bucket keeps no per-item state.
func (r *BucketRateLimiter[T]) Forget(T) {}

// NumRequeues returns 0: the bucket keeps no per-item state.
func (r *BucketRateLimiter[T]) NumRequeues(T) int { return 0 }

// MaxOf returns a RateLimiter that asks every one of limiters and keeps the worst answer:
// When calls each When (so each records the failure) and returns the longest delay,
// NumRequeues returns the largest count, and Forget forgets in all of them. With no
// limiters, When returns 0.
//
// Combined with a BucketRateLimiter, every When takes a token even when another limiter's
// delay is the longer one, so items held back by their own backoff can later retry
// together: the bucket bounds the rate at which retries are scheduled, not the rate at
// which they happen.
func MaxOf[T comparable](limiters ...RateLimiter[T]) RateLimiter[T] {
	return maxOf[T](append([]RateLimiter[T](nil), limiters...))
}

type maxOf[T comparable] []RateLimiter[T]

func (m maxOf[T]) When(item T) time.Duration {
	var d time.Duration
	for _, l := range m {
		d = max(d, l.When(item))
	}
	return d
}

func (m maxOf[T]) Forget(item T) {
	for _, l := range m {
		l.Forget(item)
	}
}

func (m maxOf[T]) NumRequeues(item T) int {
	n := 0
	for _, l := range m {
		n = max(n, l.NumRequeues(item))
	}
	return n
}
