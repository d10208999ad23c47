package fanout_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/fanout"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// A Server with a filter index serves each team its own objects: a mirror that asks for
// team=payments holds exactly the payments objects and follows only their changes.
func ExampleServer_filtered() {
	team := func(c *Config) ([]string, error) {
		t, _, _ := strings.Cut(c.Name, "/") // "payments/timeout" is on team payments
		return []string{t}, nil
	}
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "payments/timeout", Value: 30})
	src.Put(&Config{Name: "payments/retries", Value: 3})
	src.Put(&Config{Name: "search/timeout", Value: 10})
	upstream, err := informer.New(src, informer.Options[string, *Config]{Key: configKey})
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
		Filters: map[string]informer.IndexFunc[*Config]{"team": team},
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
