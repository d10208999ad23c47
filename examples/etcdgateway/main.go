// Command etcdgateway mirrors JSON config documents stored in etcd through etcd's own JSON
// gateway (POST /v3/kv/range, POST /v3/watch) with httpsource.Client: a list+watch HTTP
// API that nobody here wrote, mirrored with the Client's five extension points (see
// gateway.go) and no etcd client library in the mirror.
//
// With no flags it starts an embedded etcd server (in a temporary directory, on loopback
// ports), writes a few documents, mirrors them, changes them while the mirror runs — a
// transaction of two writes, a delete, a value that is not JSON and its fix — and exits
// by itself within a few seconds:
//
//	go run ./examples/etcdgateway
//
// With --endpoint it mirrors a real etcd's gateway instead, until --duration has passed or
// it is interrupted:
//
//	go run ./examples/etcdgateway --endpoint http://127.0.0.1:2379 --prefix /config/
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/etcd/etcdtest"
)

// Config is one service's configuration, stored as JSON under <prefix><name>.
type Config struct {
	Name     string `json:"-"`        // from the key, after the prefix
	Team     string `json:"team"`     // the owning team (an index)
	Replicas int    `json:"replicas"` // how many instances run
}

// String renders the config on one line.
func (c *Config) String() string {
	return fmt.Sprintf("%s team=%s replicas=%d", c.Name, c.Team, c.Replicas)
}

// decoder decodes the documents under prefix; a delete (nil value) gives the name alone.
func decoder(prefix string) Decoder[*Config] {
	return func(key, value []byte) (*Config, error) {
		c := &Config{Name: strings.TrimPrefix(string(key), prefix)}
		if value == nil {
			return c, nil
		}
		if err := json.Unmarshal(value, c); err != nil {
			return nil, err
		}
		return c, nil
	}
}

// options are the command-line flags.
type options struct {
	endpoint string // empty: start an embedded etcd
	prefix   string
	duration time.Duration
}

func main() {
	var opts options
	flag.StringVar(&opts.endpoint, "endpoint", "", "the etcd gateway to mirror (an etcd client URL); empty starts an embedded etcd with sample data")
	flag.StringVar(&opts.prefix, "prefix", "/config/", "the key prefix to mirror")
	flag.DurationVar(&opts.duration, "duration", 0, "with --endpoint: stop after this long (0: run until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "etcdgateway:", err)
		os.Exit(1)
	}
}

// run mirrors the prefix: of an embedded etcd with scripted changes when opts.endpoint is
// empty, of a real gateway otherwise.
func run(ctx context.Context, out io.Writer, opts options) error {
	var mu sync.Mutex // one printer at a time
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	embedded := opts.endpoint == ""
	var client *clientv3.Client // the embedded run's writer; the mirror does not use it
	if embedded {
		dir, err := os.MkdirTemp("", "etcdgateway")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		ports, err := freePorts(2)
		if err != nil {
			return err
		}
		server, err := startEtcd(dir, ports[0], ports[1])
		if err != nil {
			return err
		}
		defer server.Close()
		opts.endpoint = "http://" + ports[0]
		say("started an embedded etcd at %s", ports[0])
		client, err = clientv3.New(clientv3.Config{Endpoints: []string{ports[0]}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer client.Close()
		for _, name := range []string{"invoices", "payments", "search"} {
			if _, err := client.Put(ctx, opts.prefix+name, sample[name]); err != nil {
				return err
			}
		}
	} else if opts.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.duration)
		defer cancel()
	}

	// The mirror: the gateway client and an informer over it. Values that do not decode
	// reach the informer's ErrorHandler: informer.New hands the client its error sink.
	report := func(err error) { say("! %v", err) }
	src, err := NewGatewayClient(opts.endpoint, opts.prefix, decoder(opts.prefix), GatewayOptions{})
	if err != nil {
		return err
	}
	inf, err := informer.New(src, informer.Options[string, *Config]{
		Name:         "configs",
		Key:          func(c *Config) (string, error) { return c.Name, nil },
		ErrorHandler: report,
	})
	if err != nil {
		return err
	}
	changes := make(chan struct{}, 64) // one per printed change, for the scripted run
	changed := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	reg, err := inf.AddHandler(informer.HandlerFuncs[*Config]{
		AddFunc: func(c *Config, initial bool) {
			if initial {
				say("  listed  %v", c)
				return
			}
			say("+ added   %v", c)
			changed()
		},
		UpdateFunc: func(old, new *Config) {
			say("~ updated %v (was %v)", new, old)
			changed()
		},
		DeleteFunc: func(c *Config, _ bool) {
			say("- deleted %v", c) // the last state, though the gateway sent the key alone
			changed()
		},
	}, informer.HandlerOptions{Name: "printer"})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	select {
	case <-reg.Synced():
	case <-ctx.Done():
		return fmt.Errorf("mirror did not sync: %w", ctx.Err())
	}
	say("synced %d configs", inf.Len())
	if !embedded {
		<-ctx.Done() // the handler prints changes until then
		return nil
	}

	// The scripted changes, each waited for so that the output comes in order.
	var rev string
	for _, step := range script {
		var ops []clientv3.Op
		for _, w := range step.writes {
			if w.doc == "" {
				ops = append(ops, clientv3.OpDelete(opts.prefix+w.name))
			} else {
				ops = append(ops, clientv3.OpPut(opts.prefix+w.name, w.doc))
			}
		}
		resp, err := client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return err
		}
		rev = fmt.Sprint(resp.Header.Revision)
		if err := inf.WaitForRevision(ctx, rev); err != nil {
			return err
		}
		for range step.changes {
			select {
			case <-changes:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	names := make([]string, 0, inf.Len())
	for _, c := range inf.All() {
		names = append(names, c.String())
	}
	slices.Sort(names)
	say("mirrored %d configs at revision %s: %s; %d value(s) did not decode",
		inf.Len(), rev, strings.Join(names, ", "), inf.Stats().DecodeErrors)
	return nil
}

// sample are the documents the embedded run starts with.
var sample = map[string]string{
	"payments": `{"team":"billing","replicas":3}`,
	"invoices": `{"team":"billing","replicas":2}`,
	"search":   `{"team":"discovery","replicas":4}`,
}

type write struct{ name, doc string } // an empty doc deletes

// script is what the embedded run changes while the mirror runs: each step is one etcd
// transaction, whose handler calls are waited for.
var script = []struct {
	writes  []write
	changes int
}{
	{[]write{{"payments", `{"team":"billing","replicas":5}`}, {"ledger", `{"team":"billing","replicas":1}`}}, 2},
	{[]write{{"search", ""}}, 1},
	{[]write{{"invoices", `{"team":"billing",`}}, 0}, // not JSON: reported, the cache keeps the last good value
	{[]write{{"invoices", `{"team":"billing","replicas":3}`}}, 1},
}

// freePorts returns n loopback addresses whose ports were free a moment ago.
func freePorts(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// startEtcd starts a single-member etcd with its data in dir, serving clients (and the
// JSON gateway) at clientAddr, with its logs discarded. The gateway forwards to the
// server's advertised client URL, so the address must be a real port, not ":0".
func startEtcd(dir, clientAddr, peerAddr string) (*embed.Etcd, error) {
	client, peer := url.URL{Scheme: "http", Host: clientAddr}, url.URL{Scheme: "http", Host: peerAddr}
	return etcdtest.Start(etcdtest.Config("", dir, client, peer), 0)
}
