// Package workqueue is a typed work queue for controllers: producers Add keys, a pool of
// workers Get them, process them and call Done. It is the generic counterpart of client-go's
// util/workqueue, rebuilt without Kubernetes dependencies, and plays the part a buffered
// channel would if a channel could merge duplicates and remember what is in flight.
//
// # Contract
//
// A Queue[T] guarantees, for every item (compared with ==):
//
//   - Fair: items are handed out in the order they were first added (FIFO).
//   - Stingy: an item is queued at most once. Adding an item that is already waiting merges
//     with it and does not move it.
//   - One worker at a time: an item returned by Get is not returned again until Done is
//     called for it. If it is added while being processed, it is queued again when Done is
//     called, so the latest Add is always followed by a Get.
//   - Orderly shutdown: after ShutDown, Add, AddAfter and AddRateLimited are ignored, Get
//     keeps returning the items already queued and reports shutdown only once none is left.
//     Items still waiting for a delay are dropped.
//
// A Queue also delays items: AddAfter adds an item once a duration has passed, and
// AddRateLimited asks a RateLimiter how long the item should wait, which is how a
// controller retries a failed key with backoff. Forget clears the item's failure history;
// call it once a key has been processed successfully, or its next failure waits longer than
// it should.
//
// # Costs
//
// Add, Get and Done each take the queue's mutex once. Items are hashed (hash/maphash)
// before the mutex is taken, and the hash travels with the item, so a critical section is
// one probe in an open-addressing table plus a push or pop on a ring buffer. Both grow by
// doubling and shrink only after a sustained low load, so a queue in steady state, or one
// that fills and drains in bursts, allocates nothing per item. Memory per queued item is
// two to four table slots (hash, state and item) plus one ring entry (item and hash).
//
// Delayed items sit in a binary min-heap ordered by ready time, under a lock of their own,
// served by a single goroutine per queue that the first AddAfter that has to wait starts
// and ShutDown stops. A queue that never delays an item runs no goroutine at all.
//
// Items are compared with ==, as map keys are: a NaN never equals itself, and an item of
// interface type whose dynamic value is not comparable makes the call panic.
//
// Time comes from a clock.Clock (clock.Real unless Options.Clock says otherwise), so delays,
// the default token bucket and the metrics can be driven by a clock.Fake in tests.
//
// # Differences from client-go
//
//   - One concrete type, Queue[T], instead of three wrapped interfaces; its zero value is
//     ready to use.
//   - ShutDownWithDrain takes a context and waits until every item accepted before the
//     shutdown has been processed, not only until the in-flight ones are done.
//   - Done for an item that is not being processed does nothing (client-go could queue the
//     item twice).
//   - The delay goroutine needs no 10 s heartbeat: ready times are monotonic and the timer
//     is re-armed, under the delay lock, by whoever changes the earliest ready time.
//   - AddRateLimited consults the rate limiter only if the queue is not shutting down, and
//     the retries metric counts AddRateLimited calls, not every AddAfter.
//   - Unfinished-work gauges are computed when they are read, not by a ticker.
//   - There is no global metrics provider; metrics are configured per queue.
package workqueue
