package metrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/controller"
	"github.com/informer-go/informer/metrics"
	"github.com/informer-go/informer/source/memory"
	"github.com/informer-go/informer/workqueue"
)

// Service is the object the examples mirror.
type Service struct {
	Name string
	Team string
}

func serviceName(s *Service) string { return s.Name }

// servicesInformer returns an informer, named services, over a source/memory source that
// holds two services: checkout and search.
func servicesInformer() *informer.Informer[string, *Service] {
	src := memory.New(serviceName, memory.Options{})
	src.Put(&Service{Name: "checkout", Team: "payments"})
	src.Put(&Service{Name: "search", Team: "discovery"})
	inf, err := informer.New(src, informer.Options[string, *Service]{
		Name: "services",
		Key:  func(s *Service) (string, error) { return s.Name, nil },
	})
	if err != nil {
		panic(err)
	}
	return inf
}

// printSeries prints the series of the named families gathered from g, one a line; a
// server would export the same with promhttp.HandlerFor(g, promhttp.HandlerOpts{}).
func printSeries(g prometheus.Gatherer, names ...string) {
	mfs, err := g.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range names {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				fmt.Printf("%s{%s} %g\n", name, strings.Join(labels, ","), v)
			}
		}
	}
}

// An informer's series are read from its counters when the registry is gathered; a
// handler's series are added with AddHandler. Unregister removes all of them once the
// informer has stopped.
func ExampleRegisterInformer() {
	inf := servicesInformer() // two services: checkout and search

	reg := prometheus.NewRegistry()
	im, err := metrics.RegisterInformer(reg, inf)
	if err != nil {
		panic(err)
	}
	// Every handler of the informer gets series of its own, labelled with its name.
	h, err := inf.AddHandler(informer.HandlerFuncs[*Service]{}, informer.HandlerOptions{Name: "log"})
	if err != nil {
		panic(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	<-h.Synced() // the handler has been given the initial list

	printSeries(reg, "informer_relists_total", "informer_store_objects", "informer_last_sync_revision",
		"informer_handler_delivered_total")
	stop()
	<-done
	// The informer's series went away with it.
	printSeries(reg, "informer_store_objects")
	fmt.Println("stopped; unregistered already:", !im.Unregister())
	// Output:
	// informer_relists_total{name="services"} 1
	// informer_store_objects{name="services"} 2
	// informer_last_sync_revision{name="services"} 2
	// informer_handler_delivered_total{handler="log",name="services"} 2
	// stopped; unregistered already: true
}

// A queue's provider is set as its Config.Metrics; the queue updates the series as it
// goes.
func ExampleRegisterQueue() {
	reg := prometheus.NewRegistry()
	qm, err := metrics.RegisterQueue(reg, "jobs")
	if err != nil {
		panic(err)
	}
	q := workqueue.New(workqueue.Options[string]{Name: "jobs", Metrics: qm})
	q.Add("a")
	q.Add("b")
	q.Add("a") // merged with the queued "a": not an add
	item, _ := q.Get()
	q.Done(item)

	printSeries(reg, "workqueue_adds_total", "workqueue_depth")
	q.ShutDown()
	qm.Unregister()
	// Output:
	// workqueue_adds_total{name="jobs"} 2
	// workqueue_depth{name="jobs"} 1
}

// A controller's providers are set as its Options.Metrics and Options.QueueMetrics; one
// Unregister removes the controller's and its queue's series once Start has returned.
func ExampleRegisterController() {
	inf := servicesInformer() // two services: checkout and search

	reg := prometheus.NewRegistry()
	cm, err := metrics.RegisterController(reg, "services")
	if err != nil {
		panic(err)
	}
	reconciled := make(chan string, 2)
	c, err := controller.New(controller.ReconcilerFunc[string](func(_ context.Context, name string) (controller.Result, error) {
		reconciled <- name
		return controller.Result{}, nil
	}), controller.Options[string]{
		Name: "services", Metrics: cm, QueueMetrics: cm.Queue(),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	if err := controller.For(c, inf, func(s *Service) (string, error) { return s.Name, nil }); err != nil {
		panic(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	infDone, ctlDone := make(chan error), make(chan error)
	go func() { infDone <- inf.Run(ctx) }()
	go func() { ctlDone <- c.Start(ctx) }()
	<-reconciled
	<-reconciled
	stop()
	<-ctlDone // the controller's series are gone with it
	<-infDone

	printSeries(reg, "controller_runtime_reconcile_total", "workqueue_adds_total")
	fmt.Println("stopped; unregistered already:", !cm.Unregister())
	// Output:
	// stopped; unregistered already: true
}
