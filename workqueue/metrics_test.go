package workqueue

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/testkit"
)

// provider is a MetricsProvider that records every metric call in a testkit.Log, in
// order: "depth+1", "depth-1", "adds", "retries", "latency=1", "work=3" (seconds); it
// keeps the names its constructors were given and the two gauge functions, to call.
type provider struct {
	*testkit.Log
	mu                  sync.Mutex
	names               []string
	unfinished, longest func() float64
}

func newProvider() *provider { return &provider{Log: testkit.NewLog()} }

type logGauge struct{ l *testkit.Log }

func (g logGauge) Inc() { g.l.Record("depth+1") }
func (g logGauge) Dec() { g.l.Record("depth-1") }

type logCounter struct {
	l    *testkit.Log
	name string
}

func (c logCounter) Inc() { c.l.Record(c.name) }

type logHistogram struct {
	l    *testkit.Log
	name string
}

func (h logHistogram) Observe(v float64) { h.l.Record(fmt.Sprintf("%s=%g", h.name, v)) }

// named notes the name a constructor was given and returns the log its metric records in.
func (p *provider) named(name string) *testkit.Log {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = append(p.names, name)
	return p.Log
}

func (p *provider) NewDepthMetric(name string) Gauge     { return logGauge{p.named(name)} }
func (p *provider) NewAddsMetric(name string) Counter    { return logCounter{p.named(name), "adds"} }
func (p *provider) NewRetriesMetric(name string) Counter { return logCounter{p.named(name), "retries"} }
func (p *provider) NewLatencyMetric(name string) Histogram {
	return logHistogram{p.named(name), "latency"}
}
func (p *provider) NewWorkDurationMetric(name string) Histogram {
	return logHistogram{p.named(name), "work"}
}

// NewUnfinishedWorkSecondsFunc and NewLongestRunningProcessorSecondsFunc keep f to call.
func (p *provider) NewUnfinishedWorkSecondsFunc(name string, f func() float64) {
	p.named(name)
	p.unfinished = f
}
func (p *provider) NewLongestRunningProcessorSecondsFunc(name string, f func() float64) {
	p.named(name)
	p.longest = f
}

// TestMetrics drives a known sequence on a fake clock and checks, after each step, the
// metric calls it made, in order, and the two gauge functions.
func TestMetrics(t *testing.T) {
	clk := clock.NewFake(epoch)
	rec := newProvider()
	q := New(Options[string]{Name: "q", Clock: clk, Metrics: rec, RateLimiter: &FastSlowRateLimiter[string]{}})
	t.Cleanup(q.ShutDown)
	if want := slices.Repeat([]string{"q"}, 7); !slices.Equal(rec.names, want) {
		t.Fatalf("constructors called with %v, want each once with the queue name", rec.names)
	}

	check := func(step string, unfinished, longest float64, calls ...string) {
		t.Helper()
		rec.ExpectNext(t, calls...)
		rec.ExpectNoMore(t)
		depth := 0
		for _, c := range rec.Calls() {
			switch c {
			case "depth+1":
				depth++
			case "depth-1":
				depth--
			}
		}
		if n := q.Len(); depth != n {
			t.Errorf("%s: depth %d != Len %d", step, depth, n)
		}
		if u, l := rec.unfinished(), rec.longest(); u != unfinished || l != longest {
			t.Fatalf("%s: unfinished %v, longest %v; want %v, %v", step, u, l, unfinished, longest)
		}
	}
	sec := time.Second

	run(t, q, []string{"+a", "+b", "+a"}) // t=0; the second a merges
	check("t=0 add a b a", 0, 0, "adds", "depth+1", "adds", "depth+1")

	clk.Step(sec)
	run(t, q, []string{"<a"}) // t=1
	check("t=1 get a", 0, 0, "depth-1", "latency=1")

	clk.Step(2 * sec)
	run(t, q, []string{"+a"}) // t=3, a is being processed: counted, not queued
	check("t=3 re-add a", 2, 2, "adds")

	run(t, q, []string{"<b"}) // t=3, b waited 3 s
	clk.Step(sec)             // t=4: a has run 3 s, b 1 s
	check("t=4 get b", 4, 3, "depth-1", "latency=3")

	run(t, q, []string{"-a"}) // a ran 3 s and is queued again
	check("t=4 done a", 1, 1, "depth+1", "work=3")

	clk.Step(2 * sec)
	run(t, q, []string{"<a", "-b", "-a"}) // t=6: a waited 3 s since its re-add at t=3
	check("t=6 get a, done b a", 0, 0, "depth-1", "latency=3", "work=3", "work=0")

	q.AddRateLimited("c") // zero FastSlow: no delay, so c is added at once
	check("t=6 retry c", 0, 0, "retries", "adds", "depth+1")

	q.ShutDown()
	q.AddRateLimited("d")
	check("after shutdown", 0, 0)
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

// shutDownProvider is a provider without metrics that records each QueueShutDown call
// ("shutdown name").
type shutDownProvider struct {
	nilProvider
	*testkit.Log
}

func (p shutDownProvider) QueueShutDown(name string) { p.Record("shutdown " + name) }

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
			r := shutDownProvider{Log: testkit.NewLog()}
			q := New(Options[string]{Name: "jobs", Metrics: r})
			q.Add("a")
			if a, _ := q.Get(); a != "a" {
				t.Fatalf("Get = %q", a)
			}
			q.Done("a") // drained: ShutDownWithDrain returns at once
			r.ExpectNoMore(t)
			tc.first(q)
			r.ExpectNext(t, "shutdown jobs")
			q.ShutDown()
			q.ShutDownWithDrain(t.Context())
			r.ExpectNoMore(t)
		})
	}
}
