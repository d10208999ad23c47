package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"time"
)

// warm is the informer's warm restart (Options.Persist): the saved state loaded before
// the pipeline starts, and the cache saved while it runs.
type warm[K comparable, V any] struct {
	opts       Options[K, V]
	lw         ListerWatcher[V]
	logger     *slog.Logger
	report     func(error)
	key        func(V) (K, error) // the sink's Key
	resumeFrom func(rev string)   // the reflector's ResumeFrom
	abortWaits func()             // the processor's AbortWaits
	write      warmWriter[K, V]
	store      warmStore[K, V]

	savedGen uint64 // the store generation last saved
	sourceID string // the source's SourceID, once it answered
}

// warmWriter is what the warm restart uses of the writer: it applies a loaded state and
// says whether the informer synced.
type warmWriter[K comparable, V any] interface {
	Restore(keys []K, objs []V, rev string, report func(error))
	HasSynced() bool
}

// warmStore is what the warm restart uses of the store: its generation, and its state
// when it is exactly a revision of the source.
type warmStore[K comparable, V any] interface {
	Generation() uint64
	Exact() (sn *Snapshot[K, V], rev string, gen uint64)
}

// newWarm returns the warm restart of an informer: key is its sink's Key, resumeFrom its
// reflector's ResumeFrom and abortWaits its processor's AbortWaits.
func newWarm[K comparable, V any](opts Options[K, V], lw ListerWatcher[V], logger *slog.Logger, report func(error), key func(V) (K, error), resumeFrom func(string), abortWaits func(), write warmWriter[K, V], st warmStore[K, V]) *warm[K, V] {
	return &warm[K, V]{opts: opts, lw: lw, logger: logger, report: report, key: key, resumeFrom: resumeFrom, abortWaits: abortWaits, write: write, store: st}
}

// persistedCache describes this informer's cache to its Persister. It asks a
// SourceIdentifier who it is until it answers (at most 30 s a call).
func (w *warm[K, V]) persistedCache(ctx context.Context) (PersistedCache, error) {
	names := make([]string, 0, len(w.opts.Indexers))
	for name := range w.opts.Indexers {
		names = append(names, name)
	}
	slices.Sort(names)
	if id, ok := w.lw.(SourceIdentifier); ok && w.sourceID == "" {
		idCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		if w.sourceID, err = id.SourceID(idCtx); err != nil {
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
	return PersistedCache{Informer: w.opts.Name, Type: typ, Source: w.sourceID, Indexes: names}, nil
}

// restore loads the saved state, if the Persister has one it accepts, into the cache in
// one write, tells the handlers of each object as initial adds, marks the informer synced
// and makes the reflector watch from the state's revision. Otherwise the informer starts
// cold. It runs before the pipeline starts.
func (w *warm[K, V]) Restore(ctx context.Context) {
	var keys []K
	var objs []V
	add := func(obj V) {
		k, err := w.key(obj)
		if err != nil {
			w.report(err)
			return
		}
		keys = append(keys, k)
		objs = append(objs, obj)
	}
	desc, err := w.persistedCache(ctx)
	var rev string
	if err == nil {
		rev, err = w.opts.Persist.Load(ctx, desc, add)
	}
	switch {
	case errors.Is(err, ErrNoPersistedState):
		w.logger.Info("no persisted cache: listing", "reason", err)
		return
	case err == nil && rev == "":
		err = errors.New("the saved state has no revision")
	}
	if err != nil {
		if ctx.Err() == nil {
			// Reported like any error: to the ErrorHandler, or at Warn without one.
			w.report(fmt.Errorf("informer %q: persisted cache not used, listing instead: %w", w.opts.Name, err))
		}
		return
	}
	// The revision is set before the sync is published (LastSyncRevision is never ""
	// once the informer is synced), and the reflector, not yet running, resumes from it.
	w.resumeFrom(rev)
	// A Block handler stalled on the initial adds must not hold a stop.
	stop := context.AfterFunc(ctx, w.abortWaits)
	defer stop()
	w.write.Restore(keys, objs, rev, w.report)
	w.savedGen = w.store.Generation() // what was loaded need not be written again
	w.logger.Info("restored the persisted cache: resuming the watch", "revision", rev, "objects", len(keys))
}

// persistLoop saves the cache every Persister.Interval until ctx is done.
func (w *warm[K, V]) Loop(ctx context.Context) {
	if d := w.opts.Persist.Interval(); d > 0 {
		every(ctx, w.opts.Clock, d, func() bool { w.Save(ctx); return true })
	}
}

// save saves the cache if it changed since the last save and is exactly the source's
// state at its revision (no change of a later revision applied, none of an earlier one
// still queued); otherwise it leaves the saved state as it is. Called from one goroutine
// at a time.
func (w *warm[K, V]) Save(ctx context.Context) {
	if !w.write.HasSynced() {
		return
	}
	sn, rev, gen := w.store.Exact()
	if gen == w.savedGen {
		return
	}
	if rev == "" {
		w.logger.Debug("cache not saved: changes are still queued", "revision", sn.Revision())
		return
	}
	desc, err := w.persistedCache(ctx)
	if err == nil {
		err = w.opts.Persist.Save(ctx, desc, sn)
	}
	if err != nil {
		w.report(fmt.Errorf("informer %q: saving the cache: %w", w.opts.Name, err))
		return
	}
	w.savedGen = gen
}
