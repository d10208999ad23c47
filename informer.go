package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/histogram"
)

// KeyFunc returns the key of an object. An error is an error for that object: it is
// reported and the object is skipped.
type KeyFunc[K comparable, V any] func(obj V) (K, error)

// Options configures an Informer. Only Key is required; every zero value is a documented
// default.
type Options[K comparable, V any] struct {
	// Key returns an object's key. Required.
	Key KeyFunc[K, V]
	// CompareKeys orders keys for ordered iteration and range scans. It may be nil when K's
	// underlying type is ordered (a string, integer or floating-point type, named or not:
	// natural order) or is a struct whose fields all are (such as
	// struct{ Namespace, Name string }: ordered as a tuple, field by field in declaration
	// order); it is required for any other K. A struct key that holds the object's own
	// strings costs no allocation per event, where a "namespace/name" string costs one.
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
	// unchanged revision counts as a resync, not a change: it reaches only the
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
	// ProgressTimeout ends a source call that makes no progress, so that a stalled source
	// is noticed (LastError, a Warn, Stats) and tried again instead of waited on in
	// silence. The informer cannot see a source's bytes, so progress is what the calls
	// return: each List call (one page) must return within ProgressTimeout; each initial
	// event of a streaming list must come within it; and a watch must deliver an event
	// (a bookmark included) at least every 2×MinWatchTimeout + ProgressTimeout, since
	// it was asked to end by 2×MinWatchTimeout (a source that sends bookmarks and
	// knows their interval can notice a silent peer sooner, as source/http's idle
	// timeout does). Detection takes between one and two of those spans. A call ended so
	// fails with ErrNoProgress. 0 means 2 minutes; negative means no bound.
	ProgressTimeout time.Duration
	// MaxPending bounds the changes received from the source but not yet applied; when it is
	// reached the informer stops reading the source until the cache catches up. 0 means
	// 65536; negative means no bound. A list is always accepted whole. With a Block handler
	// stalled, the informer reads at most QueueLength + 2×MaxPending (+2) changes beyond what
	// that handler has processed: one batch may be in delivery while the queue refills
	// (measured by TestMemory_BlockBackpressure).
	MaxPending int
	// MaxBatch is the most keys applied to the cache in one batch. 0 means 1024, or, while
	// goroutines read the cache, up to 16384 as far as every Coalesce handler's queue has
	// room for the batch (so that a larger batch never makes one merge notifications):
	// each batch readers see costs the writer a copy of every tree node it then changes,
	// and a larger batch shares that cost among more changes.
	MaxBatch int

	// StopTimeout bounds how long Run waits, once its context is done, for handler calls
	// in progress to return. A handler that has not returned by then is named in a Warn
	// log with the key of its call, and Run returns anyway: that handler's goroutine is
	// left running until the call returns (Go cannot stop it), and then exits without
	// calling the handler again. 0 means 10 seconds; negative means no bound (Run waits
	// for every handler, as client-go does).
	StopTimeout time.Duration

	// Persist, when set, makes restarts warm (package persist implements it with a
	// snapshot file). Run first loads the saved state: if there is one and the Persister
	// accepts it, the cache is filled with it in one write, handlers receive each object as
	// an initial add (as after a list), the informer is synced and Restored, and the watch
	// resumes from the saved revision: no list. If the source says that revision expired,
	// the informer lists consistently and delivers only the differences: an update for
	// each object that changed, an add (not initial) for each new one, a delete with
	// finalStateUnknown for each one gone. Which objects changed is decided by
	// Options.Revision when set, otherwise by Persister.Equal (package persist compares the
	// encoded bytes); unchanged ones are resyncs, which reach only handlers due for one.
	// Objects are saved as cached (after Transform) and restored as saved: not transformed
	// again; an object whose key or index function fails on restore is reported and left
	// out, like a listed one. A state the Persister refuses (corrupt, or saved with
	// another schema, codec or index set) is reported to the ErrorHandler and the
	// informer lists, as on a first start.
	//
	// While running, the informer saves the cache every Persister.Interval, when it
	// changed and is exactly the source's state at a revision, and once more after Run's
	// context is done (Run returns after that save). Default nil: no persistence.
	Persist Persister[K, V]
}

// Informer keeps a local, indexed copy of a ListerWatcher's collection and tells its
// handlers what changed. See the package documentation for the guarantees.
type Informer[K comparable, V any] struct {
	opts   Options[K, V]
	lw     ListerWatcher[V]
	cmpRev RevisionComparer
	logger *slog.Logger
	stats  counters

	autoBatch bool // Options.MaxBatch was left to the informer: see batchLimits

	store *store[K, V]
	fifo  *deltaFIFO[K, V]
	refl  *reflector[V]
	proc  *processor[K, V]

	started atomic.Bool
	stopped atomic.Bool

	evHint storeHint[V]     // the reflector goroutine's buffer for an event's hint
	handed int              // items of the list being read already queued by pages; -1: none will be
	writer writeBatch[K, V] // the processing goroutine's state for applying batches

	synced   atomic.Bool
	syncedCh chan struct{}
	restored atomic.Bool // the cache holds a restored state that no list has replaced yet
	savedGen uint64      // the store generation last saved (Options.Persist)
	sourceID string      // the source's SourceID, once it answered (Options.Persist)

	warnMu sync.Mutex
	warned map[string]warned // by kind: see warnLimited

	// read-your-writes: the newest watermark applied, and a channel closed when it moves
	wmMu     sync.Mutex
	wm       watermark
	wmCh     chan struct{}
	wmHasSet bool

	done chan struct{} // closed when Run returns: Done
}

// New returns an informer over lw. It does nothing until Run. It returns an error for a
// nil lw, a ListerWatcherFuncs with a nil function, or a nil Options.Key.
func New[K comparable, V any](lw ListerWatcher[V], opts Options[K, V]) (*Informer[K, V], error) {
	if lw == nil {
		return nil, errors.New("informer: New: nil ListerWatcher")
	}
	if err := checkFuncs(lw); err != nil {
		return nil, err
	}
	if opts.Key == nil {
		return nil, errors.New("informer: New: Options.Key is required")
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
	if opts.ProgressTimeout == 0 {
		opts.ProgressTimeout = 2 * time.Minute
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 10 * time.Second
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
	autoBatch := opts.MaxBatch <= 0
	if autoBatch {
		opts.MaxBatch = defaultBatch
	}
	st, err := newStore[K, V](opts.CompareKeys, opts.Indexers) // nil: K's natural order
	if err != nil {
		return nil, err
	}
	inf := &Informer[K, V]{
		autoBatch: autoBatch,
		opts:      opts,
		lw:        lw,
		logger:    opts.Logger.With("informer", opts.Name),
		store:     st,
		syncedCh:  make(chan struct{}),
		done:      make(chan struct{}),
		warned:    map[string]warned{},
	}
	inf.proc = newProcessor[K, V](opts.Clock, opts.ResyncPeriod, func(p *HandlerPanicError) {
		p.Informer = opts.Name
		inf.report(p)
	})
	inf.writer.report = inf.report
	if opts.Revision != nil {
		inf.writer.sameRevision = func(a, b V) bool { return opts.Revision(a) == opts.Revision(b) }
	} else if opts.Persist != nil {
		inf.writer.sameRevision = opts.Persist.Equal
	}
	inf.stats.ListDuration = histogram.New(histogram.DurationBuckets...)
	inf.stats.ListItems = histogram.New(histogram.ItemBuckets...)
	inf.stats.WatchDuration = histogram.New(histogram.WatchDurationBuckets...)
	inf.cmpRev, _ = lw.(RevisionComparer)
	inf.fifo = newDeltaFIFO[K, V](st, opts.MaxPending)
	inf.fifo.wholeFirst = true
	inf.refl = newReflector[V](lw, inf, reflectorConfig{
		name:            opts.Name,
		pageSize:        opts.PageSize,
		minWatchTimeout: opts.MinWatchTimeout,
		progressTimeout: max(opts.ProgressTimeout, 0),
		backoff:         opts.Backoff.withDefaults(),
		clock:           opts.Clock,
		logger:          inf.logger,
		report:          inf.report,
		stats:           &inf.stats,
	})
	if opts.Transform != nil {
		inf.refl.setTransform(inf.transform)
	}
	if er, ok := lw.(ErrorReporting); ok {
		er.ReportErrorsTo(inf.ReportError)
	}
	return inf, nil
}

// checkFuncs refuses a ListerWatcherFuncs with a nil function, which would crash the
// informer at its first list or watch.
func checkFuncs[V any](lw ListerWatcher[V]) error {
	var f ListerWatcherFuncs[V]
	switch v := lw.(type) {
	case ListerWatcherFuncs[V]:
		f = v
	case *ListerWatcherFuncs[V]:
		if v == nil {
			return errors.New("informer: New: nil *ListerWatcherFuncs")
		}
		f = *v
	default:
		return nil
	}
	if f.ListFunc == nil || f.WatchFunc == nil {
		return errors.New("informer: New: ListerWatcherFuncs needs both ListFunc and WatchFunc")
	}
	return nil
}

// Name returns the informer's name.
func (inf *Informer[K, V]) Name() string { return inf.opts.Name }

// ErrStopped is returned for operations on an informer that has stopped.
var ErrStopped = errors.New("informer: stopped")

// ErrAlreadyStarted is returned by a second Run.
var ErrAlreadyStarted = errors.New("informer: already started")

// Run lists and watches the source and delivers notifications until ctx is done; then it
// stops every goroutine it started, handlers included, and returns. It waits at most
// Options.StopTimeout for handler calls in progress: a handler that does not return is
// named in a Warn log and its goroutine left running until its call returns. It returns
// ErrAlreadyStarted if the informer has run before.
func (inf *Informer[K, V]) Run(ctx context.Context) error {
	if !inf.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	inf.proc.start()
	if inf.opts.Persist != nil {
		inf.restore(ctx)
	}

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); inf.processLoop() }()
	go func() { defer wg.Done(); inf.refl.run(ctx) }()
	if inf.opts.Persist != nil {
		wg.Add(1)
		go func() { defer wg.Done(); inf.persistLoop(ctx) }()
	}
	<-ctx.Done()
	inf.fifo.close()
	inf.proc.abortWaits()
	wg.Wait()
	if inf.opts.Persist != nil {
		inf.save(context.WithoutCancel(ctx)) // the pipeline has stopped: the last state
	}

	// The handlers stop strictly after the pipeline that feeds them.
	inf.stopped.Store(true)
	inf.proc.stop(inf.opts.StopTimeout, func(handler string, key K) {
		inf.logger.Warn("a handler did not return after the informer stopped; Run returns, and the handler's goroutine stays until its call returns",
			"handler", handler, "key", key, "stop_timeout", inf.opts.StopTimeout)
	})
	inf.wmMu.Lock()
	if inf.wmCh != nil {
		close(inf.wmCh)
		inf.wmCh = nil
	}
	inf.wmMu.Unlock()
	close(inf.done)
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
	if oe := (*ObjectError)(nil); errors.As(err, &oe) && oe.Informer == "" {
		oe.Informer = inf.opts.Name
	}
	kind := errorKind(err)
	inf.stats.countError(kind)
	inf.logger.Debug("informer error", "kind", kind, "err", err)
	if inf.opts.ErrorHandler != nil {
		inf.opts.ErrorHandler(err)
		return
	}
	// With no handler an error must still show: the reflector logs source failures at
	// Warn itself; every other kind is logged here, at most once per kind per warnEvery.
	if !errors.As(err, new(*opError)) {
		inf.warnLimited(kind, err)
	}
}

// warnEvery is the least time between two Warn lines of one kind of object error, with
// no ErrorHandler set.
const warnEvery = 10 * time.Second

// warnLimited logs err, of the given kind, at Warn unless an error of that kind was
// logged within warnEvery; the line counts the errors of that kind not logged since.
func (inf *Informer[K, V]) warnLimited(kind string, err error) {
	now := inf.opts.Clock.Now()
	inf.warnMu.Lock()
	w := inf.warned[kind]
	if !w.at.IsZero() && now.Sub(w.at) < warnEvery {
		w.suppressed++
		inf.warned[kind] = w
		inf.warnMu.Unlock()
		return
	}
	inf.warned[kind] = warned{at: now}
	inf.warnMu.Unlock()
	inf.logger.Warn("informer error (set Options.ErrorHandler to handle these)", "kind", kind, "err", err, "suppressed", w.suppressed)
}

// warned is when a kind of error was last logged and how many were not logged since.
type warned struct {
	at         time.Time
	suppressed int
}

// errorKind sorts a reported error into the kinds Stats counts and the metrics' error
// counter labels: "key", "index", "transform", "decode", "source", "handler_panic" or
// "other". It is the one place that classifies reported errors.
func errorKind(err error) string {
	var oe *ObjectError
	switch {
	case errors.As(err, &oe):
		switch oe.Op {
		case "key", "transform":
			return oe.Op
		}
		return "index"
	case errors.As(err, new(*HandlerPanicError)):
		return "handler_panic"
	case errors.Is(err, ErrDecode):
		return "decode"
	case errors.Is(err, ErrBadInput):
		return "source"
	}
	return "other"
}

// --- the sink the reflector writes to ---

// transform applies Options.Transform; false means the object failed and was reported.
func (inf *Informer[K, V]) transform(obj V) (V, bool) {
	out, err := safeCall(inf.opts.Transform, obj)
	if err != nil {
		inf.report(&ObjectError{Op: "transform", Object: obj, Err: err})
		return out, false
	}
	return out, true
}

// Key returns obj's key as the informer computes it (Options.Key; a panic is an error).
// Pass inf.Key wherever another part of the program asks for the same key function (an
// httpsource.Server, a controller), so that it is written once.
func (inf *Informer[K, V]) Key(obj V) (K, error) { return inf.key(obj) }

func (inf *Informer[K, V]) key(obj V) (K, error) {
	k, err := safeCall(inf.opts.Key, obj)
	if err != nil {
		return k, &ObjectError{Informer: inf.opts.Name, Op: "key", Object: obj, Err: err}
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
	items = items[max(inf.handed, 0):] // the pages queued already
	inf.handed = 0
	keys, objs := inf.keysOf(items)
	inf.stats.Relists.Add(1)
	inf.restored.Store(false)
	return inf.fifo.replace(keys, objs, rev)
}

// listPage is a page of a list, not its last, read by the reflector. A first list that
// finds the queue and the cache empty is queued page by page, so that the store loads a
// page while the next is read; otherwise the page comes again with the whole list in
// replace.
func (inf *Informer[K, V]) listPage(items []V) {
	if inf.handed < 0 || !inf.fifo.takesPages() {
		inf.handed = -1 // the list comes whole
		return
	}
	n := len(items)
	keys, objs := inf.keysOf(items)
	if !inf.fifo.firstPage(keys, objs) {
		inf.handed = -1 // closed
		return
	}
	inf.handed += n
}

// listAborted says that the list whose pages listPage saw failed, at revision rev; the
// next list starts afresh.
func (inf *Informer[K, V]) listAborted(rev string) {
	if inf.handed > 0 {
		inf.fifo.abortFirst(rev)
	}
	inf.handed = 0
}

// keysOf computes the key of every item, reporting and dropping the items whose key
// fails; it reuses items for the objects it returns.
func (inf *Informer[K, V]) keysOf(items []V) ([]K, []V) {
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
	return keys, objs
}

func (inf *Informer[K, V]) event(ev Event[V], more bool) error {
	obj := ev.Object
	k, err := inf.key(obj)
	if err != nil {
		return err
	}
	var t deltaType
	switch ev.Type {
	case Added:
		t = deltaAdded
	case Modified:
		t = deltaUpdated
	case Deleted:
		t = deltaDeleted
	}
	// The store prepares the object here rather than on the writer's goroutine, the
	// pipeline's busiest. If it fails, the writer tries again and reports the error.
	hint := &inf.evHint
	if !inf.store.prepare(hint, obj) {
		hint = nil
	}
	return inf.fifo.addPrepared(t, k, obj, ev.Revision, more, hint)
}

func (inf *Informer[K, V]) bookmark(rev string) { inf.fifo.bookmark(rev) }

func (inf *Informer[K, V]) resync() error { return inf.fifo.resync() }

func (inf *Informer[K, V]) resyncPeriod() time.Duration { return inf.proc.resyncPeriod() }

func (inf *Informer[K, V]) shouldResync() bool { return inf.proc.shouldResync() }

// --- applying batches ---

// processLoop pops batches from the queue, applies each to the cache under one write,
// publishes it, and hands its notifications to the handlers: the cache is level with or
// ahead of every notification a handler receives.
func (inf *Informer[K, V]) processLoop() {
	var batch []popped[K, V]
	for {
		var wm watermark
		var synced bool
		var err error
		keys, deltas := inf.batchLimits()
		batch, wm, synced, err = inf.fifo.popBatch(batch[:0], keys, deltas)
		if err != nil {
			return
		}
		rev := ""
		if wm.inclusive {
			rev = wm.rev
		}
		inf.proc.deliver(func(notes []notification[K, V]) []notification[K, V] {
			notes, applied, objects := inf.store.applyBatch(&inf.writer, batch, rev, notes)
			inf.stats.Objects.Store(int64(objects))
			inf.stats.Applied.Add(uint64(applied))
			inf.fifo.finishBatch(batch)
			if synced {
				// The first list is in. If it was written in an order that left the trees'
				// nodes half full (see store.applyFirstList), they are rebuilt before the
				// handlers have it, so that a synced informer's cache is in its steady shape;
				// a sorted list was written densely and is not rebuilt.
				inf.store.compactIfLoose()
			}
			return notes
		}, marks{synced: synced, rev: rev}, func() {
			// Once the handlers have the batch queued: after WaitForRevision or a sync,
			// every notification up to there is on its way to every handler.
			inf.advance(wm)
			if synced {
				inf.synced.Store(true)
				close(inf.syncedCh)
			}
		})
	}
}

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
func (inf *Informer[K, V]) batchLimits() (keys, deltas int) {
	if !inf.autoBatch || !inf.store.reading.Load() {
		return inf.opts.MaxBatch, math.MaxInt
	}
	room := inf.proc.coalesceRoom()
	if room == math.MaxInt {
		return defaultReadingBatch, math.MaxInt
	}
	if room < defaultBatch {
		return defaultBatch, math.MaxInt
	}
	return defaultReadingBatch, room
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
// replay is delivered. It fails with ErrStopped after the informer stopped.
func (inf *Informer[K, V]) AddHandler(h Handler[V], opts HandlerOptions) (*Registration, error) {
	if h == nil {
		return nil, fmt.Errorf("informer %q: AddHandler: nil handler", inf.opts.Name)
	}
	// The replay runs between two batches: the cache as it is now.
	return inf.proc.add(h, opts, func() ([]notification[K, V], marks) {
		sn := inf.store.snapshot()
		replay := make([]notification[K, V], 0, sn.Len())
		for k, v := range sn.All() {
			replay = append(replay, notification[K, V]{kind: notifyAdd, key: k, new: v, initial: true})
		}
		m := marks{synced: inf.synced.Load()}
		if sn.exact {
			m.rev = sn.revision
		}
		return replay, m
	})
}

// RemoveHandler unregisters a handler and waits until its goroutine has returned (a call
// in progress finishes; queued notifications are dropped). Do not call it from the
// handler itself. It reports whether the handler was registered.
func (inf *Informer[K, V]) RemoveHandler(reg *Registration) bool { return inf.proc.remove(reg) }

// --- sync and revisions ---

// Synced returns a channel closed once the initial list is in the cache (see
// Stats.Synced for what counts as one after a warm restart). It is the one way to wait
// for an informer: select on it beside a context or a timer, or use the package's
// WaitForCacheSync to wait for several informers and registrations at once, with an
// error that says why a cache did not sync. Handlers may still be delivering the list
// when it closes: wait for a Registration's Synced for that.
func (inf *Informer[K, V]) Synced() <-chan struct{} { return inf.syncedCh }

// Done returns a channel closed once the informer has stopped: when Run returns, after
// every handler goroutine has returned. A program that must act on the stop (the metrics
// package removes the informer's series) selects on it.
func (inf *Informer[K, V]) Done() <-chan struct{} { return inf.done }

// ErrRevisionsUnordered is returned by WaitForRevision for a source that does not
// implement RevisionComparer.
var ErrRevisionsUnordered = errors.New("informer: the source's revisions are not ordered")

// RevisionComparer returns the source's RevisionComparer, or nil when the source's
// revisions are not ordered (then WaitForRevision fails with ErrRevisionsUnordered). A
// program that re-serves the cache (fanout.Server) uses it to order the source's
// revisions as the informer does.
func (inf *Informer[K, V]) RevisionComparer() RevisionComparer { return inf.cmpRev }

// WaitForRevision blocks until every change up to rev is visible in the cache (and so to
// every read made after it returns), or ctx is done. By then the notifications of those
// changes are queued to every handler (not necessarily delivered). Use it for
// read-your-writes: write to the source, take the revision of the write, wait for it, read
// the cache. It needs a source that implements RevisionComparer.
func (inf *Informer[K, V]) WaitForRevision(ctx context.Context, rev string) error {
	if inf.cmpRev == nil {
		return fmt.Errorf("informer %q: WaitForRevision: %w", inf.opts.Name, ErrRevisionsUnordered)
	}
	if _, err := inf.cmpRev.CompareRevisions(rev, rev); err != nil {
		// The caller's revision is at fault, not the source: not ErrBadInput.
		return fmt.Errorf("informer %q: WaitForRevision(%q): not a revision of this source: %v", inf.opts.Name, rev, err)
	}
	for {
		inf.wmMu.Lock()
		if inf.wmHasSet {
			c, err := inf.cmpRev.CompareRevisions(rev, inf.wm.rev)
			if err != nil {
				at := inf.wm.rev
				inf.wmMu.Unlock()
				return fmt.Errorf("informer %q: WaitForRevision(%q): comparing with the cache's revision %q: %w", inf.opts.Name, rev, at, err)
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

// AddIndexers adds indexes, built at once from the cached objects; it may be called while
// the informer runs. A name already in use is an error (ErrIndexExists), and so is an
// index function failing for a cached object; either way nothing is added.
func (inf *Informer[K, V]) AddIndexers(indexers Indexers[V]) error {
	if inf.stopped.Load() {
		return ErrStopped
	}
	return inf.store.addIndexers(indexers)
}

// HandlerPanicError reports a handler call that panicked. The panic was recovered and the
// notification skipped; the handler goes on with the next one.
type HandlerPanicError struct {
	// Informer and Handler name the informer and the handler (HandlerOptions.Name).
	Informer, Handler string
	// Key is the key of the object the handler was called for.
	Key any
	// Value is what was passed to panic.
	Value any
	// Stack is the handler goroutine's stack where the panic was recovered.
	Stack []byte
}

// Error says which handler panicked on which key, and with what; the stack is in Stack.
func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("informer %q: handler %q panicked on key %v (notification skipped): %v", e.Informer, e.Handler, e.Key, e.Value)
}

// Stats returns the informer's state and counters as they are now: whether it has synced,
// the revision it received last, its last error, its handlers, and what it has done since
// it was created. Each field is read atomically, but not all at one instant: a change in
// progress may show in one field and not yet in another. It takes no lock the informer's
// goroutines hold for long and allocates the copies of the histograms and of the handler
// list; poll it at a metrics scrape's pace, not per event.
func (inf *Informer[K, V]) Stats() Stats {
	s := inf.stats.snapshot()
	s.Synced = inf.synced.Load()
	s.Restored = inf.restored.Load()
	s.ReceivedRevision = inf.refl.lastSyncRevision()
	s.LastErrorAt, s.LastError = inf.refl.lastError()
	s.Handlers = inf.proc.handlers()
	return s
}

// counters are the live counters behind Stats, updated atomically by the informer's
// goroutines.
type counters struct {
	Lists, ListErrors    atomic.Uint64
	Watches, WatchErrors atomic.Uint64
	Relists              atomic.Uint64
	ConsistentLists      atomic.Uint64
	Expirations          atomic.Uint64
	Added, Modified      atomic.Uint64
	Deleted, Bookmarks   atomic.Uint64
	Objects              atomic.Int64
	KeyErrors            atomic.Uint64
	IndexErrors          atomic.Uint64
	TransformErrors      atomic.Uint64
	DecodeErrors         atomic.Uint64
	SourceErrors         atomic.Uint64
	HandlerPanics        atomic.Uint64
	OtherErrors          atomic.Uint64
	Applied              atomic.Uint64
	ListStarted          atomic.Int64 // UnixNano on the informer's clock; 0: no list in progress

	ListDuration  *histogram.Histogram
	ListItems     *histogram.Histogram
	WatchDuration *histogram.Histogram
}

func (s *counters) snapshot() Stats {
	return Stats{
		Lists: s.Lists.Load(), ListErrors: s.ListErrors.Load(),
		Watches: s.Watches.Load(), WatchErrors: s.WatchErrors.Load(),
		Relists: s.Relists.Load(), ConsistentLists: s.ConsistentLists.Load(), Expirations: s.Expirations.Load(),
		Added: s.Added.Load(), Modified: s.Modified.Load(), Deleted: s.Deleted.Load(), Bookmarks: s.Bookmarks.Load(),
		Objects:   s.Objects.Load(),
		KeyErrors: s.KeyErrors.Load(), IndexErrors: s.IndexErrors.Load(), TransformErrors: s.TransformErrors.Load(),
		DecodeErrors: s.DecodeErrors.Load(), SourceErrors: s.SourceErrors.Load(),
		HandlerPanics: s.HandlerPanics.Load(), OtherErrors: s.OtherErrors.Load(),
		Applied:       s.Applied.Load(),
		ListStarted:   unixNano(s.ListStarted.Load()),
		ListDuration:  Histogram(s.ListDuration.Snapshot()),
		ListItems:     Histogram(s.ListItems.Snapshot()),
		WatchDuration: Histogram(s.WatchDuration.Snapshot()),
	}
}

// unixNano is the time of ns, or the zero time for 0.
func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func (s *counters) countEvent(t EventType) {
	switch t {
	case Added:
		s.Added.Add(1)
	case Modified:
		s.Modified.Add(1)
	case Deleted:
		s.Deleted.Add(1)
	}
}

// countError counts a reported error of the given kind (see errorKind).
func (s *counters) countError(kind string) {
	switch kind {
	case "key":
		s.KeyErrors.Add(1)
	case "transform":
		s.TransformErrors.Add(1)
	case "index":
		s.IndexErrors.Add(1)
	case "handler_panic":
		s.HandlerPanics.Add(1)
	case "decode":
		s.DecodeErrors.Add(1)
	case "source":
		s.SourceErrors.Add(1)
	default:
		s.OtherErrors.Add(1)
	}
}

// --- warm restart (Options.Persist) ---

// persistedCache describes this informer's cache to its Persister. It asks a
// SourceIdentifier who it is until it answers (at most 30 s a call).
func (inf *Informer[K, V]) persistedCache(ctx context.Context) (PersistedCache, error) {
	names := make([]string, 0, len(inf.opts.Indexers))
	for name := range inf.opts.Indexers {
		names = append(names, name)
	}
	slices.Sort(names)
	if id, ok := inf.lw.(SourceIdentifier); ok && inf.sourceID == "" {
		idCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		if inf.sourceID, err = id.SourceID(idCtx); err != nil {
			return PersistedCache{}, fmt.Errorf("asking the source for its identity: %w", err)
		}
	}
	t, ptrs := reflect.TypeFor[V](), ""
	for t.Kind() == reflect.Pointer && t.Name() == "" {
		t, ptrs = t.Elem(), ptrs+"*"
	}
	typ := ptrs + t.String()
	if t.PkgPath() != "" {
		typ = ptrs + t.PkgPath() + "." + t.Name()
	}
	return PersistedCache{Informer: inf.opts.Name, Type: typ, Source: inf.sourceID, Indexes: names}, nil
}

// restore loads the saved state, if the Persister has one it accepts, into the cache in
// one write, tells the handlers of each object as initial adds, marks the informer synced
// and makes the reflector watch from the state's revision. Otherwise the informer starts
// cold. It runs before the pipeline starts.
func (inf *Informer[K, V]) restore(ctx context.Context) {
	var keys []K
	var objs []V
	add := func(obj V) {
		k, err := inf.key(obj)
		if err != nil {
			inf.report(err)
			return
		}
		keys = append(keys, k)
		objs = append(objs, obj)
	}
	desc, err := inf.persistedCache(ctx)
	var rev string
	if err == nil {
		rev, err = inf.opts.Persist.Load(ctx, desc, add)
	}
	switch {
	case errors.Is(err, ErrNoPersistedState):
		inf.logger.Info("no persisted cache: listing", "reason", err)
		return
	case err == nil && rev == "":
		err = errors.New("the saved state has no revision")
	}
	if err != nil {
		if ctx.Err() == nil {
			// Reported like any error: to the ErrorHandler, or at Warn without one.
			inf.report(fmt.Errorf("informer %q: persisted cache not used, listing instead: %w", inf.opts.Name, err))
		}
		return
	}
	// The revision is set before the sync is published (Stats.ReceivedRevision is never ""
	// once the informer is synced), and the reflector, not yet running, resumes from it.
	inf.refl.resumeFrom(rev)
	// A Block handler stalled on the initial adds must not hold a stop.
	stop := context.AfterFunc(ctx, inf.proc.abortWaits)
	defer stop()
	inf.proc.deliver(func(notes []notification[K, V]) []notification[K, V] {
		notes = inf.store.load(keys, objs, rev, inf.report, notes)
		inf.store.compact() // loaded in key order: half-full nodes
		inf.stats.Objects.Store(int64(len(notes)))
		inf.fifo.markRestored(rev)
		inf.restored.Store(true)
		return notes
	}, marks{synced: true, rev: rev}, func() {
		// As after a batch: the revision and the sync are published once the handlers
		// have the restored objects queued.
		inf.advance(watermark{rev: rev, inclusive: true})
		inf.synced.Store(true)
		close(inf.syncedCh)
	})
	inf.savedGen = inf.store.generation() // what was loaded need not be written again
	inf.logger.Info("restored the persisted cache: resuming the watch", "revision", rev, "objects", len(keys))
}

// persistLoop saves the cache every Persister.Interval until ctx is done.
func (inf *Informer[K, V]) persistLoop(ctx context.Context) {
	if d := inf.opts.Persist.Interval(); d > 0 {
		every(ctx, inf.opts.Clock, d, func() bool { inf.save(ctx); return true })
	}
}

// save saves the cache if it changed since the last save and is exactly the source's
// state at its revision (no change of a later revision applied, none of an earlier one
// still queued); otherwise it leaves the saved state as it is. Called from one goroutine
// at a time.
func (inf *Informer[K, V]) save(ctx context.Context) {
	if !inf.synced.Load() {
		return
	}
	sn := inf.store.snapshot()
	if sn.gen == inf.savedGen {
		return
	}
	if !sn.exact || sn.revision == "" {
		inf.logger.Debug("cache not saved: changes are still queued", "revision", sn.revision)
		return
	}
	desc, err := inf.persistedCache(ctx)
	if err == nil {
		err = inf.opts.Persist.Save(ctx, desc, sn)
	}
	if err != nil {
		inf.report(fmt.Errorf("informer %q: saving the cache: %w", inf.opts.Name, err))
		return
	}
	inf.savedGen = sn.gen
}
