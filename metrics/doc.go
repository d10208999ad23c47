// Package metrics exports the metrics of informers, work queues and controllers to
// Prometheus, through github.com/prometheus/client_golang. Each informer, queue or
// controller registers its own series on a prometheus.Registerer the caller supplies, and
// they are removed when it stops, so a program that starts and stops informers leaves no
// series behind (client-go stopped exporting reflector metrics because short-lived
// reflectors leaked series, kubernetes#73587). Unregister removes them earlier.
//
//	reg := prometheus.NewRegistry()
//	_, err := metrics.RegisterInformer(reg, inf)      // informer_* series, name=inf.Name(),
//	if err != nil { ... }                             // and its handlers' series
//	cm, err := metrics.RegisterController(reg, "apps") // controller_runtime_* and workqueue_*
//	if err != nil { ... }
//	c, err := controller.New(r, controller.Options[string]{
//		Name: "apps", Metrics: cm, QueueMetrics: cm.Queue(),
//	})
//
// # Costs
//
// Informer and handler series cost nothing on the informer's path: the informer keeps its
// counters and histograms (informer.Stats, informer.HandlerStats) whether or not anything
// reads them, and the collector RegisterInformer returns reads them only when the registry
// is gathered. The one exception is opt-in: a handler added with
// informer.HandlerOptions.MeasureLatency reads the clock once per call to time its
// notifications' wait.
// Queue and controller series are prometheus.Counter, Gauge and Histogram values that the
// queue and the controller update as they go (an atomic add, or a few for a histogram),
// through the hook interfaces workqueue.MetricsProvider and controller.MetricsProvider;
// a queue or controller configured without a provider does not call them, nor read the
// clock for them.
//
// # Series
//
// Informers, labelled name (the informer's name):
//
//	informer_lists_total                   counter  lists started, streaming lists included
//	informer_list_errors_total             counter  lists that failed
//	informer_relists_total                 counter  lists whose result replaced the cache's content
//	informer_watches_total                 counter  watches opened
//	informer_watch_errors_total            counter  watches that failed
//	informer_expirations_total             counter  revisions found expired
//	informer_watch_events_total{type}      counter  watch events received: added, modified, deleted, bookmark
//	informer_list_duration_seconds         histogram  duration of each list, failed and streaming ones included
//	informer_list_items                    histogram  objects per successful list
//	informer_watch_duration_seconds        histogram  how long each watch stayed open
//	informer_applied_total                 counter  changes applied to the cache (listed objects, resyncs included)
//	informer_duplicates_total              counter  objects sent again for a cached key: a key twice in a list, an ADDED of a cached key
//	informer_errors_total{kind}            counter  errors reported: key, index, transform, decode,
//	                                                source, handler_panic, other
//	informer_store_objects                 gauge    objects in the cache
//	informer_synced                        gauge    1 once the initial list is in the cache
//	informer_last_sync_revision            gauge    last revision received, when it is a decimal
//	                                                integer (its 15 least significant digits)
//
// Every handler of the informer at the time of a gather, labelled name and handler (its
// HandlerOptions.Name, or the name the informer gave it; a second handler of the same name
// is labelled name#2):
//
//	informer_handler_queue_depth           gauge    notifications waiting, the one in progress included
//	informer_handler_delivered_total       counter  handler calls made
//	informer_handler_coalesced_total       counter  notifications merged into newer ones (Coalesce policy)
//	informer_handler_blocked_total         counter  times the informer waited for room (Block policy)
//	informer_handler_panics_total          counter  handler calls that panicked
//	informer_handler_synced                gauge    1 once the handler has been given the initial state
//	informer_handler_delivery_latency_seconds histogram  time notifications waited in the handler's
//	                                                queue (handlers with MeasureLatency only)
//
// Work queues, labelled name, with the names and buckets client-go and controller-runtime
// use, so existing dashboards work unchanged:
//
//	workqueue_depth                              gauge      items waiting for Get
//	workqueue_adds_total                         counter    adds that queued an item
//	workqueue_queue_duration_seconds             histogram  time from add to Get
//	workqueue_work_duration_seconds              histogram  time from Get to Done
//	workqueue_unfinished_work_seconds            gauge      time spent so far by the items being processed
//	workqueue_longest_running_processor_seconds  gauge      age of the oldest item being processed
//	workqueue_retries_total                      counter    rate-limited adds
//
// Controllers, labelled controller, with controller-runtime's names:
//
//	controller_runtime_reconcile_total{result}          counter    reconciles by outcome: success, error,
//	                                                               requeue, requeue_after, terminal
//	controller_runtime_reconcile_errors_total           counter    reconciles that returned an error or panicked
//	controller_runtime_terminal_reconcile_errors_total  counter    reconciles that returned a terminal error
//	controller_runtime_reconcile_panics_total           counter    reconciles that panicked
//	controller_runtime_reconcile_time_seconds           histogram  duration of Reconcile calls
//	controller_runtime_active_workers                   gauge      workers running a Reconcile
//	controller_runtime_max_concurrent_reconciles        gauge      the controller's worker count
//
// # Names and lifetimes
//
// The name label tells instances apart, so two informers (or two queues, or two
// controllers) registered at once on the same registry must have different names: the
// second registration fails with a prometheus.AlreadyRegisteredError. An informer's series
// are removed when its Run returns (its Done channel closes); a handler's
// series go when the handler is removed from the informer. Once the series are removed
// the name is free again, and the InformerMetrics of the registration no longer holds
// the informer: a program that keeps it does not keep a stopped informer's cache.
// Unregister removes them at once; it does not stop anything. Values recorded after the
// removal are dropped.
package metrics
