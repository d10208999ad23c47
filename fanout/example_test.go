package fanout_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/fanout"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

type Config struct {
	Name  string `json:"name"`
	Value int    `json:"value"`
}

func configKey(c *Config) (string, error) { return c.Name, nil }

// The fan-out tier: one process watches the source and serves it; three others (here,
// three informers) mirror the server and agree with the source, then follow a change.
func Example() {
	var wg sync.WaitGroup
	start := func(ctx context.Context, inf *informer.Informer[string, *Config]) {
		wg.Add(1)
		go func() { defer wg.Done(); _ = inf.Run(ctx) }()
	}

	// The serving process: a source, an informer over it, a Server of the informer.
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "timeout", Value: 30})
	src.Put(&Config{Name: "retries", Value: 3})
	upstream, err := informer.New(src, informer.Options[string, *Config]{Key: configKey})
	if err != nil {
		panic(err)
	}
	upCtx, stopUpstream := context.WithCancel(context.Background())
	start(upCtx, upstream)
	srv, err := fanout.NewServer(upstream, fanout.ServerOptions[*Config]{})
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(srv) // in production: http.ListenAndServe(addr, srv)
	<-srv.Synced()

	// The mirrors: each an informer over a Client of the server.
	ctx, stopMirrors := context.WithCancel(context.Background())
	updated := make(chan *Config, 3)
	var mirrors []*informer.Informer[string, *Config]
	for range 3 {
		client, err := httpsource.NewClient(ts.URL, httpsource.ClientOptions[*Config]{})
		if err != nil {
			panic(err)
		}
		mirror, err := informer.New(client.Ordered(), informer.Options[string, *Config]{Key: configKey})
		if err != nil {
			panic(err)
		}
		_, _ = mirror.AddHandler(informer.HandlerFuncs[*Config]{
			UpdateFunc: func(_, c *Config) { updated <- c },
		}, informer.HandlerOptions{})
		start(ctx, mirror)
		_ = informer.WaitForCacheSync(ctx, mirror)
		mirrors = append(mirrors, mirror)
	}
	for i, m := range mirrors {
		fmt.Printf("mirror %d:", i+1)
		for _, c := range m.All() {
			fmt.Printf(" %s=%d", c.Name, c.Value)
		}
		fmt.Println()
	}

	src.Put(&Config{Name: "timeout", Value: 60})
	for range mirrors {
		c := <-updated
		fmt.Printf("a mirror saw %s=%d\n", c.Name, c.Value)
	}

	// Shut down: mirrors first, then the server (which ends open watches), then the source.
	stopMirrors()
	_ = srv.Shutdown(context.Background())
	ts.Close()
	stopUpstream()
	wg.Wait()
	// Output:
	// mirror 1: retries=3 timeout=30
	// mirror 2: retries=3 timeout=30
	// mirror 3: retries=3 timeout=30
	// a mirror saw timeout=60
	// a mirror saw timeout=60
	// a mirror saw timeout=60
}

// PassThrough serves a bare ListerWatcher: each request is one List or Watch call on it.
func ExampleNewPassThrough() {
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "a", Value: 1})
	src.Put(&Config{Name: "b", Value: 2})
	src.Put(&Config{Name: "c", Value: 3})
	h := fanout.NewPassThrough[*Config](src, fanout.PassThroughOptions[*Config]{})
	ts := httptest.NewServer(h)
	defer ts.Close()
	defer func() { _ = h.Shutdown(context.Background()) }()

	client, err := httpsource.NewClient(ts.URL, httpsource.ClientOptions[*Config]{})
	if err != nil {
		panic(err)
	}
	opts := informer.ListOptions{Limit: 2}
	for {
		page, err := client.List(context.Background(), opts)
		if err != nil {
			panic(err)
		}
		fmt.Printf("revision %s: %d items, more: %v\n", page.Revision, len(page.Items), page.Continue != "")
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	// Output:
	// revision 3: 2 items, more: true
	// revision 3: 1 items, more: false
}

// A Server set up to face clients it does not trust: the http.Server's own timeouts,
// ConnContext, TLS with optional client certificates (mTLS), and an AuthorizeClient hook
// that names each client, so that the per-client limits apply to it rather than to its
// address. Every limit keeps its documented default (see the README's table).
func ExampleServer_hardened() {
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	upstream, err := informer.New(src, informer.Options[string, *Config]{Key: configKey})
	if err != nil {
		panic(err)
	}
	tokens := map[string]string{"s3cr3t-token": "billing"} // bearer token → client name
	// AuthorizeClient names every client, so that the per-client limits
	// (MaxWatchersPerClient, MaxListsPerClient, paged-list snapshots) count clients,
	// not source addresses, which an attacker has many of (an IPv6 host has a /64).
	srv, err := fanout.NewServer(upstream, fanout.ServerOptions[*Config]{
		ServeOptions: fanout.ServeOptions{
			AuthorizeClient: func(r *http.Request) (string, error) {
				// A verified client certificate names the client…
				if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
					return "cert:" + r.TLS.VerifiedChains[0][0].Subject.CommonName, nil
				}
				// …else a bearer token. The error's text is logged, never sent: the
				// client reads "unauthorized", with a WWW-Authenticate: Bearer header.
				tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				name, known := tokens[tok]
				if !ok || !known {
					return "", fmt.Errorf("no known token from %s: %w", r.RemoteAddr, fanout.ErrUnauthorized)
				}
				return "token:" + name, nil
			},
		},
	})
	if err != nil {
		panic(err)
	}
	clientCAs := x509.NewCertPool() // the CA that signs client certificates
	hs := &http.Server{
		Addr:    ":8443",
		Handler: srv,
		// Without it, a client that sends its headers a byte at a time holds a
		// connection and a goroutine for as long as it likes.
		ReadHeaderTimeout: 10 * time.Second,
		// Keep-alive connections between requests.
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		// ReadTimeout and WriteTimeout may stay 0: the Server sets its own write deadline
		// before every write of a watch or a list (ServeOptions.WriteTimeout), which
		// replaces http.Server.WriteTimeout for them, so a long watch is not cut. Set them
		// for the other handlers of the server if it has any.
		//
		// ConnContext lets the Server cap each connection's send buffer and reset the
		// connection of a client that stalls, freeing its unsent data at once.
		ConnContext: fanout.ConnContext,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			ClientCAs:  clientCAs,
			// Certificates are checked when given; clients without one use a token.
			// tls.RequireAndVerifyClientCert makes mTLS mandatory.
			ClientAuth: tls.VerifyClientCertIfGiven,
		},
	}
	_ = hs // go hs.ListenAndServeTLS("server.crt", "server.key"); at the end,
	// srv.Shutdown(ctx) (which ends the watches) and then hs.Shutdown(ctx).
}

// A Server with a filter index serves each team its own objects: a mirror that asks for
// team=payments holds exactly the payments objects and follows only their changes.
func ExampleServer_filtered() {
	team := func(c *Config) (string, error) {
		t, _, _ := strings.Cut(c.Name, "/") // "payments/timeout" is on team payments
		return t, nil
	}
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "payments/timeout", Value: 30})
	src.Put(&Config{Name: "payments/retries", Value: 3})
	src.Put(&Config{Name: "search/timeout", Value: 10})
	upstream, err := informer.New(src, informer.Options[string, *Config]{
		Key:      configKey,
		Indexers: informer.Indexers[*Config]{"team": informer.IndexBy(team)},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := func(inf *informer.Informer[string, *Config]) {
		wg.Add(1)
		go func() { defer wg.Done(); _ = inf.Run(ctx) }()
	}
	start(upstream)
	srv, err := fanout.NewServer(upstream, fanout.ServerOptions[*Config]{
		Filters: []string{"team"}, // the informer's index, served as a filter
	})
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(srv)
	<-srv.Synced()

	client, err := httpsource.NewClient(ts.URL, httpsource.ClientOptions[*Config]{
		Filter: httpsource.Filter{Index: "team", Value: "payments"}, // ?index=team&value=payments
	})
	if err != nil {
		panic(err)
	}
	mirror, err := informer.New(client.Ordered(), informer.Options[string, *Config]{Key: configKey})
	if err != nil {
		panic(err)
	}
	deleted := make(chan *Config, 1)
	_, _ = mirror.AddHandler(informer.HandlerFuncs[*Config]{
		DeleteFunc: func(c *Config, _ bool) { deleted <- c },
	}, informer.HandlerOptions{})
	start(mirror)
	_ = informer.WaitForCacheSync(ctx, mirror)
	for _, c := range mirror.All() {
		fmt.Printf("%s=%d\n", c.Name, c.Value)
	}

	src.Delete("search/timeout") // not sent to the mirror
	src.Delete("payments/retries")
	fmt.Println("deleted:", (<-deleted).Name)

	cancel()
	_ = srv.Shutdown(context.Background())
	ts.Close()
	wg.Wait()
	// Output:
	// payments/retries=3
	// payments/timeout=30
	// deleted: payments/retries
}
