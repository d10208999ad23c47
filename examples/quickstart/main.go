// Command quickstart shows the informer end to end on the in-memory source: a writer
// changes a collection of service configs, an informer with two indexes mirrors it, two
// typed handlers print what changed, and a query by index reads the cache. It exits by
// itself after a few seconds. With -metrics-addr it also serves the informer's Prometheus
// metrics at /metrics on that loopback address while it runs.
//
//	go run ./examples/quickstart [-metrics-addr 127.0.0.1:9090]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
)

// Service is the object the example mirrors.
type Service struct {
	Name     string // the key
	Team     string // owning team (indexed)
	Env      string // environment, e.g. prod (indexed)
	Replicas int    // desired replica count
}

func main() {
	metricsAddr := flag.String("metrics-addr", "", "serve Prometheus metrics at /metrics on this loopback address, e.g. 127.0.0.1:9090")
	flag.Parse()
	if err := run(os.Stdout, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(out *os.File, metricsAddr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex // one printer at a time
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}

	// The source: an in-memory, revisioned log. Anything that can list and watch plugs in
	// the same way (source/http, source/etcd, source/kubernetes).
	src := memory.New(func(s *Service) string { return s.Name }, memory.Options{})
	for _, s := range []*Service{
		{Name: "checkout", Team: "payments", Env: "prod", Replicas: 3},
		{Name: "ledger", Team: "payments", Env: "prod", Replicas: 2},
		{Name: "search", Team: "discovery", Env: "prod", Replicas: 4},
		{Name: "search-canary", Team: "discovery", Env: "staging", Replicas: 1},
	} {
		src.Put(s)
	}

	inf, err := informer.New(src, informer.Options[string, *Service]{
		Name: "services",
		Key:  func(s *Service) (string, error) { return s.Name, nil },
		Indexers: informer.Indexers[*Service]{
			"team": informer.IndexBy(func(s *Service) (string, error) { return s.Team, nil }),
			"env":  informer.IndexBy(func(s *Service) (string, error) { return s.Env, nil }),
		},
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		ErrorHandler: func(err error) { say("error: %v", err) },
	})
	if err != nil {
		return err
	}

	// Handler 1: a typed change log.
	logReg, err := inf.AddHandler(informer.HandlerFuncs[*Service]{
		AddFunc: func(s *Service, initial bool) {
			tag := "added"
			if initial {
				tag = "listed"
			}
			say("  [log]    %-6s %-14s team=%-9s env=%-7s replicas=%d", tag, s.Name, s.Team, s.Env, s.Replicas)
		},
		UpdateFunc: func(old, new *Service) {
			say("  [log]    update %-14s replicas %d → %d", new.Name, old.Replicas, new.Replicas)
		},
		DeleteFunc: func(s *Service, unknown bool) {
			say("  [log]    delete %-14s (final state unknown: %v)", s.Name, unknown)
		},
	}, informer.HandlerOptions{Name: "log"})
	if err != nil {
		return err
	}

	// Handler 2: keeps a replica total per team, from typed values, no type assertions.
	var totalsMu sync.Mutex
	totals := map[string]int{}
	change := func(team string, d int) {
		totalsMu.Lock()
		totals[team] += d
		totalsMu.Unlock()
	}
	lastSeen := make(chan struct{}) // closed when this handler has seen the demo's last write
	totalsReg, err := inf.AddHandler(informer.HandlerFuncs[*Service]{
		AddFunc: func(s *Service, _ bool) { change(s.Team, s.Replicas) },
		UpdateFunc: func(old, new *Service) {
			change(old.Team, -old.Replicas)
			change(new.Team, new.Replicas)
			if new.Name == "search" && new.Replicas == 6 {
				close(lastSeen)
			}
		},
		DeleteFunc: func(s *Service, _ bool) { change(s.Team, -s.Replicas) },
	}, informer.HandlerOptions{Name: "totals"})
	if err != nil {
		return err
	}

	if metricsAddr != "" {
		// The informer's series and its handlers', removed when it stops.
		reg := prometheus.NewRegistry()
		if _, err := metrics.RegisterInformer(reg, inf); err != nil {
			return err
		}
		url, stopServing, err := serveMetrics(metricsAddr, reg)
		if err != nil {
			return err
		}
		defer stopServing()
		say("== metrics at %s", url)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()

	say("== initial list")
	// Wait for the cache and both handlers. If ctx ends first, the error names what did
	// not sync and why: the source's last error (inf.LastError), such as a refused
	// connection.
	if err := informer.WaitForCacheSync(ctx, inf, logReg, totalsReg); err != nil {
		return err
	}

	say("== live changes")
	var last int64
	for _, step := range []func(){
		func() { last = src.Put(&Service{Name: "checkout", Team: "payments", Env: "prod", Replicas: 5}) },
		func() { last = src.Put(&Service{Name: "fraud", Team: "payments", Env: "staging", Replicas: 1}) },
		func() { last, _ = src.Delete("search-canary") },
		func() { last = src.Put(&Service{Name: "search", Team: "discovery", Env: "prod", Replicas: 6}) },
	} {
		step()
		time.Sleep(200 * time.Millisecond) // pace the demo so the log reads as it happens
	}

	// Read-your-writes: wait until the cache holds the last write, then query by index.
	if err := inf.WaitForRevision(ctx, fmt.Sprint(last)); err != nil {
		return err
	}
	payments, err := inf.ByIndex("team", "payments")
	if err != nil {
		return err
	}
	names := make([]string, 0, len(payments))
	for _, s := range payments {
		names = append(names, s.Name)
	}
	say("== query: team=payments → %s", strings.Join(names, ", "))
	staging, _ := inf.ByIndex("env", "staging")
	say("== query: env=staging   → %d service(s)", len(staging))
	// Handlers run on their own goroutines: wait for the totals handler to catch up.
	select {
	case <-lastSeen:
	case <-ctx.Done():
		return ctx.Err()
	}
	totalsMu.Lock()
	say("== replicas per team: payments=%d discovery=%d", totals["payments"], totals["discovery"])
	totalsMu.Unlock()

	stop()
	return <-done
}
