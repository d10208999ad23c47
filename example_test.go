package informer_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

type Config struct {
	Name, Team string
	Version    int
}

// An informer over an in-memory source, with an index and a typed handler.
func ExampleNew() {
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "checkout", Team: "payments", Version: 1})
	src.Put(&Config{Name: "search", Team: "discovery", Version: 1})

	inf, err := informer.New(src, informer.Options[string, *Config]{
		Key: func(c *Config) (string, error) { return c.Name, nil },
		Indexers: informer.Indexers[*Config]{
			"team": informer.IndexBy(func(c *Config) (string, error) { return c.Team, nil }),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var mu sync.Mutex
	var log []string
	reg, _ := inf.AddHandler(informer.HandlerFuncs[*Config]{
		AddFunc: func(c *Config, initial bool) {
			mu.Lock()
			log = append(log, fmt.Sprintf("add %s (initial: %v)", c.Name, initial))
			mu.Unlock()
		},
	}, informer.HandlerOptions{})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	<-reg.Synced() // the handler has been called for the whole initial list

	payments, err := inf.ByIndex("team", "payments") // an iterator over the index's entries
	if err != nil {
		fmt.Println(err) // ErrUnknownIndex: no index of that name (payments then yields nothing)
	}
	for name, c := range payments {
		fmt.Println("team payments:", name, "version", c.Version)
	}
	cancel()
	<-done
	mu.Lock()
	fmt.Println(strings.Join(log, "\n"))
	mu.Unlock()
	// Output:
	// team payments: checkout version 1
	// add checkout (initial: true)
	// add search (initial: true)
}

// Read-your-writes: write to the source, wait for the write's revision, read the cache.
func ExampleInformer_WaitForRevision() {
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	inf, _ := informer.New(src, informer.Options[string, *Config]{
		Key: func(c *Config) (string, error) { return c.Name, nil },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()

	rev := src.Put(&Config{Name: "checkout", Version: 7})
	if err := inf.WaitForRevision(ctx, strconv.FormatInt(rev, 10)); err != nil {
		fmt.Println(err)
	}
	c, _ := inf.Get("checkout")
	fmt.Println("version", c.Version)
	cancel()
	<-done
	// Output: version 7
}

// A factory shares one informer per source among the parts of a program.
func ExampleFactory() {
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "checkout"})
	f := informer.NewFactory()
	defer f.Shutdown()
	build := func() (*informer.Informer[string, *Config], error) {
		return informer.New(src, informer.Options[string, *Config]{
			Key: func(c *Config) (string, error) { return c.Name, nil },
		})
	}
	a, _ := informer.InformerFor(f, "configs", build)
	b, _ := informer.InformerFor(f, "configs", build) // the same informer
	f.Start(context.Background())
	err := f.WaitForCacheSync(context.Background())
	fmt.Println(a == b, err, a.Len())
	// Output: true <nil> 1
}
