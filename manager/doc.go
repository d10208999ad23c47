// Package manager runs a service built on informers: its caches, its controllers and any
// other Runnable, with leader election, fencing, health probes and an ordered shutdown, as
// controller-runtime's Manager does for Kubernetes controllers.
//
// Start runs, in order: the health server (Options.HealthAddr), the caches (AddInformer,
// AddFactory) until every one has synced within Options.CacheSyncTimeout (the error names
// those that did not), the runnables of every replica (Add), and, while this replica
// leads, the leader-only runnables (AddLeader). When its context is done (SignalContext
// turns SIGTERM and SIGINT into that) it stops them in reverse order within
// Options.ShutdownTimeout, the members of a group together, and names whatever overran
// its part. The caches stop last, within Options.CacheStopTimeout kept for them, even
// after a runnable overran: their snapshots are saved. Informers, factories and runnables
// may also be added while Start runs: they start at once and stop in their group.
//
// # Leadership and fencing
//
// An Elector campaigns; each Leadership it returns is one term, identified by a Term
// whose Value increases from term to term. Leader-only runnables get the Term in their
// context (TermFrom) and should carry it with every side effect, so that the store can
// refuse a write made under a stale term: the etcd election package offers Fenced, a
// transaction conditional on the term still being current. Fencing is what makes leader
// election safe, since no timing can stop a paused process (GC, SIGSTOP, a partition)
// from acting when it resumes: its writes are refused instead.
//
// Timing is the second line. When a term is lost (no renewal acknowledged within the
// renew deadline, below the lease's TTL), the manager cancels the leader-only runnables'
// context at once; if they have not returned by Options.LeaderStopMargin before the lease
// held may expire, Options.OnLeaderStuck runs from a timer no runnable can block, and by
// default exits the process. New checks the margin against a TimedElector's timing. The
// lease is resigned only after they have returned. Then the manager campaigns again
// (Options.OnLoss): a demoted replica needs no restart. Followers keep their caches
// running, so a new leader starts with synced caches.
//
// # Health
//
// Handler serves /healthz, /readyz (with ?verbose, ?exclude= and one check by name),
// /metrics (unless Options.MetricsAddr serves it apart) and optionally pprof; see its
// documentation for each check. Readiness never passes before the caches it checks have
// synced, fails for a source that shows no progress (Options.SourceProgressBound) and for
// a runnable that says it is not ready (ReadyReporter: a controller over an informer
// nobody runs), and a follower is ready.
package manager
