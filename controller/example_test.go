package controller_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/controller"
	"github.com/informer-go/informer/source/memory"
)

// Config is the object the examples reconcile.
type Config struct {
	Name     string
	Replicas int
}

// A controller for one informer: each config is reconciled under its own name, after the
// initial list and after every change. The reconciler reads the current state from the
// informer's cache; a missing object means it was deleted.
func Example() {
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "api", Replicas: 2})
	src.Put(&Config{Name: "web", Replicas: 3})

	quiet := slog.New(slog.DiscardHandler)
	key := func(c *Config) (string, error) { return c.Name, nil }
	configs, err := informer.New(src, informer.Options[string, *Config]{Name: "configs", Key: key, Logger: quiet})
	if err != nil {
		panic(err)
	}

	reconciled := make(chan struct{})
	c, err := controller.New(controller.ReconcilerFunc[string](func(ctx context.Context, name string) (controller.Result, error) {
		if cfg, ok := configs.Get(name); ok {
			fmt.Printf("%s: scale to %d\n", name, cfg.Replicas)
		} else {
			fmt.Printf("%s: deleted, clean up\n", name)
		}
		reconciled <- struct{}{}
		return controller.Result{}, nil
	}), controller.Options[string]{Name: "configs", Logger: quiet})
	if err != nil {
		panic(err)
	}
	if err := controller.For(c, configs, key); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- configs.Run(ctx) }()
	go func() { done <- c.Start(ctx) }()

	<-reconciled // the initial list: api, then web
	<-reconciled
	src.Put(&Config{Name: "web", Replicas: 5})
	<-reconciled
	src.Delete("api")
	<-reconciled

	cancel()
	<-done
	<-done
	// Output:
	// api: scale to 2
	// web: scale to 3
	// web: scale to 5
	// api: deleted, clean up
}

// Job is run as part of a pipeline.
type Job struct {
	Name     string
	Pipeline string
}

// Watches maps an object to the keys of other objects: here every change to a job
// reconciles its pipeline, and a job that moves reconciles both pipelines. Notifications
// that arrive before the workers start are merged per key.
func ExampleWatches() {
	src := memory.New(func(j *Job) string { return j.Name }, memory.Options{})
	src.Put(&Job{Name: "build", Pipeline: "release"})
	src.Put(&Job{Name: "test", Pipeline: "release"})
	src.Put(&Job{Name: "lint", Pipeline: "nightly"})

	quiet := slog.New(slog.DiscardHandler)
	jobs, err := informer.New(src, informer.Options[string, *Job]{
		Name:   "jobs",
		Key:    func(j *Job) (string, error) { return j.Name, nil },
		Logger: quiet,
		Indexers: informer.Indexers[*Job]{
			"pipeline": informer.IndexBy(func(j *Job) (string, error) { return j.Pipeline, nil }),
		},
	})
	if err != nil {
		panic(err)
	}

	reconciled := make(chan struct{})
	c, err := controller.New(controller.ReconcilerFunc[string](func(ctx context.Context, pipeline string) (controller.Result, error) {
		members, err := jobs.ByIndex("pipeline", pipeline)
		if err != nil {
			return controller.Result{}, err
		}
		n := 0
		for range members {
			n++
		}
		fmt.Printf("pipeline %s: %d jobs\n", pipeline, n)
		reconciled <- struct{}{}
		return controller.Result{}, nil
	}), controller.Options[string]{Name: "pipelines", Logger: quiet})
	if err != nil {
		panic(err)
	}
	pipelineOf := func(j *Job) []string { return []string{j.Pipeline} }
	if err := controller.Watches(c, jobs, pipelineOf); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- jobs.Run(ctx) }()
	go func() { done <- c.Start(ctx) }()

	<-reconciled // release (two jobs, one reconcile) and nightly
	<-reconciled
	src.Put(&Job{Name: "build", Pipeline: "hotfix"}) // moves: the old pipeline, then the new
	<-reconciled
	<-reconciled

	cancel()
	<-done
	<-done
	// Output:
	// pipeline release: 2 jobs
	// pipeline nightly: 1 jobs
	// pipeline release: 1 jobs
	// pipeline hotfix: 1 jobs
}
