package informer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// writer is the pipeline's one writing goroutine: it takes a batch from the delta queue,
// has the store apply it (which returns the batch's notifications), hands those to the
// processor, moves the watermark that WaitForRevision waits on, and then waits while a
// Block handler has no room. The cache is so level with or ahead of every notification a
// handler receives.
type writer[K comparable, V any] struct {
	queue *deltaFIFO[K, V]
	store *store[K, V]
	proc  *processor[K, V]
	wrote func(applied, objects int) // the counters' Wrote

	maxBatch  int  // Options.MaxBatch
	autoBatch bool // Options.MaxBatch was left to the informer: see batchLimits

	// mu is held while a batch is applied and handed to the processor, and while a handler
	// is added: a handler added meanwhile sees a batch either in its replay of the cache or
	// as notifications, never both.
	mu sync.Mutex

	synced   atomic.Bool
	syncedCh chan struct{}
	wm       watermarks
}

// newWriter returns the writer of queue into st for proc; wrote counts each write in
// Stats; maxBatch is Options.MaxBatch (0 or less: the informer chooses, see batchLimits).
func newWriter[K comparable, V any](queue *deltaFIFO[K, V], st *store[K, V], proc *processor[K, V], wrote func(applied, objects int), maxBatch int, cmpRev RevisionComparer) *writer[K, V] {
	autoBatch := maxBatch <= 0
	if autoBatch {
		maxBatch = defaultBatch
	}
	return &writer[K, V]{
		queue: queue, store: st, proc: proc, wrote: wrote,
		maxBatch: maxBatch, autoBatch: autoBatch,
		syncedCh: make(chan struct{}),
		wm:       watermarks{cmp: cmpRev},
	}
}

// Run applies batches until the queue is closed.
func (w *writer[K, V]) Run() {
	var b batch[K, V]
	for {
		keys, deltas := w.batchLimits()
		rev, inclusive, synced, err := w.queue.Pop(&b, keys, deltas)
		if err != nil {
			return
		}
		exact := ""
		if inclusive {
			exact = rev
		}
		w.mu.Lock()
		notes, applied, objects := w.store.Apply(&b, exact, w.proc.Buffer())
		w.wrote(applied, objects)
		if inclusive {
			// A list behind what the cache had reached (a source of another history,
			// restored from a backup) takes WaitForRevision back with the cache.
			w.wm.MoveBack(rev, b.Listed)
		}
		w.queue.Done(&b)
		if synced {
			// The first list is in. If it was written in an order that left the trees'
			// nodes half full (see store.applyFirstList), they are rebuilt before the
			// handlers have it, so that a synced informer's cache is in its steady shape;
			// a sorted list was written densely and is not rebuilt.
			w.store.CompactIfLoose()
		}
		w.handOver(notes, synced, rev, inclusive)
		w.mu.Unlock()
		w.proc.WaitForRoom()
	}
}

// handOver gives the processor a batch's notifications and then, once every handler has
// them queued, publishes what the batch reached: after WaitForRevision or a sync, every
// notification up to there is on its way to every handler. Called under mu.
func (w *writer[K, V]) handOver(notes []notification[K, V], synced bool, rev string, inclusive bool) {
	exact := ""
	if inclusive {
		exact = rev
	}
	w.proc.Deliver(notes, synced, exact)
	w.wm.Advance(rev, inclusive)
	if synced {
		w.synced.Store(true)
		close(w.syncedCh)
	}
}

// Restore fills the empty cache with a restored state at rev in one write, hands the
// handlers each object as an initial add and marks the informer synced, as after a first
// list. It runs before the pipeline starts. report receives the objects an index function
// failed for.
func (w *writer[K, V]) Restore(keys []K, objs []V, rev string, report func(error)) {
	w.mu.Lock()
	notes := w.store.Load(keys, objs, rev, report, w.proc.Buffer())
	w.store.Compact() // loaded in key order: half-full nodes
	w.wrote(0, len(notes))
	w.queue.MarkRestored(rev)
	w.handOver(notes, true, rev, true)
	w.mu.Unlock()
	w.proc.WaitForRoom()
}

// AddHandler registers h with the processor between two batches; on a running informer
// it is first given the cache as it is now (see replay).
func (w *writer[K, V]) AddHandler(h Handler[V], opts HandlerOptions) (*Registration, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proc.Add(h, opts, w.replay)
}

// replay is the cache as initial adds, and the markers that follow them: synced, if the
// informer is, and the revision the cache is exactly the source's state at, if it is.
func (w *writer[K, V]) replay() ([]notification[K, V], bool, string) {
	notes, rev := w.store.Replay()
	return notes, w.synced.Load(), rev
}

// HasSynced reports whether the initial state is in the cache and queued to the handlers.
func (w *writer[K, V]) HasSynced() bool { return w.synced.Load() }

// SyncedChan returns a channel closed once HasSynced is true.
func (w *writer[K, V]) SyncedChan() <-chan struct{} { return w.syncedCh }

// WaitFor waits until every change up to rev is in the cache: see
// Informer.WaitForRevision; name names the informer in its errors.
func (w *writer[K, V]) WaitFor(ctx context.Context, rev, name string) error {
	return w.wm.Wait(ctx, rev, name)
}

// Stop makes WaitFor callers return ErrStopped; the informer stopped.
func (w *writer[K, V]) Stop() { w.wm.Stop() }

// SuspendWaits makes WaitFor callers wait until the next list is in the cache: the source
// is on another history, whose revisions the cache's say nothing about.
func (w *writer[K, V]) SuspendWaits() { w.wm.Suspend() }

// Batch sizes when Options.MaxBatch is 0. A batch applied while goroutines read the
// cache is published as a snapshot, and the writer then copies each tree node it changes
// (copy-on-write): a batch of 1024 random keys among 50,000 copies nearly every leaf of
// the cache's tree, as a batch of 16384 does.
const (
	defaultBatch        = 1024
	defaultReadingBatch = 16384
)

// batchLimits returns the most keys, and deltas, of the next batch: Options.MaxBatch keys,
// or, when MaxBatch is left to the informer and goroutines read the cache, up to
// defaultReadingBatch keys as far as every Coalesce handler's queue has room for their
// notifications (a delta makes at most one), and defaultBatch keys at least. A Block
// handler takes a whole batch, whatever its size, before the writer waits for room.
func (w *writer[K, V]) batchLimits() (keys, deltas int) {
	if !w.autoBatch || !w.store.Reading() {
		return w.maxBatch, math.MaxInt
	}
	room := w.proc.CoalesceRoom()
	if room == math.MaxInt {
		return defaultReadingBatch, math.MaxInt
	}
	if room < defaultBatch {
		return defaultBatch, math.MaxInt
	}
	return defaultReadingBatch, room
}

// watermarks is read-your-writes: the newest revision the cache reached, and a channel
// closed when it moves.
type watermarks struct {
	cmp RevisionComparer // nil: revisions are not ordered

	mu        sync.Mutex
	rev       string
	inclusive bool // every change of rev is in, not only those before it
	set       bool
	suspended bool // the source left the history of rev: no revision is reached until a list is in
	ch        chan struct{}
	stopped   bool
}

// Advance records that the cache holds every change older than rev (or as old, when
// inclusive) and wakes Wait callers. It never moves the watermark back (MoveBack does).
func (m *watermarks) Advance(rev string, inclusive bool) {
	if rev == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.suspended {
		return // only the list of the history the source is on now resumes (MoveBack)
	}
	if m.set && m.cmp != nil {
		// A batch whose head is older than what an earlier batch already covered does not
		// move the watermark back.
		if c, err := m.cmp.CompareRevisions(rev, m.rev); err == nil && (c < 0 || (c == 0 && !inclusive && m.inclusive)) {
			return
		}
	}
	m.rev, m.inclusive, m.set = rev, inclusive, true
	m.wakeLocked()
}

// MoveBack moves the watermark back to rev, every change of it in, if rev is older and
// listed reports that the batch that reached it holds a list: the cache went back with the
// source's history, and a revision between the two has to be waited for again. After
// Suspend, the list's batch sets the watermark to rev whatever it is, and waits resume.
func (m *watermarks) MoveBack(rev string, listed func() bool) {
	if rev == "" || m.cmp == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.set {
		return
	}
	if m.suspended {
		if listed() {
			m.rev, m.inclusive, m.suspended = rev, true, false
			m.wakeLocked()
		}
		return
	}
	if c, err := m.cmp.CompareRevisions(rev, m.rev); err != nil || c >= 0 || !listed() {
		return
	}
	m.rev, m.inclusive = rev, true
}

// Suspend says that the source left the history the watermark's revision belongs to (a
// restore from a backup, a failover to a server of another history): its revisions,
// compared with the source's new ones, say nothing of what the cache holds. Until the
// batch that holds the next list is in (MoveBack), no revision counts as reached.
func (m *watermarks) Suspend() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.set {
		m.suspended = true
	}
}

// Stop makes Wait callers return ErrStopped.
func (m *watermarks) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	m.wakeLocked()
}

func (m *watermarks) wakeLocked() {
	if m.ch != nil {
		close(m.ch)
		m.ch = nil
	}
}

// Wait blocks until every change up to rev is in the cache, ctx is done or Stop is
// called. name names the informer in its errors. It needs ordered revisions.
func (m *watermarks) Wait(ctx context.Context, rev, name string) error {
	if m.cmp == nil {
		return fmt.Errorf("informer %q: WaitForRevision: %w", name, ErrRevisionsUnordered)
	}
	if _, err := m.cmp.CompareRevisions(rev, rev); err != nil {
		// The caller's revision is at fault, not the source: not ErrBadInput.
		return fmt.Errorf("informer %q: WaitForRevision(%q): not a revision of this source: %v", name, rev, err)
	}
	for {
		m.mu.Lock()
		if m.set && !m.suspended {
			c, err := m.cmp.CompareRevisions(rev, m.rev)
			if err != nil {
				at := m.rev
				m.mu.Unlock()
				return fmt.Errorf("informer %q: WaitForRevision(%q): comparing with the cache's revision %q: %w", name, rev, at, err)
			}
			if c < 0 || (c == 0 && m.inclusive) {
				m.mu.Unlock()
				return nil
			}
		}
		if m.stopped {
			m.mu.Unlock()
			return ErrStopped
		}
		if m.ch == nil {
			m.ch = make(chan struct{})
		}
		ch := m.ch
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
