// Command configmirror mirrors JSON config documents stored in etcd into typed Go structs,
// kept fresh by an informer over source/etcd and indexed by team and environment. It
// prints each change as it arrives and answers a query by index from the local cache.
//
// With no flags it starts an embedded etcd server (in a temporary directory, on loopback
// ports), writes a few config documents, mirrors them, changes them while the mirror
// runs, and exits by itself within a few seconds:
//
//	go run ./examples/configmirror
//
// With --endpoints it mirrors a real cluster instead, until --duration has passed or it
// is interrupted:
//
//	go run ./examples/configmirror --endpoints 127.0.0.1:2379 --prefix /config/ --team billing
//
// With --state-dir the mirror keeps its cache in a snapshot file there (package persist)
// and restarts warm: it loads the file and resumes the watch from the saved revision
// instead of listing. The embedded run then also stops its mirror after the script,
// changes etcd while it is down, and starts a second mirror that restores the cache and
// hears only those changes; against a real cluster, run it twice:
//
//	go run ./examples/configmirror --state-dir /tmp/configmirror
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/etcd"
	"github.com/informer-go/informer/source/etcd/etcdtest"
)

// Config is one service's configuration, stored as JSON under <prefix><name>.
type Config struct {
	Name     string   `json:"-"`                  // the key's suffix after the prefix, not stored
	Team     string   `json:"team"`               // owning team (indexed)
	Env      string   `json:"env"`                // environment, e.g. prod (indexed)
	Replicas int      `json:"replicas"`           // desired replica count
	Features []string `json:"features,omitempty"` // feature flags turned on
}

// String formats c on one line, as the example prints it.
func (c *Config) String() string {
	s := fmt.Sprintf("%s team=%s env=%s replicas=%d", c.Name, c.Team, c.Env, c.Replicas)
	if len(c.Features) > 0 {
		s += " features=" + strings.Join(c.Features, ",")
	}
	return s
}

// options are the command-line flags.
type options struct {
	endpoints []string // empty: start an embedded etcd
	prefix    string
	team      string // the team the index query asks for
	duration  time.Duration
	username  string
	password  string
	stateDir  string // non-empty: persist the cache there and restart warm
}

func main() {
	var opts options
	endpoints := flag.String("endpoints", "", "comma-separated etcd endpoints to mirror; empty starts an embedded etcd with sample data")
	flag.StringVar(&opts.prefix, "prefix", "/config/", "the key prefix to mirror")
	flag.StringVar(&opts.team, "team", "billing", "the team whose configs the index query lists")
	flag.DurationVar(&opts.duration, "duration", 0, "with --endpoints: stop after this long (0: run until interrupted)")
	flag.StringVar(&opts.username, "user", "", "with --endpoints: etcd user name")
	flag.StringVar(&opts.password, "password", "", "with --endpoints: etcd password")
	flag.StringVar(&opts.stateDir, "state-dir", "", "keep the cache in this directory and restart warm from it (no list)")
	flag.Parse()
	if *endpoints != "" {
		opts.endpoints = strings.Split(*endpoints, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "configmirror:", err)
		os.Exit(1)
	}
}

// run mirrors the prefix: of an embedded etcd with scripted changes when opts.endpoints is
// empty, of a real cluster otherwise.
func run(ctx context.Context, out io.Writer, opts options) error {
	var mu sync.Mutex // one printer at a time
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}

	embedded := len(opts.endpoints) == 0
	var cfg clientv3.Config
	if embedded {
		dir, err := os.MkdirTemp("", "configmirror")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		server, err := startEtcd(dir)
		if err != nil {
			return err
		}
		defer server.Close()
		say("started an embedded etcd at %s", server.Clients[0].Addr())
		cfg = clientv3.Config{Endpoints: []string{server.Clients[0].Addr().String()}}
	} else {
		cfg = clientv3.Config{Endpoints: opts.endpoints, Username: opts.username, Password: opts.password}
		if opts.duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, opts.duration)
			defer cancel()
		}
	}
	cfg.DialTimeout = 5 * time.Second
	cfg.Logger = zap.NewNop()
	client, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer client.Close()

	if embedded {
		for name, doc := range sampleConfigs {
			if _, err := client.Put(ctx, opts.prefix+name, doc); err != nil {
				return err
			}
		}
	}

	// The mirror: an etcd source decoding JSON into *Config, an informer indexing by team
	// and environment, and a handler that prints every change.
	report := func(err error) { say("! %v", err) }
	decode := func(key, value []byte) (*Config, error) {
		c := &Config{Name: strings.TrimPrefix(string(key), opts.prefix)}
		if value == nil { // a delete whose last value etcd has compacted: the name will do
			return c, nil
		}
		if err := json.Unmarshal(value, c); err != nil {
			return nil, err
		}
		return c, nil
	}
	// Values that do not decode reach the informer's ErrorHandler and Stats.DecodeErrors:
	// informer.New hands the source its error sink.
	src, err := etcd.New(client, opts.prefix, decode, etcd.Options{})
	if err != nil {
		return err
	}
	var store informer.Persister[string, *Config]
	if opts.stateDir != "" {
		f, err := persist.New[string, *Config](opts.stateDir, persist.Options[*Config]{Schema: "configmirror-1", Codec: configCodec})
		if err != nil {
			return err
		}
		store = f
	}
	changes := make(chan struct{}, 64) // one per printed change, for the scripted run
	changed := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	// mirror starts an informer over the prefix with a printing handler; stop stops it
	// (and saves its cache, with --state-dir).
	mirror := func() (inf *informer.Informer[string, *Config], reg *informer.Registration, stop func(), err error) {
		inf, err = informer.New(src, informer.Options[string, *Config]{
			Name: "configs",
			Key:  func(c *Config) (string, error) { return c.Name, nil },
			Indexers: informer.Indexers[*Config]{
				"team": informer.IndexBy(func(c *Config) (string, error) { return c.Team, nil }),
				"env":  informer.IndexBy(func(c *Config) (string, error) { return c.Env, nil }),
			},
			ErrorHandler: report,
			Persist:      store,
			Logger:       slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return nil, nil, nil, err
		}
		reg, err = inf.AddHandler(informer.HandlerFuncs[*Config]{
			AddFunc: func(c *Config, initial bool) {
				switch {
				case initial && inf.Stats().Restored:
					say("  restored %v", c)
				case initial:
					say("  listed  %v", c)
				default:
					say("+ added   %v", c)
					changed()
				}
			},
			UpdateFunc: func(old, new *Config) {
				say("~ updated %v (was %v)", new, old)
				changed()
			},
			DeleteFunc: func(c *Config, finalStateUnknown bool) {
				if finalStateUnknown {
					say("- deleted %s (while disconnected; last known %v)", c.Name, c)
				} else {
					say("- deleted %s", c.Name)
				}
				changed()
			},
		}, informer.HandlerOptions{Name: "printer"})
		if err != nil {
			return nil, nil, nil, err
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = inf.Run(runCtx) }()
		var once sync.Once
		stop = func() { once.Do(func() { cancel(); <-done }) }
		return inf, reg, stop, nil
	}
	inf, reg, stopMirror, err := mirror()
	if err != nil {
		return err
	}
	defer func() { stopMirror() }()

	select {
	case <-reg.Synced(): // the handler has printed the initial list
	case <-ctx.Done():
		return fmt.Errorf("mirror did not sync: %w", ctx.Err())
	}
	// (Not inf.Stats().ReceivedRevision: the informer records it once it has handed the list on,
	// which may be just after the handler has been given it.)
	if inf.Stats().Restored {
		say("restored %d configs: resuming the watch, no list", inf.Len())
	} else {
		say("synced %d configs", inf.Len())
	}
	query := func() error {
		configs, err := inf.ByIndex("team", opts.team)
		if err != nil {
			return err
		}
		var names []string
		for _, c := range configs {
			names = append(names, fmt.Sprintf("%s(%d)", c.Name, c.Replicas))
		}
		slices.Sort(names)
		say("? team %s: %s", opts.team, strings.Join(names, " "))
		return nil
	}
	if err := query(); err != nil {
		return err
	}

	if !embedded {
		<-ctx.Done() // the handler prints changes until then
		return query()
	}

	// The scripted changes: each is written to etcd, then waited for, so that the output
	// comes in order.
	// write puts doc under name, or deletes name if doc is empty, and returns the revision.
	write := func(name, doc string) (int64, error) {
		if doc == "" {
			d, err := client.Delete(ctx, opts.prefix+name)
			if err != nil {
				return 0, err
			}
			return d.Header.Revision, nil
		}
		p, err := client.Put(ctx, opts.prefix+name, doc)
		if err != nil {
			return 0, err
		}
		return p.Header.Revision, nil
	}
	// heard waits for the handler to report one change.
	heard := func() error {
		select {
		case <-changes:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var last string // the revision of the last write, which the cache has reached
	for _, step := range script {
		rev, err := write(step.name, step.doc)
		if err != nil {
			return err
		}
		// Read your own write: once the informer has reached the write's revision, the
		// cache holds it.
		last = etcd.FormatRevision(rev)
		if err := inf.WaitForRevision(ctx, last); err != nil {
			return err
		}
		if step.broken {
			continue // reported, not a change
		}
		if err := heard(); err != nil {
			return err
		}
	}
	if err := query(); err != nil {
		return err
	}
	say("mirrored %d configs at revision %s; %d document(s) did not decode", inf.Len(), last, inf.Stats().DecodeErrors)
	if opts.stateDir == "" {
		return nil
	}

	// A warm restart: stop the mirror (it saves its cache), change etcd while it is down,
	// start a new mirror from the saved cache: it restores the configs and hears only the
	// changes, from a watch resumed at the saved revision.
	stopMirror()
	say("stopped the mirror; its cache is saved in %s", opts.stateDir)
	var rev int64
	for _, step := range whileDown {
		if rev, err = write(step.name, step.doc); err != nil {
			return err
		}
	}
	inf, reg, stopMirror, err = mirror()
	if err != nil {
		return err
	}
	select {
	case <-reg.Synced():
	case <-ctx.Done():
		return fmt.Errorf("mirror did not sync: %w", ctx.Err())
	}
	if inf.Stats().Restored {
		say("restarted warm: %d configs restored, resuming the watch", inf.Len())
	}
	if err := inf.WaitForRevision(ctx, etcd.FormatRevision(rev)); err != nil {
		return err
	}
	for range whileDown {
		if err := heard(); err != nil {
			return err
		}
	}
	if err := query(); err != nil {
		return err
	}
	say("mirrored %d configs at revision %d after %d list(s)", inf.Len(), rev, inf.Stats().Lists)
	return nil
}

// whileDown is what the embedded run with --state-dir changes while its mirror is down.
var whileDown = []struct{ name, doc string }{
	{name: "search", doc: `{"team":"discovery","env":"prod","replicas":6}`},
	{name: "ledger"},
	{name: "checkout", doc: `{"team":"billing","env":"prod","replicas":2}`},
}

// configCodec persists a Config with its name, which its JSON leaves out.
var configCodec = persist.CodecFuncs[*Config]{
	CodecName: "configmirror-json",
	EncodeFunc: func(c *Config) ([]byte, error) {
		return json.Marshal(struct {
			Name string `json:"name"`
			*Config
		}{c.Name, c})
	},
	DecodeFunc: func(data []byte) (*Config, error) {
		var v struct {
			Name string `json:"name"`
			Config
		}
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, err
		}
		v.Config.Name = v.Name
		return &v.Config, nil
	},
}

// sampleConfigs are written to the embedded etcd before the mirror starts.
var sampleConfigs = map[string]string{
	"payments":      `{"team":"billing","env":"prod","replicas":3,"features":["3ds"]}`,
	"invoices":      `{"team":"billing","env":"prod","replicas":2}`,
	"search":        `{"team":"discovery","env":"prod","replicas":4}`,
	"search-canary": `{"team":"discovery","env":"staging","replicas":1}`,
}

// script is what the embedded run changes while the mirror runs; an empty doc deletes.
var script = []struct {
	name, doc string
	broken    bool
}{
	{name: "payments", doc: `{"team":"billing","env":"prod","replicas":5,"features":["3ds","wallets"]}`},
	{name: "ledger", doc: `{"team":"billing","env":"staging","replicas":1}`},
	{name: "search-canary"},
	{name: "typo", doc: `{"team":"billing",`, broken: true},
	{name: "invoices", doc: `{"team":"billing","env":"prod","replicas":3}`},
}

// startEtcd starts a single-member etcd on loopback ports chosen by the kernel, with its
// data in dir and its logs discarded.
func startEtcd(dir string) (*embed.Etcd, error) {
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	return etcdtest.Start(etcdtest.Config("", dir, local, local), 0)
}
