package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync/atomic"
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
	restored   func() bool        // the queue's Restored: no list replaced the restored state
	write      warmWriter[K, V]
	store      warmStore[K, V]

	savedGen    uint64      // the store generation last saved
	sourceID    string      // the source's SourceID, once it answered
	unconfirmed atomic.Bool // the restored state awaits Confirm
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
// reflector's ResumeFrom, abortWaits its processor's AbortWaits and restored its queue's
// Restored.
func newWarm[K comparable, V any](opts Options[K, V], lw ListerWatcher[V], logger *slog.Logger, report func(error), key func(V) (K, error), resumeFrom func(string), abortWaits func(), restored func() bool, write warmWriter[K, V], st warmStore[K, V]) *warm[K, V] {
	return &warm[K, V]{opts: opts, lw: lw, logger: logger, report: report, key: key, resumeFrom: resumeFrom, abortWaits: abortWaits, restored: restored, write: write, store: st}
}

// identityWait bounds the first identity read of a warm start: past it, the informer
// says at Warn that the source does not answer, and either waits for it or serves the
// saved cache unconfirmed (Options.ServeUnconfirmed).
const identityWait = 3 * time.Second

// describe describes this informer's cache to its Persister, with the source identity
// known so far ("" before the source answered, or for a source without one).
func (w *warm[K, V]) describe() PersistedCache {
	names := make([]string, 0, len(w.opts.Indexers))
	for name := range w.opts.Indexers {
		names = append(names, name)
	}
	slices.Sort(names)
	t, ptrs := reflect.TypeFor[V](), ""
	for t.Kind() == reflect.Pointer && t.Name() == "" {
		t, ptrs = t.Elem(), ptrs+"*"
	}
	typ := ptrs + t.String()
	if t.PkgPath() != "" {
		typ = ptrs + t.PkgPath() + "." + t.Name()
	}
	return PersistedCache{Informer: w.opts.Name, Type: typ, Source: w.sourceID, Indexes: names}
}

// identify asks a SourceIdentifier who it is, bounded by d (the source's own request
// timeout bounds it too); "" and nil for a source without identity.
func (w *warm[K, V]) identify(ctx context.Context, d time.Duration) (string, error) {
	id, ok := w.lw.(SourceIdentifier)
	if !ok {
		return "", nil
	}
	idCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s, err := id.SourceID(idCtx)
	if err != nil {
		return "", fmt.Errorf("asking the source for its identity: %w", err)
	}
	return s, nil
}

// untilAnswered calls try, then again every Options.Backoff.Initial (800 ms by default)
// while it fails with an error that does not match ErrExpired (the source does not
// answer), until ctx is done. It returns try's last error, or ctx's.
func (w *warm[K, V]) untilAnswered(ctx context.Context, try func() error) error {
	err := try()
	period := w.opts.Backoff.Initial
	if period <= 0 {
		period = 800 * time.Millisecond
	}
	if err != nil && !errors.Is(err, ErrExpired) {
		every(ctx, w.opts.Clock, period, func() bool {
			w.logger.Debug("the source still does not answer", "err", err)
			err = try()
			return err != nil && !errors.Is(err, ErrExpired)
		})
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// restore loads the saved state, if the Persister has one it accepts and the source
// proves it is its own state at the saved revision (HistoryProver), into the cache in
// one write, tells the handlers of each object as initial adds, marks the informer synced
// and makes the reflector watch from the state's revision. Otherwise the informer starts
// cold. It runs before the pipeline starts.
//
// A source that does not answer within identityWait is named at Warn; the informer then
// waits for it, or, with Options.ServeUnconfirmed and a Persister that can say which
// source a state was saved from (SavedSource), restores the state unconfirmed and leaves
// the check to Confirm.
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
	id, err := w.identify(ctx, identityWait)
	saved, canServe := w.opts.Persist.(interface {
		SavedSource(ctx context.Context, desc PersistedCache) (string, error)
	})
	unconfirmed := false
	if err != nil && ctx.Err() == nil {
		if w.opts.ServeUnconfirmed && canServe {
			w.logger.Warn(fmt.Sprintf("informer %q: the source does not answer; serving the saved cache, not yet confirmed by the source (Stats.Unconfirmed), until it does: check that the source runs and that its address is right", w.opts.Name), "err", err)
			id, err = saved.SavedSource(ctx, w.describe())
			unconfirmed = err == nil
		} else {
			w.logger.Warn(fmt.Sprintf("informer %q: the source does not answer; waiting for it before using the saved cache: check that the source runs and that its address is right (Options.ServeUnconfirmed serves the saved cache meanwhile)", w.opts.Name), "err", err)
			err = w.untilAnswered(ctx, func() (err error) {
				id, err = w.identify(ctx, 30*time.Second)
				return err
			})
			if err == nil {
				w.logger.Info("the source answers: loading the saved cache")
			}
		}
	}
	var rev string
	if err == nil {
		w.sourceID = id
		rev, err = w.opts.Persist.Load(ctx, w.describe(), add)
	}
	switch {
	case errors.Is(err, ErrNoPersistedState):
		w.logger.Info("no persisted cache: listing", "reason", err)
		return
	case err == nil && rev == "":
		err = errors.New("the saved state has no revision")
	case err == nil && !unconfirmed:
		err = w.prove(ctx, rev, objs)
		if errors.Is(err, errUnprovable) && w.opts.ServeUnconfirmed {
			w.logger.Info("the source has compacted the saved revision, so it cannot prove the saved cache: serving it unconfirmed (Stats.Unconfirmed) until a list replaces it", "revision", rev, "err", err)
			unconfirmed, err = true, nil
		}
	}
	if errors.Is(err, errUnprovable) {
		w.logger.Info("the source has compacted the saved revision, so it cannot prove the saved cache: listing instead", "revision", rev, "err", err)
		return
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
	w.unconfirmed.Store(unconfirmed)
	// A Block handler stalled on the initial adds must not hold a stop.
	stop := context.AfterFunc(ctx, w.abortWaits)
	defer stop()
	w.write.Restore(keys, objs, rev, w.report)
	w.savedGen = w.store.Generation() // what was loaded need not be written again
	w.logger.Info("restored the persisted cache: resuming the watch", "revision", rev, "objects", len(keys), "unconfirmed", unconfirmed)
}

// errUnprovable marks a proof the source could not give because it has compacted the
// saved revision. Such a state is not restored as proven: a source restored from a backup
// with its revisions bumped and marked compacted has compacted every revision of the
// history it left, so the saved state may be another history's.
var errUnprovable = errors.New("the source has compacted the saved revision and cannot prove the saved state")

// prove asks a HistoryProver whether objs are its state at rev. An expired rev is no
// proof: it returns an error matching errUnprovable and ErrExpired.
func (w *warm[K, V]) prove(ctx context.Context, rev string, objs []V) error {
	p, ok := w.lw.(HistoryProver)
	if !ok {
		return nil
	}
	revs := make([]string, len(objs))
	if w.opts.Revision != nil {
		for i, obj := range objs {
			revs[i] = w.opts.Revision(obj)
		}
	}
	err := p.ProveHistory(ctx, rev, revs)
	if err != nil && !errors.Is(err, ErrOtherHistory) && errors.Is(err, ErrExpired) {
		return fmt.Errorf("%w: %w", errUnprovable, err)
	}
	return err
}

// Unconfirmed reports whether the cache holds a restored state the source has not
// confirmed yet (Options.ServeUnconfirmed), and no list has replaced.
func (w *warm[K, V]) Unconfirmed() bool { return w.unconfirmed.Load() && w.restored() }

// Confirm checks a state restored unconfirmed, before the reflector resumes the watch:
// it asks the source, backing off while it does not answer, for its identity and the
// proof of the restored state. nil: confirmed (or nothing to confirm); an error: the
// state is not the source's (reported here), and the reflector lists instead.
func (w *warm[K, V]) Confirm(ctx context.Context) error {
	if !w.unconfirmed.Load() {
		return nil
	}
	err := w.untilAnswered(ctx, func() error {
		saved := w.sourceID
		id, err := w.identify(ctx, 30*time.Second)
		switch {
		case err != nil:
			return err
		case id != saved:
			w.sourceID = id
			return fmt.Errorf("%w: the saved cache is from source %q, the source now says it is %q", ErrOtherHistory, saved, id)
		}
		sn, rev, _ := w.store.Exact()
		var objs []V
		for _, obj := range sn.All() {
			objs = append(objs, obj)
		}
		return w.prove(ctx, rev, objs)
	})
	switch {
	case err == nil:
		w.unconfirmed.Store(false)
		w.logger.Info("the source confirmed the restored cache: resuming the watch")
	case errors.Is(err, errUnprovable):
		// Unconfirmed stays set until the list replaces the state (Stats.Restored).
		w.logger.Info("the source has compacted the restored cache's revision, so it cannot prove it: listing instead", "err", err)
	case ctx.Err() == nil:
		w.report(fmt.Errorf("informer %q: the restored cache is not the source's state, listing instead: %w", w.opts.Name, err))
	}
	return err
}

// persistLoop saves the cache every Persister.Interval until ctx is done.
func (w *warm[K, V]) Loop(ctx context.Context) {
	if d := w.opts.Persist.Interval(); d > 0 {
		every(ctx, w.opts.Clock, d, func() bool { w.Save(ctx); return true })
	}
}

// Save saves the cache if it changed since the last save and is exactly the source's
// state at its revision (no change of a later revision applied, none of an earlier one
// still queued); otherwise it leaves the saved state as it is. The source's identity is
// read again first. Called from one goroutine at a time.
func (w *warm[K, V]) Save(ctx context.Context) { w.save(ctx, true) }

// SaveLast is Save as the informer stops: under the identity the source gave last, if it
// gave one, so that a stop never waits for a source that is away (the pipeline has
// stopped: no change of another history can reach the cache any more).
func (w *warm[K, V]) SaveLast(ctx context.Context) { w.save(ctx, w.sourceID == "") }

func (w *warm[K, V]) save(ctx context.Context, identify bool) {
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
	if w.Unconfirmed() {
		return // the saved state is the one in the cache; nothing new is confirmed
	}
	// The identity is read again at each save (a cluster replaced under a running
	// informer saves under its own); a source that does not answer now keeps the one
	// it gave before.
	var err error
	if identify {
		var id string
		id, err = w.identify(ctx, identityWait)
		switch {
		case err == nil:
			w.sourceID = id
		case w.sourceID != "":
			err = nil
		}
	}
	if err == nil {
		err = w.opts.Persist.Save(ctx, w.describe(), sn)
	}
	if err != nil {
		w.report(fmt.Errorf("informer %q: saving the cache: %w", w.opts.Name, err))
		return
	}
	w.savedGen = gen
}
