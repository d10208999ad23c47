package informer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/clock"
)

// KeyFunc returns the key of an object. An error is an error for that object: it is
// reported and the object is skipped.
type KeyFunc[K comparable, V any] func(obj V) (K, error)

// Options configures an Informer. Only Key is required; every zero value is a documented
// default.
type Options[K comparable, V any] struct {
	// Key returns an object's key. Required.
	Key KeyFunc[K, V]
	// CompareKeys orders keys for ordered iteration and range scans. It may be nil when K
	// is a string or integer type (natural order); it is required for any other K.
	CompareKeys func(a, b K) int
	// Indexers are the indexes of the cache; more can be added while running with
	// AddIndexers. Index functions must be pure functions of the object and safe for
	// concurrent use: the informer calls them as events arrive (on the reflector's
	// goroutine), when writing the cache and for Snapshot.Index, possibly at once. A
	// function that is not pure is survived (the cache scans for stale entries) but costs
	// time.
	Indexers Indexers[V]
	// ResyncPeriod is the default period at which handlers are told again of every cached
	// object (OnUpdate(obj, obj)); 0 means never. Resync does not contact the source.
	ResyncPeriod time.Duration
	// Transform, if set, is applied to every object as it arrives from the source, before
	// anything is buffered or stored: strip fields you do not need here. An error is an
	// error for that object: it is reported and the object skipped.
	Transform func(V) (V, error)
	// Revision returns an object's own revision. When set, an object listed again with an
	// unchanged revision counts as a resync, not a change (SI-3): it reaches only the
	// handlers due for a resync. Without it, every object of a relist reaches every handler
	// as an update.
	Revision func(V) string
	// ErrorHandler receives every error the informer reports: source failures, objects
	// whose key, index or transform function failed, handler panics. It is called from the
	// informer's goroutines and must not block. Errors are also logged at Debug level, and
	// failures of the source at Warn, at most once per kind per backoff step.
	ErrorHandler func(error)
	// Logger receives the informer's logs; default slog.Default().
	Logger *slog.Logger
	// Name identifies the informer in errors, logs and metrics; default "informer".
	Name string
	// Clock drives the resync timer, the backoff and the watch timeouts; default clock.Real.
	Clock clock.Clock

	// PageSize is the list page size; 0 means the source's own default (see PageSizer),
	// else 500; negative means no paging.
	PageSize int64
	// MinWatchTimeout is the shortest watch duration requested; each watch asks for a
	// random duration in [MinWatchTimeout, 2·MinWatchTimeout). Default 5 minutes.
	MinWatchTimeout time.Duration
	// Backoff configures the waits between failed attempts.
	Backoff Backoff
	// MaxPending bounds the changes received from the source but not yet applied; when it is
	// reached the informer stops reading the source until the cache catches up. 0 means
	// 65536; negative means no bound. A list is always accepted whole. With a Block handler
	// stalled, the informer reads at most QueueLength + 2×MaxPending (+2) changes beyond what
	// that handler has processed: one batch may be in delivery while the queue refills
	// (measured by TestMemory_BlockBackpressure).
	MaxPending int
	// MaxBatch is the most keys applied to the cache in one batch; 0 means 1024.
	MaxBatch int
}

// Informer keeps a local, indexed copy of a ListerWatcher's collection and tells its
// handlers what changed. See the package documentation for the guarantees.
type Informer[K comparable, V any] struct {
	opts   Options[K, V]
	lw     ListerWatcher[V]
	cmpRev RevisionComparer
	logger *slog.Logger
	stats  Stats

	store *store[K, V]
	fifo  *deltaFIFO[K, V]
	refl  *reflector[V]
	proc  processor[K, V]

	started atomic.Bool
	stopped atomic.Bool

	// the reflector goroutine's buffers for the index values of an event
	evVals []string
	evEnds []int32

	synced   atomic.Bool
	syncedCh chan struct{}

	// resync check period (SI-7), guarded by proc.mu
	resyncCheck time.Duration

	// apply's buffers, used under the store's lock
	offsets []int
	slots   []notification[K, V]

	// read-your-writes: the newest watermark applied, and a channel closed when it moves
	wmMu     sync.Mutex
	wm       watermark
	wmCh     chan struct{}
	wmHasSet bool

	// stop notification: Done and AfterStop
	done       chan struct{}
	stopMu     sync.Mutex
	doneClosed bool
	stopSeq    uint64
	afterStop  map[uint64]func()
}

// New returns an informer over lw. It does nothing until Run.
func New[K comparable, V any](lw ListerWatcher[V], opts Options[K, V]) (*Informer[K, V], error) {
	if lw == nil {
		return nil, errors.New("informer: New: nil ListerWatcher")
	}
	if opts.Key == nil {
		return nil, errors.New("informer: New: Options.Key is required")
	}
	if opts.CompareKeys == nil {
		c, ok := defaultCompare[K]()
		if !ok {
			var k K
			return nil, fmt.Errorf("informer: New: key type %T has no natural order; set Options.CompareKeys", k)
		}
		opts.CompareKeys = c
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Name == "" {
		opts.Name = "informer"
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	switch {
	case opts.PageSize == 0:
		opts.PageSize = defaultPageSize(lw)
	case opts.PageSize < 0:
		opts.PageSize = 0
	}
	if opts.MinWatchTimeout <= 0 {
		opts.MinWatchTimeout = 5 * time.Minute
	}
	switch {
	case opts.MaxPending == 0:
		opts.MaxPending = 65536
	case opts.MaxPending < 0:
		opts.MaxPending = 0
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 1024
	}
	st, err := newStore[K, V](opts.CompareKeys, opts.Indexers)
	if err != nil {
		return nil, err
	}
	inf := &Informer[K, V]{
		opts:        opts,
		lw:          lw,
		logger:      opts.Logger.With("informer", opts.Name),
		store:       st,
		syncedCh:    make(chan struct{}),
		resyncCheck: opts.ResyncPeriod,
		done:        make(chan struct{}),
	}
	inf.proc.batches = newBatchPool[K, V]()
	inf.stats.ListDuration = NewHistogram(DurationBuckets...)
	inf.stats.ListItems = NewHistogram(ItemBuckets...)
	inf.stats.WatchDuration = NewHistogram(WatchDurationBuckets...)
	inf.cmpRev, _ = lw.(RevisionComparer)
	inf.fifo = newDeltaFIFO[K, V](inf, opts.MaxPending)
	inf.refl = newReflector[V](lw, inf, reflectorConfig{
		name:            opts.Name,
		pageSize:        opts.PageSize,
		minWatchTimeout: opts.MinWatchTimeout,
		backoff:         opts.Backoff.withDefaults(),
		clock:           opts.Clock,
		logger:          inf.logger,
		report:          inf.report,
		stats:           &inf.stats,
	})
	if opts.Transform != nil {
		inf.refl.transform = inf.transform
	}
	return inf, nil
}

// Name returns the informer's name.
func (inf *Informer[K, V]) Name() string { return inf.opts.Name }

// ErrStopped is returned for operations on an informer that has stopped.
var ErrStopped = errors.New("informer: stopped")

// ErrAlreadyStarted is returned by a second Run.
var ErrAlreadyStarted = errors.New("informer: already started")

// Run lists and watches the source and delivers notifications until ctx is done; then it
// stops every goroutine it started, handlers included, and returns. It returns
// ErrAlreadyStarted if the informer has run before.
func (inf *Informer[K, V]) Run(ctx context.Context) error {
	if !inf.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	inf.proc.mu.Lock()
	inf.proc.started = true
	for _, l := range inf.proc.listeners {
		inf.proc.startLocked(l)
	}
	inf.proc.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); inf.processLoop() }()
	go func() { defer wg.Done(); inf.refl.run(ctx) }()
	<-ctx.Done()
	inf.fifo.close()
	wg.Wait()

	// SI-2: the handlers stop strictly after the pipeline that feeds them.
	inf.proc.mu.Lock()
	inf.stopped.Store(true)
	for _, l := range inf.proc.listeners {
		l.stop()
	}
	inf.proc.mu.Unlock()
	inf.proc.wg.Wait()
	inf.wmMu.Lock()
	if inf.wmCh != nil {
		close(inf.wmCh)
		inf.wmCh = nil
	}
	inf.wmMu.Unlock()
	inf.markStopped()
	return nil
}

// ReportError reports err as the informer's own errors are: to Options.ErrorHandler, the
// log and the error counters of Stats (by class: ErrDecode, ErrBadInput, an ObjectError,
// …). It is for errors a source finds without failing a call, such as an object it could
// not decode and skipped: pass it as the source's error callback, so that they are
// handled and counted with the informer's.
func (inf *Informer[K, V]) ReportError(err error) {
	if err != nil {
		inf.report(err)
	}
}

// report sends an error to the error handler and the log.
func (inf *Informer[K, V]) report(err error) {
	inf.stats.countError(err)
	inf.logger.Debug("informer error", "err", err)
	if inf.opts.ErrorHandler != nil {
		inf.opts.ErrorHandler(err)
	}
}

// --- the sink the reflector writes to ---

// transform applies Options.Transform; false means the object failed and was reported.
func (inf *Informer[K, V]) transform(obj V) (V, bool) {
	out, err := safeCall(inf.opts.Transform, obj)
	if err != nil {
		inf.report(&ObjectError{Op: "transform", Err: err})
		return out, false
	}
	return out, true
}

func (inf *Informer[K, V]) key(obj V) (K, error) {
	k, err := safeCall(inf.opts.Key, obj)
	if err != nil {
		return k, &ObjectError{Op: "key", Err: err}
	}
	return k, nil
}

// safeCall calls a user function with a panic turned into an error.
func safeCall[T, R any](fn func(T) (R, error), v T) (out R, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn(v)
}

func (inf *Informer[K, V]) replace(items []V, rev string) error {
	keys := make([]K, 0, len(items))
	objs := items[:0]
	for _, obj := range items {
		k, err := inf.key(obj)
		if err != nil {
			inf.report(err)
			continue
		}
		keys = append(keys, k)
		objs = append(objs, obj)
	}
	clear(items[len(objs):])
	inf.stats.Relists.Add(1)
	return inf.fifo.replace(keys, objs, rev)
}

func (inf *Informer[K, V]) event(ev Event[V]) error {
	obj := ev.Object
	k, err := inf.key(obj)
	if err != nil {
		return err
	}
	var t DeltaType
	switch ev.Type {
	case Added:
		t = DeltaAdded
	case Modified:
		t = DeltaUpdated
	case Deleted:
		t = DeltaDeleted
	}
	// The index values, computed here rather than by the writer, which is the pipeline's
	// busiest goroutine (for a delete, a hint: see store.deleteHinted). If a function
	// fails, the writer calls it again and reports the error.
	var pre precomputed[V]
	set := inf.store.set.Load()
	var oe *ObjectError
	if inf.evVals, inf.evEnds, oe = set.compute(inf.evVals[:0], inf.evEnds[:0], obj); oe == nil {
		pre = precomputed[V]{set: set, vals: inf.evVals, ends: inf.evEnds}
	}
	err = inf.fifo.addIndexed(t, k, obj, ev.Revision, pre)
	clear(inf.evVals)
	return err
}

func (inf *Informer[K, V]) bookmark(rev string) { inf.fifo.bookmark(rev) }

func (inf *Informer[K, V]) resync() error { return inf.fifo.resync() }

func (inf *Informer[K, V]) resyncPeriod() time.Duration {
	inf.proc.mu.Lock()
	defer inf.proc.mu.Unlock()
	return inf.resyncCheck
}

func (inf *Informer[K, V]) shouldResync() bool {
	inf.proc.mu.Lock()
	defer inf.proc.mu.Unlock()
	return inf.proc.shouldResyncLocked(inf.opts.Clock.Now())
}

// eachKnown lets the queue read the cache (O-5); the queue calls it only when no batch is
// in flight.
func (inf *Informer[K, V]) eachKnown(fn func(K, V)) {
	inf.store.mu.Lock()
	defer inf.store.mu.Unlock()
	inf.store.items.Ascend(func(e entry[K, V]) bool { fn(e.key, e.obj); return true })
}

// --- applying batches ---

// processLoop pops batches from the queue, applies each to the cache under one write,
// publishes it, and hands its notifications to the handlers (O-2, O-3).
func (inf *Informer[K, V]) processLoop() {
	var batch []popped[K, V]
	for {
		var wm watermark
		var synced bool
		var err error
		batch, wm, synced, err = inf.fifo.popBatch(batch[:0], inf.opts.MaxBatch)
		if err != nil {
			return
		}
		// The processor's lock covers apply and distribute, so that a handler added
		// meanwhile sees this batch either in its replay or as notifications, never both.
		inf.proc.mu.Lock()
		notes := inf.proc.batches.get()
		notes.notes = inf.apply(batch, wm, notes.notes)
		inf.fifo.finishBatch(batch)
		inf.advance(wm)
		inf.proc.distributeLocked(notes)
		inf.proc.batches.low.Store(len(notes.notes) < idleBufferCap)
		notes.release()
		if synced {
			inf.synced.Store(true)
			close(inf.syncedCh)
			marker := newNoteBatch([]notification[K, V]{{kind: notifySynced}})
			for _, l := range inf.proc.listeners {
				l.add(marker, true)
			}
		}
		inf.proc.mu.Unlock()
	}
}

// apply writes a batch to the cache and returns the notifications it makes (SI-3, C-7).
// Keys are independent of each other, so a large batch writes them in a scattered order
// while the notifications keep the queue's order: a list arrives sorted by key, and sorted
// inserts leave B-tree nodes half full, scattered ones fuller.
func (inf *Informer[K, V]) apply(batch []popped[K, V], wm watermark, notes []notification[K, V]) []notification[K, V] {
	s := inf.store
	s.mu.Lock()
	defer s.mu.Unlock()
	applied := 0
	if len(batch) < scatterAbove {
		for i := range batch {
			p := &batch[i]
			n := len(p.list.deltas)
			applied += n
			notes = slices.Grow(notes, n)
			base := len(notes)
			out := notes[base : base+n]
			inf.applyList(p, out)
			for j := range out {
				if out[j].kind != 0 {
					notes = append(notes, out[j]) // moves left over the slots of skipped ones
				}
			}
			clear(notes[len(notes) : base+n])
		}
	} else {
		offsets := inf.offsets[:0]
		total := 0
		for i := range batch {
			offsets = append(offsets, total)
			total += len(batch[i].list.deltas)
		}
		applied = total
		slots := inf.slots[:0]
		slots = append(slots, make([]notification[K, V], total)...)
		stride := coprimeStride(len(batch))
		for k, i := 0, 0; k < len(batch); k, i = k+1, (i+stride)%len(batch) {
			p := &batch[i]
			inf.applyList(p, slots[offsets[i]:offsets[i]+len(p.list.deltas)])
		}
		for i := range slots {
			if slots[i].kind != 0 {
				notes = append(notes, slots[i])
			}
		}
		clear(slots)
		inf.offsets, inf.slots = offsets[:0], slots[:0]
	}
	rev := ""
	if wm.inclusive {
		rev = wm.rev
	}
	s.publishLocked(rev)
	inf.stats.Objects.Store(int64(s.items.Len()))
	inf.stats.Applied.Add(uint64(applied))
	return notes
}

// scatterAbove is the batch size from which apply scatters its writes.
const scatterAbove = 64

// coprimeStride returns a step that visits every index of [0, n) once when repeated.
func coprimeStride(n int) int {
	for _, p := range [...]int{7919, 7927, 7933, 7937, 7949} {
		if n%p != 0 {
			return p % n
		}
	}
	return 1
}

// applyList applies the deltas of one popped key to the store, writing their
// notifications to out (kind 0: none), which has a slot per delta. Several deltas whose
// index values were all computed as they were queued are applied as one write of the
// final state, with the notifications the writes one by one would have made: readers see
// only whole batches, so the intermediate states were never visible anyway.
func (inf *Informer[K, V]) applyList(p *popped[K, V], out []notification[K, V]) {
	ds := p.list.deltas
	if len(ds) > 1 && p.list.indexedWith(inf.store.set.Load()) {
		inf.applyFinal(p, out)
		return
	}
	for j := range ds {
		out[j] = inf.applyDelta(p, j)
	}
}

// applyFinal is applyList for a list whose deltas are all indexed with the current index
// functions, so that no write can fail. The final state is the last delta's: it is written
// first, which returns the state before the batch that the notifications start from.
func (inf *Informer[K, V]) applyFinal(p *popped[K, V], out []notification[K, V]) {
	s := inf.store
	last := len(p.list.deltas) - 1
	var cur V
	var ex bool
	if d := &p.list.deltas[last]; d.typ == DeltaDeleted {
		cur, ex = s.deleteHinted(p.key, p.list.precomputed(last))
	} else {
		cur, ex, _ = s.upsertLocked(p.key, d.object, p.list.precomputed(last)) // values known: no error
	}
	var zero V
	for j := range p.list.deltas {
		d := &p.list.deltas[j]
		out[j] = inf.noteFor(p, d, cur, ex)
		if d.typ == DeltaDeleted {
			cur, ex = zero, false
		} else {
			cur, ex = d.object, true
		}
	}
}

// applyDelta applies deltas[j] of p to the store and returns its notification (kind 0: none).
func (inf *Informer[K, V]) applyDelta(p *popped[K, V], j int) notification[K, V] {
	d := &p.list.deltas[j]
	s := inf.store
	if d.typ == DeltaDeleted {
		old, existed := s.deleteHinted(p.key, p.list.precomputed(j))
		return inf.noteFor(p, d, old, existed)
	}
	old, existed, err := s.upsertLocked(p.key, d.object, p.list.precomputed(j))
	if err != nil {
		inf.report(err)
		return notification[K, V]{}
	}
	return inf.noteFor(p, d, old, existed)
}

// noteFor returns the notification of d, a delta of p, when the key's state before d was
// old (existed false: absent). Kind 0: nothing to tell.
func (inf *Informer[K, V]) noteFor(p *popped[K, V], d *delta[V], old V, existed bool) notification[K, V] {
	switch {
	case d.typ == DeltaDeleted && !existed:
		return notification[K, V]{} // never seen, or its delete was already delivered
	case d.typ == DeltaDeleted:
		obj := d.object
		if d.finalStateUnknown {
			obj = old
		}
		return notification[K, V]{kind: notifyDelete, key: p.key, old: obj, unknown: d.finalStateUnknown}
	case !existed:
		return notification[K, V]{kind: notifyAdd, key: p.key, new: d.object, initial: p.initial}
	}
	sync := d.typ == DeltaSync
	if d.typ == DeltaReplaced && inf.opts.Revision != nil {
		sync = inf.opts.Revision(old) == inf.opts.Revision(d.object)
	}
	return notification[K, V]{kind: notifyUpdate, key: p.key, old: old, new: d.object, sync: sync}
}

// advance records the watermark a batch reached and wakes WaitForRevision callers.
func (inf *Informer[K, V]) advance(wm watermark) {
	if wm.rev == "" {
		return
	}
	inf.wmMu.Lock()
	defer inf.wmMu.Unlock()
	if inf.wmHasSet && inf.cmpRev != nil {
		// Keep the watermark monotonic: a batch whose head is older than what an earlier
		// batch already covered does not move it back.
		if c, err := inf.cmpRev.CompareRevisions(wm.rev, inf.wm.rev); err == nil && (c < 0 || (c == 0 && !wm.inclusive && inf.wm.inclusive)) {
			return
		}
	}
	inf.wm, inf.wmHasSet = wm, true
	if inf.wmCh != nil {
		close(inf.wmCh)
		inf.wmCh = nil
	}
}

// --- handlers ---

// AddHandler registers a handler. Before Run it will receive the initial list as adds
// marked initial; on a running informer it first receives the current cache as adds
// marked initial, then every later change, and its Registration reports HasSynced once the
// replay is delivered (§17). It fails with ErrStopped after the informer stopped.
func (inf *Informer[K, V]) AddHandler(h Handler[V], opts HandlerOptions) (*Registration, error) {
	if h == nil {
		return nil, errors.New("informer: AddHandler: nil handler")
	}
	l := newListener[K, V](h, opts, inf.opts.Clock, func(name string, v any) {
		inf.report(&HandlerPanicError{Informer: inf.opts.Name, Handler: name, Value: v})
	})
	p := &inf.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	if inf.stopped.Load() {
		return nil, ErrStopped
	}
	inf.setResyncLocked(l, opts.ResyncPeriod)
	p.addLocked(l)
	if inf.started.Load() {
		// Between two batches (we hold p.mu): replay the cache as it is now (§17).
		sn := inf.store.snapshot()
		replay := make([]notification[K, V], 0, sn.Len()+1)
		for k, v := range sn.All() {
			replay = append(replay, notification[K, V]{kind: notifyAdd, key: k, new: v, initial: true})
		}
		if inf.synced.Load() {
			replay = append(replay, notification[K, V]{kind: notifySynced})
		}
		l.add(newNoteBatch(replay), true)
	}
	return l.reg, nil
}

// setResyncLocked applies SI-7/SI-8 to a new listener.
func (inf *Informer[K, V]) setResyncLocked(l *listener[K, V], requested time.Duration) {
	if requested == 0 {
		requested = inf.opts.ResyncPeriod
	}
	if requested < 0 {
		requested = 0
	}
	if requested > 0 && requested < minimumResyncPeriod {
		requested = minimumResyncPeriod
	}
	if inf.opts.ResyncPeriod == 0 {
		requested = 0 // SI-8: an informer without resync never resyncs
	}
	if requested > 0 && requested < inf.resyncCheck {
		if inf.started.Load() {
			requested = inf.resyncCheck
		} else {
			inf.resyncCheck = requested
		}
	}
	l.resyncPeriod = requested
	if requested > 0 {
		l.nextResync = inf.opts.Clock.Now().Add(requested)
	}
}

// RemoveHandler unregisters a handler and waits until its goroutine has returned (a call
// in progress finishes; queued notifications are dropped). Do not call it from the
// handler itself. It reports whether the handler was registered.
func (inf *Informer[K, V]) RemoveHandler(reg *Registration) bool {
	l, ok := reg.l.(*listener[K, V])
	if !ok {
		return false
	}
	l.stop() // first, so that a batch waiting for room in its queue goes on
	inf.proc.mu.Lock()
	removed := inf.proc.removeLocked(l)
	started := inf.proc.started
	inf.proc.mu.Unlock()
	if removed && started {
		<-l.done
	}
	return removed
}

// --- sync and revisions ---

// HasSynced reports whether the initial list is in the cache (HS-1). Handlers may still be
// delivering it; use Registration.HasSynced for that.
func (inf *Informer[K, V]) HasSynced() bool { return inf.synced.Load() }

// Synced returns a channel closed once HasSynced is true.
func (inf *Informer[K, V]) Synced() <-chan struct{} { return inf.syncedCh }

// WaitForCacheSync blocks until the initial list is in the cache, or ctx is done. It
// waits on a channel, never polls. It reports whether the cache synced.
func (inf *Informer[K, V]) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-inf.syncedCh:
		return true
	case <-ctx.Done():
		return inf.synced.Load()
	}
}

// LastSyncRevision returns the revision of the last list or watch event the reflector
// received. The cache may not have applied it yet; see WaitForRevision.
func (inf *Informer[K, V]) LastSyncRevision() string { return inf.refl.lastSyncRevision() }

// LastError returns the last error of the source (a failed list or watch, bad input) and
// when it was reported, or nil and the zero time once the source has recovered (a list
// applied, or a watch that delivered an event). A caller whose WaitForCacheSync returned
// false uses it to say why the cache did not sync.
func (inf *Informer[K, V]) LastError() (error, time.Time) { return inf.refl.lastError() }

// ErrRevisionsUnordered is returned by WaitForRevision for a source that does not
// implement RevisionComparer.
var ErrRevisionsUnordered = errors.New("informer: the source's revisions are not ordered")

// WaitForRevision blocks until every change up to rev is visible in the cache (and so to
// every read made after it returns), or ctx is done. Use it for read-your-writes: write to
// the source, take the revision of the write, wait for it, read the cache. It needs a
// source that implements RevisionComparer.
func (inf *Informer[K, V]) WaitForRevision(ctx context.Context, rev string) error {
	if inf.cmpRev == nil {
		return ErrRevisionsUnordered
	}
	for {
		inf.wmMu.Lock()
		if inf.wmHasSet {
			c, err := inf.cmpRev.CompareRevisions(rev, inf.wm.rev)
			if err != nil {
				inf.wmMu.Unlock()
				return fmt.Errorf("informer: WaitForRevision(%q): %w", rev, err)
			}
			if c < 0 || (c == 0 && inf.wm.inclusive) {
				inf.wmMu.Unlock()
				return nil
			}
		}
		if inf.stopped.Load() {
			inf.wmMu.Unlock()
			return ErrStopped
		}
		if inf.wmCh == nil {
			inf.wmCh = make(chan struct{})
		}
		ch := inf.wmCh
		inf.wmMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// --- reads ---

// Snapshot returns the cache as it is now, as an immutable view that never blocks the
// informer. It is O(1) when nothing changed since the last snapshot.
func (inf *Informer[K, V]) Snapshot() *Snapshot[K, V] { return inf.store.snapshot() }

// Get returns the cached object stored under key.
func (inf *Informer[K, V]) Get(key K) (V, bool) { return inf.store.snapshot().Get(key) }

// Len returns the number of cached objects.
func (inf *Informer[K, V]) Len() int { return inf.store.snapshot().Len() }

// List returns every cached object in key order, in a new slice.
func (inf *Informer[K, V]) List() []V { return inf.store.snapshot().List() }

// All yields every cached object in key order, from one snapshot.
func (inf *Informer[K, V]) All() iter.Seq2[K, V] { return inf.store.snapshot().All() }

// ByIndex returns the cached objects indexed under value in the named index.
func (inf *Informer[K, V]) ByIndex(index, value string) ([]V, error) {
	return inf.store.snapshot().ByIndex(index, value)
}

// AddIndexers adds indexes, built at once from the cached objects; it may be called while
// the informer runs (§17). A name already in use is an error (ErrIndexExists), and so is an
// index function failing for a cached object; either way nothing is added.
func (inf *Informer[K, V]) AddIndexers(indexers Indexers[V]) error {
	if inf.stopped.Load() {
		return ErrStopped
	}
	s := inf.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.addIndexersLocked(indexers); err != nil {
		return err
	}
	s.gen.Add(1) // readers must see the new index
	return nil
}

// HandlerPanicError reports a handler call that panicked. The panic was recovered and the
// notification skipped; the handler goes on with the next one.
type HandlerPanicError struct {
	Informer, Handler string
	Value             any // what was passed to panic
}

func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("informer %s: handler %s panicked (notification skipped): %v", e.Informer, e.Handler, e.Value)
}

// Stats returns the informer's counters.
func (inf *Informer[K, V]) Stats() *Stats { return &inf.stats }

// Stats are an informer's counters, updated atomically; read them at any time.
type Stats struct {
	Lists, ListErrors    atomic.Uint64 // list attempts (including streaming lists) and failures
	Watches, WatchErrors atomic.Uint64 // watches opened and watches that failed
	Relists              atomic.Uint64 // lists applied to the queue
	ConsistentLists      atomic.Uint64 // consistent (quorum) lists asked of the source
	Expirations          atomic.Uint64 // revisions found expired
	Added, Modified      atomic.Uint64 // watch events received, by type
	Deleted, Bookmarks   atomic.Uint64
	Objects              atomic.Int64  // objects in the cache
	KeyErrors            atomic.Uint64 // objects skipped: key function failed
	IndexErrors          atomic.Uint64 // objects skipped: an index function failed
	TransformErrors      atomic.Uint64 // objects skipped: transform failed
	DecodeErrors         atomic.Uint64 // objects the source could not decode (ErrDecode)
	SourceErrors         atomic.Uint64 // other bad input from the source (ErrBadInput)
	HandlerPanics        atomic.Uint64 // handler calls that panicked
	OtherErrors          atomic.Uint64 // every other reported error
	Applied              atomic.Uint64 // changes (deltas) applied to the cache, resyncs included

	ListDuration  *Histogram // seconds per list attempt, failed ones and streaming lists included
	ListItems     *Histogram // objects per successful list
	WatchDuration *Histogram // seconds each watch stayed open, from its request to its end
}

func (s *Stats) countEvent(t EventType) {
	switch t {
	case Added:
		s.Added.Add(1)
	case Modified:
		s.Modified.Add(1)
	case Deleted:
		s.Deleted.Add(1)
	}
}

func (s *Stats) countError(err error) {
	var oe *ObjectError
	switch {
	case errors.As(err, &oe):
		switch {
		case oe.Op == "key":
			s.KeyErrors.Add(1)
		case oe.Op == "transform":
			s.TransformErrors.Add(1)
		default:
			s.IndexErrors.Add(1)
		}
	case errors.As(err, new(*HandlerPanicError)):
		s.HandlerPanics.Add(1)
	case errors.Is(err, ErrDecode):
		s.DecodeErrors.Add(1)
	case errors.Is(err, ErrBadInput):
		s.SourceErrors.Add(1)
	default:
		s.OtherErrors.Add(1)
	}
}
