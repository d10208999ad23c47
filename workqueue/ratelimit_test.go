package workqueue

import (
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/informer-go/informer/clock"
)

const ms = time.Millisecond

// whens calls When n times for item and returns the delays.
func whens[T comparable](r RateLimiter[T], item T, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = r.When(item)
	}
	return out
}

// TestExponentialRateLimiter checks When = base·2^failures, capped, and that no failure
// count overflows.
func TestExponentialRateLimiter(t *testing.T) {
	tests := []struct {
		name    string
		limiter *ExponentialRateLimiter[string]
		calls   int
		want    []time.Duration // the last len(want) delays of calls
	}{
		{
			name:    "zero value is 5ms doubling",
			limiter: &ExponentialRateLimiter[string]{},
			calls:   6,
			want:    []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms},
		},
		{
			name:    "default cap of 1000s is reached on the 19th failure",
			limiter: NewExponentialRateLimiter[string](0, 0),
			calls:   20,
			// 5ms·2^17 = 655.36s; 5ms·2^18 would be 1310.72s.
			want: []time.Duration{655360 * ms, 1000 * time.Second, 1000 * time.Second},
		},
		{
			name:    "cap below the second delay",
			limiter: NewExponentialRateLimiter[string](time.Second, 1500*ms),
			calls:   4,
			want:    []time.Duration{time.Second, 1500 * ms, 1500 * ms, 1500 * ms},
		},
		{
			name:    "no overflow at the largest representable delay",
			limiter: NewExponentialRateLimiter[string](1, math.MaxInt64),
			calls:   65, // failures 0…64; the last four are 61…64
			// 2^62 ns is the last doubling that fits; 2^63 would overflow.
			want: []time.Duration{1 << 61, 1 << 62, math.MaxInt64, math.MaxInt64},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := whens[string](tt.limiter, "a", tt.calls)
			if tail := got[len(got)-len(tt.want):]; !slices.Equal(tail, tt.want) {
				t.Fatalf("last delays = %v, want %v", tail, tt.want)
			}
			if n := tt.limiter.NumRequeues("a"); n != tt.calls {
				t.Fatalf("NumRequeues = %d, want %d", n, tt.calls)
			}
		})
	}
}

// TestRateLimiterForget checks that Forget resets one item's history and no other's, for
// every per-item limiter.
func TestRateLimiterForget(t *testing.T) {
	tests := []struct {
		name    string
		limiter RateLimiter[string]
		first   time.Duration // the delay after a first failure
	}{
		{"exponential", NewExponentialRateLimiter[string](ms, time.Second), ms},
		{"fast-slow", NewFastSlowRateLimiter[string](ms, time.Second, 1), ms},
		{"max-of", MaxOf(NewExponentialRateLimiter[string](ms, time.Second), NewFastSlowRateLimiter[string](0, time.Second, 2)), ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.limiter
			whens(r, "a", 3)
			whens(r, "b", 2)
			if a, b := r.NumRequeues("a"), r.NumRequeues("b"); a != 3 || b != 2 {
				t.Fatalf("NumRequeues a, b = %d, %d; want 3, 2", a, b)
			}
			r.Forget("a")
			if a, b := r.NumRequeues("a"), r.NumRequeues("b"); a != 0 || b != 2 {
				t.Fatalf("after Forget(a): NumRequeues a, b = %d, %d; want 0, 2", a, b)
			}
			if d := r.When("a"); d != tt.first {
				t.Fatalf("When after Forget = %v, want %v", d, tt.first)
			}
			r.Forget("never seen") // no-op
		})
	}
}

func TestFastSlowRateLimiter(t *testing.T) {
	tests := []struct {
		name    string
		limiter *FastSlowRateLimiter[string]
		want    []time.Duration
	}{
		{"3 fast then slow", NewFastSlowRateLimiter[string](ms, time.Second, 3),
			[]time.Duration{ms, ms, ms, time.Second, time.Second}},
		{"no fast attempts", NewFastSlowRateLimiter[string](ms, time.Second, 0),
			[]time.Duration{time.Second, time.Second}},
		{"zero value retries at once", &FastSlowRateLimiter[string]{},
			[]time.Duration{0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := whens[string](tt.limiter, "a", len(tt.want)); !slices.Equal(got, tt.want) {
				t.Fatalf("delays = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestBucketRateLimiter checks burst-then-rate under a fake clock: the delays are exact.
func TestBucketRateLimiter(t *testing.T) {
	clk := clock.NewFake(epoch)
	r := NewBucketRateLimiter[string](10, 3, clk)

	// The bucket starts full: three retries go at once, then one every 100 ms, each
	// reserving the next slot. Items do not matter.
	if got, want := []time.Duration{r.When("a"), r.When("b"), r.When("a"), r.When("c"), r.When("a")},
		[]time.Duration{0, 0, 0, 100 * ms, 200 * ms}; !slices.Equal(got, want) {
		t.Fatalf("delays = %v, want %v", got, want)
	}
	clk.Step(150 * ms) // the 100 ms slot has passed, the 200 ms one is 50 ms away
	if d := r.When("a"); d != 150*ms {
		t.Fatalf("after 150ms: When = %v, want 150ms", d)
	}
	clk.Step(time.Hour) // refills to the burst, not beyond
	if got, want := whens[string](r, "a", 4), []time.Duration{0, 0, 0, 100 * ms}; !slices.Equal(got, want) {
		t.Fatalf("after refill: delays = %v, want %v", got, want)
	}
	if n := r.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues = %d, want 0 (no per-item state)", n)
	}
	r.Forget("a")

	unlimited := NewBucketRateLimiter[string](math.Inf(1), 1, clk)
	if got := whens[string](unlimited, "a", 1000); slices.Max(got) != 0 {
		t.Fatalf("QPS +Inf: delays up to %v, want all 0", slices.Max(got))
	}

	zero := &BucketRateLimiter[string]{Clock: clk} // defaults: 10 qps, burst 100
	if got := whens[string](zero, "a", 101); got[99] != 0 || got[100] != 100*ms {
		t.Fatalf("zero value: 100th, 101st delay = %v, %v; want 0, 100ms", got[99], got[100])
	}
}

// TestMaxOf checks that the combination waits as long as its slowest limiter.
func TestMaxOf(t *testing.T) {
	exp := NewExponentialRateLimiter[string](ms, time.Hour)
	fs := NewFastSlowRateLimiter[string](10*ms, time.Minute, 2)
	r := MaxOf[string](exp, fs)
	// exponential: 1 2 4 8 16 ms; fast-slow: 10 10 ms then 1 min.
	want := []time.Duration{10 * ms, 10 * ms, time.Minute, time.Minute, time.Minute}
	if got := whens(r, "a", len(want)); !slices.Equal(got, want) {
		t.Fatalf("delays = %v, want %v", got, want)
	}
	exp.Forget("a") // exponential 0, fast-slow 5
	if n := r.NumRequeues("a"); n != 5 {
		t.Fatalf("NumRequeues = %d, want max(0, 5) = 5", n)
	}
	r.Forget("a")
	if a, b := exp.NumRequeues("a"), fs.NumRequeues("a"); a != 0 || b != 0 {
		t.Fatalf("Forget did not reach every limiter: %d, %d", a, b)
	}
	if d := MaxOf[string]().When("a"); d != 0 {
		t.Fatalf("MaxOf().When = %v, want 0", d)
	}
}

// TestDefaultRateLimiter checks the default policy: exponential from 5 ms, MaxOf a
// 10 qps bucket with burst 100, as client-go's. The queue's default runs on its clock.
func TestDefaultRateLimiter(t *testing.T) {
	if d := DefaultRateLimiter[string]().When("a"); d != 5*ms {
		t.Fatalf("DefaultRateLimiter().When = %v, want 5ms", d)
	}
	q, _ := newFakeQueue(t)
	r := q.rateLimiter()
	for i := range 99 {
		if d := r.When(strconv.Itoa(i)); d != 5*ms {
			t.Fatalf("failure %d: When = %v, want 5ms", i, d)
		}
	}
	// a's first failure takes the 100th token, the last of the burst; its next ones wait
	// for the bucket, which then dominates the exponential backoff.
	if got, want := whens(r, "a", 3), []time.Duration{5 * ms, 100 * ms, 200 * ms}; !slices.Equal(got, want) {
		t.Fatalf("delays = %v, want %v (exponential, then the bucket)", got, want)
	}
}

// TestAddRateLimited drives the rate-limited queue through retries, Forget and success
// (a retry waits its turn; Forget resets the wait; success forgets).
func TestAddRateLimited(t *testing.T) {
	clk := clock.NewFake(epoch)
	q := New(Options[string]{Clock: clk, RateLimiter: NewExponentialRateLimiter[string](time.Second, time.Hour)})
	t.Cleanup(q.ShutDown)

	// Three failures: the waits are 1 s, 2 s, 4 s.
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		q.AddRateLimited("a")
		if n := q.NumRequeues("a"); n != i+1 {
			t.Fatalf("NumRequeues = %d, want %d", n, i+1)
		}
		q.AddAfter("sentinel", wait-time.Nanosecond)
		clk.Step(wait - time.Nanosecond)
		run(t, q, []string{"<sentinel", "-sentinel", "#0"}) // a is not due yet
		clk.Step(time.Nanosecond)
		run(t, q, []string{"<a", "-a"})
	}
	// Success, Forget: the next failure waits as a first one.
	q.Forget("a")
	if n := q.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}
	q.AddRateLimited("a")
	clk.Step(time.Second)
	run(t, q, []string{"<a", "-a", "#0"})
}
