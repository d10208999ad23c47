package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/workqueue"
)

// step is one scripted Reconcile of the key "k" and what the controller must do with it.
type step struct {
	res   Result
	err   error
	panic any

	outcome  Outcome
	ops      string        // the rate limiter calls it makes, in order
	requeues int           // NumRequeues("k") afterwards
	delay    time.Duration // when "k" comes back; 0: it does not
}

// TestResultTable checks each Result/error combination against the exact queue action:
// the rate limiter calls (AddRateLimited asks When, Forget forgets), the key's requeue
// count, and the delay after which the key is reconciled again, to the nanosecond on a
// fake clock.
func TestResultTable(t *testing.T) {
	ok := step{outcome: OutcomeSuccess, ops: "forget(k)"}
	tests := []struct {
		name  string
		steps []step
		log   string // must appear in the log
	}{
		{name: "success forgets", steps: []step{ok}},
		{name: "error retries with backoff, success forgets", steps: []step{
			{err: errBoom, outcome: OutcomeError, ops: "when(k)=1s", requeues: 1, delay: time.Second},
			ok,
		}, log: "reconcile failed; retrying with backoff"},
		{name: "backoff doubles per failure", steps: []step{
			{err: errBoom, outcome: OutcomeError, ops: "when(k)=1s", requeues: 1, delay: time.Second},
			{err: errBoom, outcome: OutcomeError, ops: "when(k)=2s", requeues: 2, delay: 2 * time.Second},
			{err: errBoom, outcome: OutcomeError, ops: "when(k)=4s", requeues: 3, delay: 4 * time.Second},
			ok,
		}},
		{name: "error ignores RequeueAfter", steps: []step{
			{res: Result{RequeueAfter: time.Hour}, err: errBoom, outcome: OutcomeError, ops: "when(k)=1s", requeues: 1, delay: time.Second},
			ok,
		}, log: "the Result is ignored"},
		{name: "error ignores Requeue", steps: []step{
			{res: Result{Requeue: true}, err: errBoom, outcome: OutcomeError, ops: "when(k)=1s", requeues: 1, delay: time.Second},
			ok,
		}, log: "the Result is ignored"},
		{name: "Requeue backs off like an error", steps: []step{
			{res: Result{Requeue: true}, outcome: OutcomeRequeue, ops: "when(k)=1s", requeues: 1, delay: time.Second},
			{res: Result{Requeue: true}, outcome: OutcomeRequeue, ops: "when(k)=2s", requeues: 2, delay: 2 * time.Second},
			ok,
		}},
		{name: "RequeueAfter forgets, then waits exactly", steps: []step{
			{err: errBoom, outcome: OutcomeError, ops: "when(k)=1s", requeues: 1, delay: time.Second},
			{res: Result{RequeueAfter: 30 * time.Second}, outcome: OutcomeRequeueAfter, ops: "forget(k)", delay: 30 * time.Second},
			{res: Result{RequeueAfter: 90 * time.Second}, outcome: OutcomeRequeueAfter, ops: "forget(k)", delay: 90 * time.Second},
			ok,
		}},
		{name: "RequeueAfter wins over Requeue", steps: []step{
			{res: Result{Requeue: true, RequeueAfter: 10 * time.Second}, outcome: OutcomeRequeueAfter, ops: "forget(k)", delay: 10 * time.Second},
			ok,
		}},
		{name: "negative RequeueAfter is no RequeueAfter", steps: []step{
			{res: Result{RequeueAfter: -time.Second}, outcome: OutcomeSuccess, ops: "forget(k)"},
		}},
		{name: "terminal error forgets and does not retry", steps: []step{
			{err: errBoom, outcome: OutcomeError, ops: "when(k)=1s", requeues: 1, delay: time.Second},
			{err: TerminalError(errBoom), outcome: OutcomeTerminal, ops: "forget(k)"},
		}, log: "terminal error: boom"},
		{name: "wrapped terminal error with a Result", steps: []step{
			{res: Result{RequeueAfter: time.Second}, err: fmt.Errorf("giving up: %w", TerminalError(errBoom)), outcome: OutcomeTerminal, ops: "forget(k)"},
		}, log: "the Result is ignored"},
		{name: "panic retries with backoff", steps: []step{
			{panic: "kaboom", outcome: OutcomeError, ops: "when(k)=1s", requeues: 1, delay: time.Second},
			ok,
		}, log: "kaboom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(0, 0))
			lim := newRecordingLimiter()
			met := newTestMetrics()
			var logs logBuffer
			calls := testkit.NewLog()
			n := 0 // calls so far; one worker, so no lock
			c, err := New(ReconcilerFunc[string](func(ctx context.Context, key string) (Result, error) {
				calls.Record(fmt.Sprintf("%s@%v", key, clk.Since(time.Unix(0, 0))))
				i := n
				n++
				if i >= len(tt.steps) {
					return Result{}, fmt.Errorf("call %d is not in the script", i)
				}
				if p := tt.steps[i].panic; p != nil {
					panic(p)
				}
				return tt.steps[i].res, tt.steps[i].err
			}), Options[string]{Clock: clk, RateLimiter: lim, Metrics: met, Logger: logs.logger()})
			if err != nil {
				t.Fatal(err)
			}
			start(t, c)
			c.Queue().Add("k")

			var at time.Duration // fake time of the current call
			for i, s := range tt.steps {
				if got, want := calls.Next(t, 1)[0], fmt.Sprintf("k@%v", at); got != want {
					t.Fatalf("call %d: got %s, want %s", i, got, want)
				}
				if o := recv(t, met.outcomes, "outcome"); o != s.outcome {
					t.Fatalf("call %d: outcome %v, want %v", i, o, s.outcome)
				}
				if ops := fmt.Sprint(lim.take()); ops != "["+s.ops+"]" {
					t.Errorf("call %d: rate limiter calls %s, want [%s]", i, ops, s.ops)
				}
				if r := c.Queue().NumRequeues("k"); r != s.requeues {
					t.Errorf("call %d: NumRequeues = %d, want %d", i, r, s.requeues)
				}
				if s.delay == 0 {
					// Done: nothing queued, nothing waiting for a delay.
					if i != len(tt.steps)-1 {
						t.Fatalf("bad script: step %d has no delay but is not the last", i)
					}
					eventually(t, "the worker to call Done", func() bool { return c.Queue().Len() == 0 })
					if w := clk.Waiters(); w != 0 {
						t.Errorf("call %d: %d timers armed, want none", i, w)
					}
					break
				}
				// The key is back after exactly s.delay, not a nanosecond earlier.
				if w := clk.Waiters(); w != 1 {
					t.Fatalf("call %d: %d timers armed, want the queue's", i, w)
				}
				clk.Step(s.delay - 1)
				calls.ExpectNoMore(t) // the timer cannot have fired
				clk.Step(1)
				at += s.delay
			}
			calls.ExpectNoMore(t)
			if tt.log != "" && !strings.Contains(logs.String(), tt.log) {
				t.Errorf("log does not contain %q:\n%s", tt.log, logs.String())
			}
		})
	}
}

// TestResultCallOrder reconciles four keys with one worker and checks the order of the
// calls as the fake clock moves: retries and RequeueAfter come back by ready time, and
// keys ready at the same instant in the order they were put back.
func TestResultCallOrder(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	calls := testkit.NewLog()
	met := newTestMetrics()
	script := map[string][]Result{
		"a": {{RequeueAfter: 3 * time.Second}, {}},
		"b": {{Requeue: true}, {}},
		"c": {{Requeue: true}, {Requeue: true}, {}},
		"d": {{}},
	}
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(key)
		r := script[key][0]
		script[key] = script[key][1:]
		return r, nil
	}), Options[string]{Clock: clk, RateLimiter: newRecordingLimiter(), Metrics: met, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		c.Queue().Add(k)
	}
	start(t, c)

	wait := func(when string, n int, want string) {
		t.Helper()
		if got := joined(calls.Next(t, n)); got != want {
			t.Fatalf("%s: reconciled %s, want %s", when, got, want)
		}
		for range n {
			recv(t, met.outcomes, "outcome")
		}
		calls.ExpectNoMore(t)
	}
	wait("t=0", 4, "a b c d")
	clk.Step(time.Second) // b and c backed off 1 s; c fails again, 2 s
	wait("t=1s", 2, "b c")
	clk.Step(2 * time.Second) // a's RequeueAfter (queued first) and c's second retry
	wait("t=3s", 2, "a c")
	if w := clk.Waiters(); w != 0 {
		t.Errorf("%d timers armed after the script, want none", w)
	}
}

// TestRequeueAfterPeriodic shows the per-object periodic reconcile: a key whose reconcile
// returns RequeueAfter comes back every period on the fake clock, while a key that returns
// the zero Result is not reconciled again.
func TestRequeueAfterPeriodic(t *testing.T) {
	src := newSource()
	src.Put(&obj{Name: "poll"})
	src.Put(&obj{Name: "once"})
	inf := runInformer(t, src, informer.Options[string, *obj]{Name: "objs"})

	clk := clock.NewFake(time.Unix(0, 0))
	calls := testkit.NewLog()
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(fmt.Sprintf("%s@%v", key, clk.Since(time.Unix(0, 0))))
		if key == "poll" {
			return Result{RequeueAfter: time.Minute}, nil
		}
		return Result{}, nil
	}), Options[string]{Clock: clk, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := For(c, inf, objKeyErr); err != nil {
		t.Fatal(err)
	}
	start(t, c)

	if got := joined(calls.Next(t, 2)); got != "once@0s poll@0s" {
		t.Fatalf("initial reconciles: %s", got)
	}
	for i := 1; i <= 3; i++ {
		clk.WaitForWaiters(1, nil) // the queue's delay timer, armed for poll
		clk.Step(time.Minute - 1)
		calls.ExpectNoMore(t)
		clk.Step(1)
		if got, want := calls.Next(t, 1)[0], fmt.Sprintf("poll@%dm0s", i); got != want {
			t.Fatalf("period %d: reconciled %s, want %s", i, got, want)
		}
	}
	calls.ExpectNoMore(t)
}

// nextOutcome waits for the next reconcile call and its outcome, and fails the test unless
// the outcome is want.
func nextOutcome(t *testing.T, calls *testkit.Log, met *testMetrics, want Outcome) {
	t.Helper()
	calls.Next(t, 1)
	if o := recv(t, met.outcomes, "outcome"); o != want {
		t.Fatalf("outcome %v, want %v", o, want)
	}
}

// TestPanicRecovered: a panicking Reconcile is recovered, logged with its value and
// stack, counted, and the key is retried with backoff; the process survives.
func TestPanicRecovered(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	lim := newRecordingLimiter()
	met := newTestMetrics()
	var logs logBuffer
	calls := testkit.NewLog()
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(key)
		if len(calls.Calls()) == 1 {
			var s []int
			_ = s[len(key)] // a runtime panic: index out of range
		}
		return Result{}, nil
	}), Options[string]{Clock: clk, RateLimiter: lim, Metrics: met, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	c.Queue().Add("k")

	nextOutcome(t, calls, met, OutcomeError)
	if p, e := met.panics.n.Load(), met.errors.n.Load(); p != 1 || e != 1 {
		t.Fatalf("panics %d errors %d, want 1 and 1", p, e)
	}
	if ops := fmt.Sprint(lim.take()); ops != "[when(k)=1s]" {
		t.Fatalf("rate limiter calls %s, want a retry after 1s", ops)
	}
	log := logs.String()
	for _, want := range []string{"reconcile panicked", "index out of range", "TestPanicRecovered"} {
		if !strings.Contains(log, want) {
			t.Errorf("log does not contain %q:\n%s", want, log)
		}
	}
	clk.Step(time.Second)
	nextOutcome(t, calls, met, OutcomeSuccess) // the retry
	if r := c.Queue().NumRequeues("k"); r != 0 {
		t.Fatalf("NumRequeues %d after success, want 0", r)
	}
}

// TestTerminalError: a terminal error is counted, logged and not retried — the key's
// backoff is forgotten — but a later notification reconciles the key again.
func TestTerminalError(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	met := newTestMetrics()
	calls := testkit.NewLog()
	errs := []error{errBoom, TerminalError(errBoom), nil}
	c, err := New(ReconcilerFunc[string](func(_ context.Context, key string) (Result, error) {
		calls.Record(key)
		err := errs[0]
		errs = errs[1:]
		return Result{}, err
	}), Options[string]{Clock: clk, RateLimiter: newRecordingLimiter(), Metrics: met, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	c.Queue().Add("k")
	calls.Next(t, 1)
	recv(t, met.outcomes, "outcome")
	clk.Step(time.Second)
	nextOutcome(t, calls, met, OutcomeTerminal)
	if r := c.Queue().NumRequeues("k"); r != 0 {
		t.Errorf("NumRequeues %d after a terminal error, want 0 (forgotten)", r)
	}
	if w := clk.Waiters(); w != 0 {
		t.Errorf("%d timers armed after a terminal error, want none (no retry)", w)
	}
	if e, te := met.errors.n.Load(), met.terminal.n.Load(); e != 2 || te != 1 {
		t.Errorf("errors %d terminal %d, want 2 and 1", e, te)
	}
	clk.Step(time.Hour)
	calls.ExpectNoMore(t)

	c.Queue().Add("k") // a new notification
	nextOutcome(t, calls, met, OutcomeSuccess)
	var totals []int64
	for o := range met.total {
		totals = append(totals, met.total[o].n.Load())
	}
	if fmt.Sprint(totals) != "[1 1 0 0 1]" { // success, error, requeue, requeue_after, terminal
		t.Errorf("reconcile totals %v, want [1 1 0 0 1]", totals)
	}
	if n := met.observed.Load(); n != 3 {
		t.Errorf("%d reconcile times observed, want 3", n)
	}
	if a, p := met.active.n.Load(), met.active.peak.Load(); a != 0 || p != 1 {
		t.Errorf("active workers %d (peak %d), want 0 (peak 1)", a, p)
	}
}

func TestTerminalErrorMatching(t *testing.T) {
	err := fmt.Errorf("reconcile: %w", TerminalError(errBoom))
	if !errors.Is(err, ErrTerminal) || !errors.Is(err, errBoom) {
		t.Fatalf("%v: does not match ErrTerminal and its cause", err)
	}
	if errors.Is(errBoom, ErrTerminal) {
		t.Fatal("a plain error matches ErrTerminal")
	}
	if TerminalError(nil) != ErrTerminal {
		t.Fatal("TerminalError(nil) is not ErrTerminal")
	}
	if got := TerminalError(errBoom).Error(); got != "terminal error: boom" {
		t.Fatalf("Error() = %q", got)
	}
}

// limiterOp is one call the controller made to the rate limiter.
type limiterOp struct {
	Op    string // "when" or "forget"
	Key   string
	Delay time.Duration // for "when"
}

func (o limiterOp) String() string {
	if o.Op == "when" {
		return fmt.Sprintf("when(%s)=%v", o.Key, o.Delay)
	}
	return fmt.Sprintf("%s(%s)", o.Op, o.Key)
}

// recordingLimiter is an exponential limiter (1 s doubling) that records When and Forget.
type recordingLimiter struct {
	*workqueue.ExponentialRateLimiter[string]
	mu  sync.Mutex
	ops []limiterOp
}

func newRecordingLimiter() *recordingLimiter {
	return &recordingLimiter{ExponentialRateLimiter: workqueue.NewExponentialRateLimiter[string](time.Second, time.Hour)}
}

func (r *recordingLimiter) When(key string) time.Duration {
	d := r.ExponentialRateLimiter.When(key)
	r.mu.Lock()
	r.ops = append(r.ops, limiterOp{"when", key, d})
	r.mu.Unlock()
	return d
}

func (r *recordingLimiter) Forget(key string) {
	r.ExponentialRateLimiter.Forget(key)
	r.mu.Lock()
	r.ops = append(r.ops, limiterOp{Op: "forget", Key: key})
	r.mu.Unlock()
}

// take returns the calls recorded since the last take.
func (r *recordingLimiter) take() []limiterOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := r.ops
	r.ops = nil
	return ops
}
