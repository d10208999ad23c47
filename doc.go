// Package informer keeps a local, indexed, always-fresh copy of a remote collection and
// tells typed handlers what changed. It is client-go's informer pipeline rebuilt on Go
// generics and free of Kubernetes: any source that can list and then stream changes (an
// etcd prefix, an HTTP list+watch API, a Kubernetes resource, an in-memory log) plugs in as
// a ListerWatcher[V].
//
// # The pipeline
//
//	source ──List/Watch──▶ reflector ──▶ delta queue ──batch──▶ cache (indexed, snapshots)
//	                                                              │
//	                                                              ▼
//	                                             one queue + goroutine per Handler
//
// The reflector lists the source page by page at one revision, then watches from that
// revision, reconnecting with randomised timeouts and a jittered backoff; an expired
// revision leads to a fresh, consistent list. The delta queue groups changes per key; the
// informer pops it in batches, applies each batch to the cache under one write, and only
// then hands the batch's notifications to the handlers. Readers read immutable snapshots
// and never block the writer; while they keep reading, the writer makes each batch's
// snapshot as it publishes the batch, and a read takes no lock. Nor do readers starve it
// of a core: while changes are queued, each read of an Informer first yields the
// processor once (runtime.Gosched), so goroutines reading in a tight loop let the
// pipeline's goroutines run between reads (a Snapshot's methods do not yield).
//
//	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
//	inf, err := informer.New(src, informer.Options[string, *Config]{
//		Key: func(c *Config) (string, error) { return c.Name, nil },
//		Indexers: informer.Indexers[*Config]{
//			"team": informer.IndexBy(func(c *Config) (string, error) { return c.Team, nil }),
//		},
//	})
//	if err != nil { ... }
//	inf.AddHandler(informer.HandlerFuncs[*Config]{
//		AddFunc:    func(c *Config, initial bool) { fmt.Println("add", c.Name) },
//		UpdateFunc: func(old, new *Config) { fmt.Println("update", new.Name) },
//		DeleteFunc: func(c *Config, unknown bool) { fmt.Println("delete", c.Name) },
//	}, informer.HandlerOptions{})
//	go inf.Run(ctx)
//	if err := informer.WaitForCacheSync(ctx, inf); err != nil { ... } // says why
//	payments, err := inf.ByIndex("team", "payments") // err: no such index
//	for name, c := range payments { ... }            // in key order
//
// # The contract
//
// What a handler may assume:
//
//   - Per key, notifications come in the order the changes happened, and each handler's
//     calls are made one at a time from its own goroutine. There is no order between
//     different keys beyond "in the order their changes reached the informer, per batch";
//     do not rely on one.
//   - Each key goes through a valid life cycle: OnAdd, then any number of OnUpdate, then
//     OnDelete, then perhaps OnAdd again. A handler never sees an update or a delete for a
//     key it was not told was added, nor two adds without a delete between them.
//   - The informer is eventually consistent, level- not edge-triggered: a handler may not
//     see every intermediate state of an object (states that come and go while the informer
//     is disconnected, or while a Coalesce-policy handler is behind, are skipped), but once
//     the source stops changing, every handler's last notification for every key is the
//     source's final state for that key (or a delete).
//   - When a handler is called, the cache already holds that change and possibly later
//     ones: the cache is level with or ahead of every notification.
//   - OnAdd's initial flag is true for the adds that come from the informer's first list,
//     and for the cache replayed to a handler added to a running informer. An object of
//     the first list that is deleted and created again before the handler hears of it is
//     added the second time with initial false.
//   - OnDelete receives the object's last state. With finalStateUnknown false the delete
//     was observed, and it is the state the source sent with the delete or, when the
//     source could send only the key (Event.LastStateUnknown: etcd compacted the last
//     value away, a PostgreSQL delete carries the key columns), the state the cache held
//     for the key, the last one the handlers were given; with finalStateUnknown true the
//     delete was not observed — the object was missing from a relist — and the object is
//     the last state the informer knew, which may be stale. It is never a zero value or a
//     key alone standing for "unknown", and it is always typed: no tombstone type to
//     switch on. A Coalesce handler that fell behind may receive a delete whose object is
//     newer than the last update it was given (the updates in between were merged away).
//   - On a resync a handler receives OnUpdate(obj, obj) with the same object twice.
//   - On a relist (after an expired watch, a failure, a restart without Options.Persist)
//     every object the list brings that the cache already holds reaches every handler as an
//     update, OnUpdate(old, new), even when it has not changed: then old and new are equal
//     (an unchanged object the source decoded again is a copy, not the same pointer). Set
//     Options.Revision and an unchanged object counts as a resync instead: it reaches only
//     the handlers due for one, as OnUpdate(obj, obj).
//   - A handler that panics is recovered: the panic is reported to the error handler, that
//     one notification is skipped, and delivery goes on. Other handlers are unaffected.
//   - Objects are shared between the cache, every reader and every handler. Never modify
//     an object you received; copy it first.
//
// What a reader may assume: every call of the read API (Get, Len, All, Range, ByIndex,
// IndexValues, Snapshot) reads one consistent state of the cache, as of the end of some
// batch; the iterators walk that state and copy nothing (collect them with slices.Collect
// or maps.Collect for a slice or a map). After WaitForRevision(rev) returns, every read
// reflects every change up to rev. The changes of one transaction of a source whose watch
// says so (BatchedWatch: source/etcd, source/http) are written in one batch, so no read
// sees part of one, unless it is larger than a batch (Options.MaxBatch).
//
// What synced means: Informer.Synced is closed (and Stats.Synced true) once the initial
// list is in the cache; Registration.Synced is closed once that handler has been called
// for it, which is what a controller usually wants to wait for. Before that, the cache may
// hold part of the first list: a paged first list is loaded a page at a time, while the
// next page is read.
//
// Bad input never panics: an object whose key, index or transform function fails (or
// panics) is reported to Options.ErrorHandler, counted in Stats and skipped; a source that
// sends a malformed page, an unknown event type or a revision older than one it already
// sent is reported and listed again, and the cache converges after that list.
//
// What is not guaranteed: delivery of every intermediate state; order across keys; that a
// handler has processed anything when Informer.Synced is closed; delivery of queued
// notifications once the informer stops (they are dropped).
//
// # How the guarantees are tested
//
// Each guarantee above is checked by tests that run in "make test", under -race, with a
// goroutine-leak check in every package's TestMain. TESTING.md, at the root of the
// repository, names the tests of each guarantee.
//
// # Memory and speed
//
// The cache is a B-tree of keys and, per index, a B-tree of values whose buckets hold the
// matching objects (a copy-on-write B-tree of the package's own that compares string and
// two-string struct keys in place), so keys are ordered, range and prefix scans are
// cheap, and a by-index read costs no lookup per object; a snapshot is an O(1)
// copy-on-write clone.
//
// One goroutine writes the cache, so the pipeline's throughput is that goroutine's speed,
// and the work is arranged to keep it small: the reflector's goroutine computes each
// event's index values as it queues the event; the deltas a key gathered while queued are
// written as one write of the key's final state (the handlers still get a notification per
// delta, and readers, who see only whole batches, could never see the states between);
// an observed delete finds the object's index entries through the values of the event's
// object rather than by calling the index functions on the stored one; and a batch's
// notifications are shared by the handlers' queues, not copied into each.
//
// Each handler's queue is bounded (HandlerOptions.QueueLength); when it is full the
// handler's QueuePolicy decides: Coalesce (the default) keeps the newest state per key, so
// memory stays bounded by the number of keys; Block makes the informer, and so the source,
// wait — but nothing else: reads, Stats, AddHandler, RemoveHandler and metrics go on
// while a Block handler is stalled. The delta queue is bounded too (Options.MaxPending).
//
// Each stage owns its state and the others reach it through its methods, never its
// fields: the reflector writes what it reads to its sink, which keys each object, has the
// store prepare its index values and queues it in the delta queue (which carries them
// without looking inside); the writer pops a batch, has the store apply it (which returns
// the batch's notifications) and hands those to the processor, which queues them to each
// handler's listener under its policy.
//
// That is the package's rule for its own files: stages meet through methods — exported
// names on unexported stage types, such as store.Apply or fifo.Pop — and no file reads
// the unexported fields of a type another file declares (doc_lint_test.go checks it).
//
// # How the pieces fit
//
// One line per file, in the order changes flow:
//
//	listwatch.go   the source's contract: ListerWatcher, List, Watch, Event, error classes
//	watchfuncs.go  ChanWatch and FuncWatch, watches made from a channel or a function
//	reflector.go   the list-and-watch loop: relists, expiries, resync timer
//	list.go        one paged list (lister): page checks, continue tokens, nil items
//	backoff.go     how the reflector waits: Backoff, the periodic timer, the watchdog
//	source.go      what the reflector knows of its source: last revision, last failure
//	sink.go        the reflector's sink: keys objects, prepares index values, queues them
//	deltafifo.go   the delta queue: deltas per key, relists with tombstones, batches
//	writer.go      the writer: batch → store → notifications → processor; watermarks
//	store.go       the store and its writes: apply a batch, load, publish snapshots
//	indexer.go     the typed index API a user writes: IndexFunc, ValueFunc, Index, IndexBy, Indexers
//	index.go       the indexes: buckets, each index's writes; dense trees
//	hints.go       index values prepared as events are queued, carried by the queue
//	snapshot.go    Reader and Snapshot, the immutable reads
//	keyorder.go    key order and the trees' shared kit (order, nodes, epochs)
//	processor.go   handler registration, fan-out of batches, resync, stop
//	listener.go    one handler's bounded queue, policy and goroutine; notes, batches
//	informer.go    Options, New, Run and the public methods, each delegating to a stage
//	errors.go      the package's errors and the reporter (error handler, log, Stats)
//	stats.go       Stats (state, counters, handlers), the counters behind them, Histogram
//	warm.go        warm restart: load a saved state before Run, save while running
//	persister.go   the Persister interface warm.go uses
//	factory.go     one shared informer per source, WaitForCacheSync
package informer
