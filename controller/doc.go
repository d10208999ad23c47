// Package controller runs a reconcile loop over informers: handlers turn the informers'
// notifications into keys, a rate-limited workqueue.Queue merges and orders them, and a
// pool of workers calls a Reconciler for each key until it succeeds. It is
// controller-runtime's controller rebuilt on Go generics, without Kubernetes; the nearest
// standard shape is a worker pool fed by a channel that merges duplicates and retries
// failures.
//
//	c, err := controller.New(controller.ReconcilerFunc[string](reconcile), controller.Options[string]{
//		Name:                    "configs",
//		MaxConcurrentReconciles: 4,
//	})
//	if err != nil { ... }
//	// Reconcile every config under its own key, and its team when one of its members changes.
//	controller.For(c, configs, func(cfg *Config) (string, error) { return cfg.Name, nil })
//	controller.Watches(c, members, func(m *Member) []string { return configsOfTeam(m.Team) })
//	go configs.Run(ctx)
//	go members.Run(ctx)
//	err = c.Start(ctx) // blocks until ctx is done, then drains
//
// # The contract
//
// What a Reconciler may assume:
//
//   - It is given a key, not an event. Reconcile is level-triggered: it reads the current
//     state (from the informer's cache, say) and makes the world match it. Any number of
//     notifications for a key that arrive before its reconcile starts merge into one call.
//   - A key is never reconciled by two workers at once. A notification that arrives while
//     its key is being reconciled makes the key reconciled once more after the call
//     returns, so the last change to an object is always followed by a reconcile.
//   - Workers start only once every informer the controller watches has synced and the
//     controller's handler on each of them has been given the initial list, so the first
//     reconciles see a full cache.
//   - Different keys are reconciled concurrently, by up to
//     Options.MaxConcurrentReconciles workers, in no guaranteed order.
//
// What the controller does with a result, as controller-runtime does:
//
//	error (not terminal)      AddRateLimited: retried after the rate limiter's backoff; a
//	                          non-zero Result alongside is ignored and a warning logged
//	TerminalError(err)        Forget: not retried; counted as a terminal error
//	panic                     recovered, logged with its stack, counted, then as an error
//	Result{RequeueAfter: d}   Forget, then AddAfter(d): reconciled again after d
//	Result{Requeue: true}     AddRateLimited
//	Result{}, nil             Forget: done until the next notification
//
// A reconcile is repeated periodically in one of two ways: for every object, by giving the
// informer a resync period (informer.Options.ResyncPeriod, controller-runtime's
// SyncPeriod), which re-delivers every cached object as an update and so re-queues its
// keys; or per object, by returning Result{RequeueAfter: d}.
//
// # Starting and stopping
//
// Start registers the controller's handlers, waits for the informers to sync (at most
// Options.CacheSyncTimeout, after which it fails with a *CacheSyncError naming the
// informers that did not), starts the workers and blocks until its context is done. Then
// it shuts down gracefully: it stops taking notifications, lets the reconciles in flight and
// the keys already queued finish (their context is not cancelled yet), and after at most
// Options.ShutdownTimeout — or when the context given to Shutdown ends — cancels the
// reconciles' context, drops the keys still queued, and returns once every worker has
// returned. Retries and requeues asked for during the drain are dropped: a controller
// started again lists everything anew.
//
// # Costs
//
// A notification costs a predicate check and a queue Add (one mutex, no allocation for
// For; the mapping function's slice for Watches). Each worker is one goroutine; the queue runs
// one more while keys wait for a delay. With no Options.Metrics the controller does not
// read the clock around reconciles.
package controller
