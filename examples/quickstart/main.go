// Command quickstart shows the informer end to end on the in-memory source: an informer
// with two indexes mirrors a collection of services, a typed handler prints what changed,
// and queries by index read the cache after the writes are in. It exits by itself.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

// Service is the object the example mirrors.
type Service struct {
	Name, Team, Env string // Name is the key; Team and Env are indexed
	Replicas        int    // desired replica count
}

func main() {
	if err := run(); err != nil {
		log.Fatal("quickstart: ", err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel() // stops the informer too
	// The source: an in-memory, revisioned log (source/http, etcd, kubernetes plug in alike).
	src := memory.New(func(s *Service) string { return s.Name }, memory.Options{})
	src.Put(&Service{Name: "checkout", Team: "payments", Env: "prod", Replicas: 3})
	src.Put(&Service{Name: "search", Team: "discovery", Env: "prod", Replicas: 4})
	src.Put(&Service{Name: "search-canary", Team: "discovery", Env: "staging", Replicas: 1})
	inf, err := informer.New(src, informer.Options[string, *Service]{
		Name: "services",
		Key:  func(s *Service) (string, error) { return s.Name, nil },
		Indexers: informer.Indexers[*Service]{
			"team": informer.IndexBy(func(s *Service) (string, error) { return s.Team, nil }),
			"env":  informer.IndexBy(func(s *Service) (string, error) { return s.Env, nil }),
		},
	})
	if err != nil {
		return err
	}
	// A typed handler (no type assertion); lastSeen is closed when it has seen the last write.
	lastSeen := make(chan struct{})
	reg, err := inf.AddHandler(informer.HandlerFuncs[*Service]{
		AddFunc:    func(s *Service, initial bool) { fmt.Printf("  add    %-14s initial=%v\n", s.Name, initial) },
		UpdateFunc: func(old, new *Service) { fmt.Println("  update", new.Name, old.Replicas, "→", new.Replicas) },
		DeleteFunc: func(s *Service, _ bool) { fmt.Printf("  delete %s\n", s.Name); close(lastSeen) },
	}, informer.HandlerOptions{Name: "log"})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	fmt.Println("== initial list") // wait for the cache and the handler; the error says why not
	if err := informer.WaitForCacheSync(ctx, inf, reg); err != nil {
		return err
	}
	fmt.Println("== live changes")
	src.Put(&Service{Name: "checkout", Team: "payments", Env: "prod", Replicas: 5})
	src.Put(&Service{Name: "fraud", Team: "payments", Env: "staging", Replicas: 1})
	last, _ := src.Delete("search-canary")
	// Read-your-writes: wait until the cache holds the last write, then query by index.
	if err := inf.WaitForRevision(ctx, fmt.Sprint(last)); err != nil {
		return err
	}
	<-lastSeen // the handler runs on its own goroutine: let it print first
	payments, err := inf.ByIndex("team", "payments")
	for name, svc := range payments { // an iterator over the cache, in key order
		fmt.Printf("== team=payments: %s (%d replicas)\n", name, svc.Replicas)
	}
	return err // ErrUnknownIndex for an index of no such name
}
