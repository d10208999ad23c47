// Command leaderelection is a service run as several replicas against etcd: every replica
// mirrors the prefix <prefix>desired/ in an informer and serves /healthz, /readyz and
// /metrics; the replica that leads reconciles each desired item into <prefix>status/ and
// appends a heartbeat to <prefix>log/, every write fenced by its term, so that a replica
// that lost its term without knowing it (paused, partitioned) has its writes refused by
// etcd itself.
//
//	go run ./examples/leaderelection --endpoints 127.0.0.1:2379 --name a --health-addr 127.0.0.1:8081 &
//	go run ./examples/leaderelection --endpoints 127.0.0.1:2379 --name b --health-addr 127.0.0.1:8082 &
//	etcdctl put /demo/desired/web 3
//	curl '127.0.0.1:8081/readyz?verbose'
//
// It prints one line per write attempt on stdout, "write term=<term> seq=<n> accepted
// rev=<etcd revision> at=<unix nanoseconds>" or "... refused at=<unix nanoseconds>", which
// the process-level tests of source/etcd read. Stop it with SIGTERM or SIGINT: it stops
// the leader-only work, resigns, and stops its informer.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/controller"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/etcd"
	"github.com/informer-go/informer/source/etcd/election"
)

// Item is one desired item.
type Item struct {
	// Name is the key after <prefix>desired/.
	Name string
	// Value is the value, reconciled into <prefix>status/<Name>.
	Value string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "leaderelection:", err)
		os.Exit(1)
	}
}

func run() error {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "etcd endpoints, comma-separated")
	name := flag.String("name", "", "this replica's identity (default hostname-pid)")
	prefix := flag.String("prefix", "/demo/", "the service's key prefix")
	ttl := flag.Duration("ttl", 15*time.Second, "the election lease's TTL (whole seconds, at least 2s)")
	healthAddr := flag.String("health-addr", "127.0.0.1:8081", "address of /healthz, /readyz and /metrics")
	every := flag.Duration("heartbeat", time.Second, "the leader's heartbeat period")
	electionEndpoints := flag.String("election-endpoints", "", "the elector's etcd endpoints, comma-separated (default --endpoints)")
	snapshots := flag.String("snapshot-dir", "", "if set, the informer saves its cache there when it stops and restores it at start")
	careless := flag.Bool("careless-heartbeat", false, "write each heartbeat without checking the term's context first, "+
		"as a reconciler that ignores its context would: a replica resumed after its term ended then writes under its "+
		"old term, and etcd refuses it")
	stuck := flag.Bool("stuck-writer", false, "also run a leader-only writer that ignores its context and writes without "+
		"fencing under <prefix>stuck/: once the term is lost the manager's hard stop (OnLeaderStuck) exits the process "+
		"before the lease may expire, which the process-level test checks against etcd's revisions")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica", *name)
	cfg := clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	data, err := clientv3.New(cfg) // the informer's and the writes' client
	if err != nil {
		return err
	}
	defer data.Close()
	ecfg := cfg
	if *electionEndpoints != "" {
		ecfg.Endpoints = strings.Split(*electionEndpoints, ",")
	}
	el, err := election.New(ecfg, election.Options{Prefix: *prefix + "election/", Identity: *name, TTL: *ttl, Logger: log})
	if err != nil {
		return err
	}
	defer el.Close()

	src, err := etcd.New(data, *prefix+"desired/", func(key, value []byte) (*Item, error) {
		return &Item{Name: strings.TrimPrefix(string(key), *prefix+"desired/"), Value: string(value)}, nil
	}, etcd.Options{})
	if err != nil {
		return err
	}
	opts := informer.Options[string, *Item]{
		Name:   "desired",
		Key:    func(it *Item) (string, error) { return it.Name, nil },
		Logger: log,
	}
	if *snapshots != "" {
		if opts.Persist, err = persist.New[string, *Item](*snapshots, persist.Options[*Item]{}); err != nil {
			return err
		}
	}
	desired, err := informer.New(src, opts)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leaderelection_writes_total", Help: "Fenced writes attempted, by result (accepted, refused, error).",
	}, []string{"result"})
	reg.MustRegister(writes)

	var out sync.Mutex // one line per write on stdout
	write := func(ctx context.Context, seq string, op clientv3.Op) error {
		term, _ := manager.TermFrom(ctx)
		resp, err := election.Fenced(ctx, data, op)
		result := "accepted"
		switch {
		case errors.Is(err, election.ErrStaleTerm):
			result = "refused"
		case err != nil:
			result = "error"
		default: // the revision that committed it: where the write sits in etcd's order
			result += fmt.Sprint(" rev=", resp.Header.Revision)
		}
		writes.WithLabelValues(strings.Fields(result)[0]).Inc()
		out.Lock()
		fmt.Printf("write term=%d seq=%s %s at=%d\n", term.Value, seq, result, time.Now().UnixNano())
		out.Unlock()
		return err
	}

	m, err := manager.New(manager.Options{Elector: el, HealthAddr: *healthAddr, Metrics: reg, Logger: log})
	if err != nil {
		return err
	}
	if err := m.AddInformer(desired); err != nil {
		return err
	}
	// The reconciler: a new controller each term (a controller runs once).
	if err := m.AddLeader("reconciler", manager.RunnableFunc(func(ctx context.Context) error {
		c, err := controller.New(controller.ReconcilerFunc[string](func(ctx context.Context, key string) (controller.Result, error) {
			it, ok := desired.Get(key)
			op := clientv3.OpDelete(*prefix + "status/" + key)
			if ok {
				op = clientv3.OpPut(*prefix+"status/"+key, it.Value)
			}
			if err := write(ctx, "status/"+key, op); errors.Is(err, election.ErrStaleTerm) {
				return controller.Result{}, controller.TerminalError(err)
			} else if err != nil {
				return controller.Result{}, err
			}
			return controller.Result{}, nil
		}), controller.Options[string]{Name: "status", Logger: log})
		if err != nil {
			return err
		}
		if err := controller.For(c, desired, func(it *Item) (string, error) { return it.Name, nil }); err != nil {
			return err
		}
		return c.Start(ctx)
	})); err != nil {
		return err
	}
	// The heartbeat: the write log a test reads back.
	if err := m.AddLeader("heartbeat", manager.RunnableFunc(func(ctx context.Context) error {
		term, _ := manager.TermFrom(ctx)
		t := time.NewTicker(*every)
		defer t.Stop()
		for seq := 0; ; seq++ {
			key := fmt.Sprintf("%slog/%020d-%06d", *prefix, term.Value, seq)
			wctx := ctx
			if *careless {
				wctx = context.WithoutCancel(ctx) // still carries the term: fencing holds
			}
			if err := write(wctx, fmt.Sprint(seq), clientv3.OpPut(key, fmt.Sprint(term.Value))); errors.Is(err, election.ErrStaleTerm) {
				<-ctx.Done() // the term is over; the manager ends it within its renew deadline
				return nil
			}
			if *careless {
				<-t.C
				continue
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})); err != nil {
		return err
	}

	if *stuck {
		if err := m.AddLeader("stuck", manager.RunnableFunc(func(ctx context.Context) error {
			term, _ := manager.TermFrom(ctx)
			for seq := 0; ; seq++ { // never returns, and ignores ctx: stuck work
				key := fmt.Sprintf("%sstuck/%020d-%06d", *prefix, term.Value, seq)
				resp, err := data.Put(context.WithoutCancel(ctx), key, fmt.Sprint(term.Value))
				if err == nil {
					out.Lock()
					fmt.Printf("write term=%d seq=stuck-%d accepted rev=%d at=%d\n", term.Value, seq, resp.Header.Revision, time.Now().UnixNano())
					out.Unlock()
				}
				time.Sleep(*every) // its pace
			}
		})); err != nil {
			return err
		}
	}

	ctx, stop := manager.SignalContext(context.Background())
	defer stop()
	log.Info("starting", "endpoints", *endpoints, "prefix", *prefix, "ttl", *ttl)
	return m.Start(ctx)
}
