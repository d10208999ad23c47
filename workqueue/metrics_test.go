package workqueue

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer/clock"
)

// recorder is a MetricsProvider that keeps every value for inspection.
type recorder struct {
	mu         sync.Mutex
	names      []string
	depth      int
	adds       int
	retries    int
	latency    []float64
	work       []float64
	unfinished func() float64
	longest    func() float64
}

// The hooks may be called concurrently, so each takes the recorder's lock.
type recGauge struct{ r *recorder }

func (g recGauge) Inc() { g.r.mu.Lock(); g.r.depth++; g.r.mu.Unlock() }
func (g recGauge) Dec() { g.r.mu.Lock(); g.r.depth--; g.r.mu.Unlock() }

type recCounter struct {
	r *recorder
	n *int
}

func (c recCounter) Inc() { c.r.mu.Lock(); *c.n++; c.r.mu.Unlock() }

type recHistogram struct {
	r *recorder
	s *[]float64
}

func (h recHistogram) Observe(v float64) { h.r.mu.Lock(); *h.s = append(*h.s, v); h.r.mu.Unlock() }

func (r *recorder) named(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, name)
}

func (r *recorder) NewDepthMetric(name string) Gauge { r.named(name); return recGauge{r} }
func (r *recorder) NewAddsMetric(name string) Counter {
	r.named(name)
	return recCounter{r, &r.adds}
}
func (r *recorder) NewLatencyMetric(name string) Histogram {
	r.named(name)
	return recHistogram{r, &r.latency}
}
func (r *recorder) NewWorkDurationMetric(name string) Histogram {
	r.named(name)
	return recHistogram{r, &r.work}
}
func (r *recorder) NewRetriesMetric(name string) Counter {
	r.named(name)
	return recCounter{r, &r.retries}
}
func (r *recorder) NewUnfinishedWorkSecondsFunc(name string, f func() float64) {
	r.named(name)
	r.unfinished = f
}
func (r *recorder) NewLongestRunningProcessorSecondsFunc(name string, f func() float64) {
	r.named(name)
	r.longest = f
}

// TestMetrics drives a known sequence on a fake clock and checks every metric after each
// step.
func TestMetrics(t *testing.T) {
	clk := clock.NewFake(epoch)
	rec := &recorder{}
	q := New(Options[string]{Name: "q", Clock: clk, Metrics: rec, RateLimiter: &FastSlowRateLimiter[string]{}})
	t.Cleanup(q.ShutDown)
	if want := slices.Repeat([]string{"q"}, 7); !slices.Equal(rec.names, want) {
		t.Fatalf("constructors called with %v, want each once with the queue name", rec.names)
	}

	type want struct {
		depth, adds, retries int
		latency, work        []float64
		unfinished, longest  float64
	}
	check := func(step string, w want) {
		t.Helper()
		rec.mu.Lock()
		got := want{rec.depth, rec.adds, rec.retries, slices.Clone(rec.latency), slices.Clone(rec.work), 0, 0}
		rec.mu.Unlock()
		if n := q.Len(); got.depth != n {
			t.Errorf("%s: depth %d != Len %d", step, got.depth, n)
		}
		got.unfinished, got.longest = rec.unfinished(), rec.longest()
		if got.depth != w.depth || got.adds != w.adds || got.retries != w.retries ||
			!slices.Equal(got.latency, w.latency) || !slices.Equal(got.work, w.work) ||
			got.unfinished != w.unfinished || got.longest != w.longest {
			t.Fatalf("%s:\n got %+v\nwant %+v", step, got, w)
		}
	}
	sec := time.Second

	run(t, q, []string{"+a", "+b", "+a"}) // t=0; the second a merges
	check("t=0 add a b a", want{depth: 2, adds: 2})

	clk.Step(sec)
	run(t, q, []string{"<a"}) // t=1
	check("t=1 get a", want{depth: 1, adds: 2, latency: []float64{1}})

	clk.Step(2 * sec)
	run(t, q, []string{"+a"}) // t=3, a is being processed: counted, not queued
	check("t=3 re-add a", want{depth: 1, adds: 3, latency: []float64{1}, unfinished: 2, longest: 2})

	run(t, q, []string{"<b"}) // t=3, b waited 3 s
	clk.Step(sec)             // t=4: a has run 3 s, b 1 s
	check("t=4 get b", want{depth: 0, adds: 3, latency: []float64{1, 3}, unfinished: 4, longest: 3})

	run(t, q, []string{"-a"}) // a ran 3 s and is queued again
	check("t=4 done a", want{depth: 1, adds: 3, latency: []float64{1, 3}, work: []float64{3}, unfinished: 1, longest: 1})

	clk.Step(2 * sec)
	run(t, q, []string{"<a", "-b", "-a"}) // t=6: a waited 3 s since its re-add at t=3
	check("t=6 get a, done b a", want{depth: 0, adds: 3, latency: []float64{1, 3, 3}, work: []float64{3, 3, 0}})

	q.AddRateLimited("c") // zero FastSlow: no delay, so c is added at once
	check("t=6 retry c", want{depth: 1, adds: 4, retries: 1, latency: []float64{1, 3, 3}, work: []float64{3, 3, 0}})

	q.ShutDown()
	q.AddRateLimited("d")
	check("after shutdown", want{depth: 1, adds: 4, retries: 1, latency: []float64{1, 3, 3}, work: []float64{3, 3, 0}})
}

// nilProvider leaves every metric out.
type nilProvider struct{}

func (nilProvider) NewDepthMetric(string) Gauge                                  { return nil }
func (nilProvider) NewAddsMetric(string) Counter                                 { return nil }
func (nilProvider) NewLatencyMetric(string) Histogram                            { return nil }
func (nilProvider) NewWorkDurationMetric(string) Histogram                       { return nil }
func (nilProvider) NewRetriesMetric(string) Counter                              { return nil }
func (nilProvider) NewUnfinishedWorkSecondsFunc(string, func() float64)          {}
func (nilProvider) NewLongestRunningProcessorSecondsFunc(string, func() float64) {}

// TestMetricsLeftOut checks that a provider may return nil metrics.
func TestMetricsLeftOut(t *testing.T) {
	q := New(Options[string]{Metrics: nilProvider{}, RateLimiter: &FastSlowRateLimiter[string]{}})
	t.Cleanup(q.ShutDown)
	q.AddRateLimited("a")
	run(t, q, []string{"+b", "<a", "+a", "-a", "<b", "-b", "<a", "-a"})
}

// TestNoMetricsAllocatesNothing checks that without a provider the steady-state
// Add/Get/Done cycle allocates nothing.
func TestNoMetricsAllocatesNothing(t *testing.T) {
	q := New(Options[int]{})
	t.Cleanup(q.ShutDown)
	cycle := func() {
		for i := range 64 {
			q.Add(i)
		}
		for range 64 {
			i, _ := q.Get()
			q.Done(i)
		}
	}
	cycle() // warm up: the ring and the map reach their size
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Fatalf("%v allocations per 64-item cycle, want 0", n)
	}
}

// shutDownRecorder is a recorder that counts QueueShutDown calls.
type shutDownRecorder struct {
	recorder
	calls []string
}

func (r *shutDownRecorder) QueueShutDown(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, name)
}

// TestShutDownObserver: a provider that implements ShutDownObserver hears of the shutdown
// once, whichever of ShutDown and ShutDownWithDrain comes first and however often.
func TestShutDownObserver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(q *Queue[string])
	}{
		{"ShutDown", func(q *Queue[string]) { q.ShutDown() }},
		{"ShutDownWithDrain", func(q *Queue[string]) { q.ShutDownWithDrain(t.Context()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &shutDownRecorder{}
			q := New(Options[string]{Name: "jobs", Metrics: r})
			q.Add("a")
			if a, _ := q.Get(); a != "a" {
				t.Fatalf("Get = %q", a)
			}
			q.Done("a") // drained: ShutDownWithDrain returns at once
			if len(r.calls) != 0 {
				t.Fatalf("observer called before the shutdown: %q", r.calls)
			}
			tc.first(q)
			if !slices.Equal(r.calls, []string{"jobs"}) {
				t.Fatalf("after %s: calls %q, want [jobs]", tc.name, r.calls)
			}
			q.ShutDown()
			q.ShutDownWithDrain(t.Context())
			if len(r.calls) != 1 {
				t.Fatalf("after more shutdowns: calls %q, want one", r.calls)
			}
		})
	}
}
