// Command controller shows a reconcile loop end to end on the in-memory source: an
// informer mirrors a collection of apps, a controller with two workers reconciles each app
// by name, one app's rollout is polled with RequeueAfter until it completes, another app
// fails twice and is retried with backoff, then a scale-up and a delete are reconciled and
// the controller drains and stops. It exits by itself within a few seconds. With
// -metrics-addr it also serves the informer's, the controller's and its queue's Prometheus
// metrics at /metrics on that loopback address while it runs.
//
//	go run ./examples/controller [-metrics-addr 127.0.0.1:9090]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/controller"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
)

// App is the desired state the controller reconciles.
type App struct {
	Name     string // the key
	Image    string // container image to run
	Replicas int    // desired number of replicas
}

func main() {
	metricsAddr := flag.String("metrics-addr", "", "serve Prometheus metrics at /metrics on this loopback address, e.g. 127.0.0.1:9090")
	flag.Parse()
	if err := run(os.Stdout, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
}

// world stands for the system the controller drives: what is deployed, and a registry
// that is down for billing's first two pulls.
type world struct {
	mu         sync.Mutex
	pulls      map[string]int // failed image pulls so far, per app
	rolledOut  map[string]int // rollout checks so far, per app
	milestones map[string]chan struct{}
}

func (w *world) milestone(name string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.milestones[name]
	if !ok {
		ch = make(chan struct{})
		w.milestones[name] = ch
	}
	return ch
}

// reach marks a milestone as reached; reaching it again does nothing.
func (w *world) reach(name string) {
	ch := w.milestone(name)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

var errRegistry = errors.New("image registry unreachable")

// timestamped writes each line it is given after the time elapsed since begin, one writer
// at a time.
type timestamped struct {
	mu    sync.Mutex
	out   io.Writer
	begin time.Time
}

func (t *timestamped) Write(line []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%6.3fs  %s", time.Since(t.begin).Seconds(), line)
	return len(line), nil
}

func run(out io.Writer, metricsAddr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts := &timestamped{out: out, begin: time.Now()}
	say := func(format string, args ...any) { fmt.Fprintf(ts, format+"\n", args...) }

	src := memory.New(func(a *App) string { return a.Name }, memory.Options{})
	src.Put(&App{Name: "api", Image: "api:1.4", Replicas: 2})
	src.Put(&App{Name: "billing", Image: "billing:2.0", Replicas: 1})
	src.Put(&App{Name: "web", Image: "web:7.1", Replicas: 3})

	// The controller logs its failed reconciles at Error level; show them in line.
	logger := slog.New(slog.NewTextHandler(ts, &slog.HandlerOptions{
		Level: slog.LevelError,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	apps, err := informer.New(src, informer.Options[string, *App]{
		Name:   "apps",
		Key:    func(a *App) (string, error) { return a.Name, nil },
		Logger: logger,
	})
	if err != nil {
		return err
	}

	w := &world{pulls: map[string]int{}, rolledOut: map[string]int{}, milestones: map[string]chan struct{}{}}
	reconcile := func(ctx context.Context, name string) (controller.Result, error) {
		app, ok := apps.Get(name)
		if !ok {
			say("reconcile %-8s deleted: tearing down", name)
			w.reach(name + " gone")
			return controller.Result{}, nil
		}
		w.mu.Lock()
		var failedPulls, checks int
		switch {
		case name == "billing" && w.pulls[name] < 2:
			w.pulls[name]++
			failedPulls = w.pulls[name]
		case name == "web" && w.rolledOut[name] < 3:
			w.rolledOut[name]++
			checks = w.rolledOut[name]
		}
		w.mu.Unlock()
		switch {
		case failedPulls > 0:
			say("reconcile %-8s pull of %s failed (attempt %d): %v → retried with backoff", name, app.Image, failedPulls, errRegistry)
			return controller.Result{}, fmt.Errorf("pull %s: %w", app.Image, errRegistry)
		case checks > 0:
			say("reconcile %-8s rollout of %s: %d/3 replicas updated → check again in 300ms", name, app.Image, checks)
			return controller.Result{RequeueAfter: 300 * time.Millisecond}, nil
		}
		say("reconcile %-8s %d × %s running", name, app.Replicas, app.Image)
		w.reach(fmt.Sprintf("%s %d", name, app.Replicas))
		return controller.Result{}, nil
	}

	opts := controller.Options[string]{
		Name:                    "apps",
		MaxConcurrentReconciles: 2,
		Logger:                  logger,
	}
	if metricsAddr != "" {
		// The informer's series, and the controller's and its queue's; each removed when
		// it stops.
		reg := prometheus.NewRegistry()
		if _, err := metrics.RegisterInformer(reg, apps); err != nil {
			return err
		}
		cm, err := metrics.RegisterController(reg, "apps")
		if err != nil {
			return err
		}
		opts.Metrics, opts.QueueMetrics = cm, cm.Queue()
		url, stopServing, err := serveMetrics(metricsAddr, reg)
		if err != nil {
			return err
		}
		defer stopServing()
		say("== metrics at %s", url)
	}
	c, err := controller.New(controller.ReconcilerFunc[string](reconcile), opts)
	if err != nil {
		return err
	}
	// A nil key function: the controller keys by the informer's own key (apps.Key).
	if err := controller.For(c, apps, nil); err != nil {
		return err
	}

	// The informer and the controller run side by side; the first error of either stops
	// both (errgroup cancels gctx) and is what Wait returns.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return apps.Run(gctx) })
	g.Go(func() error { return c.Start(gctx) })
	defer func() { stop(); _ = g.Wait() }()

	wait := func(milestone string) error {
		select {
		case <-w.milestone(milestone):
			return nil
		case <-gctx.Done():
			stop()
			if err := g.Wait(); err != nil {
				return fmt.Errorf("waiting for %q: %w", milestone, err)
			}
			return fmt.Errorf("waiting for %q: %w", milestone, ctx.Err())
		}
	}

	say("== initial list: every app is reconciled once the cache has synced")
	for _, m := range []string{"api 2", "billing 1", "web 3"} {
		if err := wait(m); err != nil {
			return err
		}
	}
	say("== a change: scale api to 5")
	src.Put(&App{Name: "api", Image: "api:1.4", Replicas: 5})
	if err := wait("api 5"); err != nil {
		return err
	}
	say("== a delete: billing")
	src.Delete("billing")
	if err := wait("billing gone"); err != nil {
		return err
	}

	say("== shutting down: the controller drains, then the informer stops")
	stop()
	if err := g.Wait(); err != nil {
		return err
	}
	say("== stopped")
	return nil
}
