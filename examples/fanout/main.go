// Command fanout serves one informer's collection to many processes with a fanout.Server,
// and mirrors part of it in another informer through source/http's Client: the fan-out
// tier in one program, on a loopback port.
//
//	go run ./examples/fanout
//
// The upstream is an in-memory source of Config objects, each of a team. Its informer
// declares the index "team", and the Server serves that index as a filter
// (ServerOptions.Filters, which names the informer's index: the function is written
// once): a client that asks for ?index=team&value=payments holds exactly the payments
// objects and hears only of their changes. An object that moves into the team arrives as
// an add, one that leaves it as a delete. The program prints what the filtered mirror
// sees, then stops by itself.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/fanout"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// Config is a setting of one team, served as JSON.
type Config struct {
	// Name is the key.
	Name string `json:"name"`
	// Team is indexed, and served as a filter.
	Team string `json:"team"`
	// Value is the setting's value.
	Value int `json:"value"`
}

func key(c *Config) (string, error) { return c.Name, nil }

// team is the index function, of the informer and so of the Server's filter.
func team(c *Config) (string, error) { return c.Team, nil }

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var running sync.WaitGroup
	defer running.Wait()
	defer stop() // runs before running.Wait: the informers stop, then are waited for
	start := func(inf *informer.Informer[string, *Config]) {
		running.Add(1)
		go func() { defer running.Done(); _ = inf.Run(runCtx) }()
	}

	// The upstream: a source (here in memory; etcd, Kubernetes, PostgreSQL alike) and an
	// informer over it with the index "team".
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "timeout", Team: "payments", Value: 30})
	src.Put(&Config{Name: "retries", Team: "payments", Value: 3})
	src.Put(&Config{Name: "limit", Team: "search", Value: 100})
	src.Put(&Config{Name: "shards", Team: "search", Value: 8})
	upstream, err := informer.New(src, informer.Options[string, *Config]{
		Name:     "configs",
		Key:      key,
		Indexers: informer.Indexers[*Config]{"team": informer.IndexBy(team)},
	})
	if err != nil {
		return err
	}
	start(upstream)

	// The fan-out Server over the informer, serving its index "team" as a filter, on an
	// http.Server set up as the fanout package asks (ConnContext).
	srv, err := fanout.NewServer(upstream, fanout.ServerOptions[*Config]{Filters: []string{"team"}})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ConnContext: fanout.ConnContext, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	defer func() {
		// The informers stop first, so that the mirror does not see the Server go; then
		// the Server's Shutdown ends its watches, and the http.Server's its connections.
		stop()
		running.Wait()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		_ = hs.Shutdown(sctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "fanout: serving:", err)
		}
	}()

	// Another process, usually: a Client that asks for team payments only, and an
	// informer over it. The Server serves the upstream's revisions, so the mirror can
	// wait for the revision of a write made upstream (Ordered).
	client, err := httpsource.NewClient("http://"+ln.Addr().String(), httpsource.ClientOptions[*Config]{
		Filter: httpsource.Filter{Index: "team", Value: "payments"}, // ?index=team&value=payments
	})
	if err != nil {
		return err
	}
	mirror, err := informer.New(client.Ordered(), informer.Options[string, *Config]{Name: "payments", Key: key})
	if err != nil {
		return err
	}
	var mu sync.Mutex // the handler and run print in turn
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	last := make(chan struct{}) // closed when the mirror has seen the last change
	reg, err := mirror.AddHandler(informer.HandlerFuncs[*Config]{
		AddFunc: func(c *Config, initial bool) { say("add    %s=%d (initial %t)", c.Name, c.Value, initial) },
		UpdateFunc: func(old, c *Config) {
			say("update %s: %d -> %d", c.Name, old.Value, c.Value)
		},
		DeleteFunc: func(c *Config, _ bool) {
			say("delete %s", c.Name)
			if c.Name == "retries" {
				close(last)
			}
		},
	}, informer.HandlerOptions{Name: "printer"})
	if err != nil {
		return err
	}
	start(mirror)
	select {
	case <-reg.Synced():
	case <-ctx.Done():
		return fmt.Errorf("the mirror did not sync: %w", ctx.Err())
	}
	say("== synced: %d payments configs", mirror.Len())

	// Changes upstream. The mirror hears of the payments ones only: a config that moves
	// to payments arrives as an add (one that left it would go as a delete).
	src.Put(&Config{Name: "shards", Team: "search", Value: 16}) // not payments: not sent
	src.Put(&Config{Name: "timeout", Team: "payments", Value: 45})
	src.Put(&Config{Name: "limit", Team: "payments", Value: 100}) // moves to payments
	rev, _ := src.Delete("retries")

	// Read your writes: wait until the mirror has reached the last write's revision.
	if err := mirror.WaitForRevision(ctx, strconv.FormatInt(rev, 10)); err != nil {
		return fmt.Errorf("waiting for revision %d: %w", rev, err)
	}
	select {
	case <-last:
	case <-ctx.Done():
		return fmt.Errorf("the handler did not see the last change: %w", ctx.Err())
	}
	var names []string
	for name, c := range mirror.All() {
		names = append(names, fmt.Sprintf("%s=%d", name, c.Value))
	}
	say("== at revision %d: %s", rev, strings.Join(names, " "))
	st := srv.Stats()
	say("== the server: %d lists and %d watches served, %d open", st.Lists, st.Watches, st.OpenWatches)
	return nil
}
