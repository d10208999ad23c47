package informer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// sharedInformer is what a Factory runs: any *Informer[K, V].
type sharedInformer interface {
	Name() string
	Run(ctx context.Context) error
	Synced() <-chan struct{}
}

var _ sharedInformer = (*Informer[string, int])(nil)

// Factory shares one informer per source among many consumers, so that a
// collection is listed and watched once however many parts of a program read it. Its
// methods are safe for concurrent use. The zero value is not usable; call NewFactory.
//
// The factory holds its informers until Shutdown, stopped ones included (an informer
// whose Start context ended is still the one InformerFor returns, and is not run again);
// after Shutdown it holds none.
type Factory struct {
	mu        sync.Mutex
	informers map[string]sharedInformer
	started   map[string]bool
	ctx       context.Context // cancelled by Shutdown
	cancel    context.CancelFunc
	running   errgroup.Group // the started informers' Run calls
	shutdown  bool
}

// NewFactory returns an empty factory.
func NewFactory() *Factory {
	ctx, cancel := context.WithCancel(context.Background())
	return &Factory{
		informers: make(map[string]sharedInformer),
		started:   make(map[string]bool),
		ctx:       ctx,
		cancel:    cancel,
	}
}

// ErrFactoryShutdown is returned when registering with a factory that has shut down, and
// by its WaitForCacheSync once Shutdown has returned.
var ErrFactoryShutdown = errors.New("informer: factory shut down")

// InformerFor returns the factory's informer for the source identity id, building it with
// newInformer the first time. Later calls for the same id return the same informer
// and do not call newInformer, so the first registration's options win; asking for the
// same id with other type parameters is an error rather than a silent mismatch. An
// informer registered after Start runs at the next Start.
func InformerFor[K comparable, V any](f *Factory, id string, newInformer func() (*Informer[K, V], error)) (*Informer[K, V], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shutdown {
		return nil, ErrFactoryShutdown
	}
	if existing, ok := f.informers[id]; ok {
		inf, ok := existing.(*Informer[K, V])
		if !ok {
			return nil, fmt.Errorf("informer: factory already holds %q as %T, not %T", id, existing, inf)
		}
		return inf, nil
	}
	inf, err := newInformer()
	if err != nil {
		return nil, fmt.Errorf("informer: building %q: %w", id, err)
	}
	f.informers[id] = inf
	return inf, nil
}

// Start runs every registered informer that is not running yet, each until ctx is done or
// Shutdown is called. It does not block and may be called any number of times.
func (f *Factory) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shutdown {
		return
	}
	for id, inf := range f.informers {
		if f.started[id] {
			continue
		}
		f.started[id] = true
		runCtx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(f.ctx, cancel)
		f.running.Go(func() error {
			defer stop()
			defer cancel()
			if err := inf.Run(runCtx); err != nil {
				return fmt.Errorf("informer: factory: running %q: %w", id, err)
			}
			return nil
		})
	}
}

// WaitForCacheSync waits until every started informer has synced, or ctx is done; it
// returns nil when all synced, and otherwise WaitForCacheSync's error naming the others.
// Informers registered but not started are not waited for. Once Shutdown has returned it
// returns ErrFactoryShutdown: the factory has no informer left.
func (f *Factory) WaitForCacheSync(ctx context.Context) error {
	f.mu.Lock()
	if f.shutdown && f.informers == nil {
		f.mu.Unlock()
		return ErrFactoryShutdown
	}
	ids := make([]string, 0, len(f.started))
	for id := range f.started {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	started := make([]Syncer, len(ids))
	for i, id := range ids {
		started[i] = f.informers[id]
	}
	f.mu.Unlock()
	return WaitForCacheSync(ctx, started...)
}

// Syncer is anything that reports when it has synced: an *Informer (its cache holds the
// initial list) or a *Registration (its handler has been called for it).
type Syncer interface {
	// Synced returns a channel closed once synced.
	Synced() <-chan struct{}
}

// WaitForCacheSync waits until every one of syncers has synced, or ctx is done. It waits on
// channels, never polls. It returns nil when all synced; otherwise an error that wraps
// ctx's error and names each one that did not sync (by its Name, when it has one) with the
// last error its source reported, so that a caller can say why:
//
//	informer: not synced: "payments" (last error 2s ago: informer "payments": list: …): context deadline exceeded
//
// An informer whose Run has not been called a second after the wait began will never
// sync: WaitForCacheSync returns at once, naming it:
//
//	informer: never started: "payments": add it to the manager, or call its Run (or Factory.Start)
func WaitForCacheSync(ctx context.Context, syncers ...Syncer) error {
	grace := time.NewTimer(NeverStartedAfter)
	defer grace.Stop()
	var missing []Syncer
	for _, s := range syncers {
		select {
		case <-s.Synced():
			continue
		case <-ctx.Done():
		case <-grace.C:
			if idle := neverStarted(syncers); len(idle) > 0 {
				return &notSyncedError{missing: idle}
			}
			select {
			case <-s.Synced():
				continue
			case <-ctx.Done():
			}
		}
		select {
		case <-s.Synced():
		default:
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &notSyncedError{missing: missing, ctxErr: ctx.Err()}
}

// NeverStartedAfter is how long WaitForCacheSync, and a controller waiting for its
// informers, give an informer to be started before they say that it never was.
const NeverStartedAfter = time.Second

// neverStarted returns the syncers that are informers nobody has run.
func neverStarted(syncers []Syncer) []Syncer {
	var idle []Syncer
	for _, s := range syncers {
		if st, ok := s.(interface{ Stats() Stats }); ok {
			if stats := st.Stats(); !stats.Started && !stats.Synced {
				idle = append(idle, s)
			}
		}
	}
	return idle
}

// notSyncedError is WaitForCacheSync's error.
type notSyncedError struct {
	missing []Syncer
	ctxErr  error // nil: the missing ones were never started
}

// Error names each one that did not sync, with its last error.
func (e *notSyncedError) Error() string {
	var b strings.Builder
	if e.ctxErr == nil {
		b.WriteString("informer: never started:")
	} else {
		b.WriteString("informer: not synced:")
	}
	for i, s := range e.missing {
		if i > 0 {
			b.WriteString(",")
		}
		if n, ok := s.(interface{ Name() string }); ok {
			fmt.Fprintf(&b, " %q", n.Name())
		} else {
			fmt.Fprintf(&b, " %T", s)
		}
		if at, err := lastError(s); err != nil {
			fmt.Fprintf(&b, " (last error %v ago: %v)", time.Since(at).Round(time.Millisecond), err)
		}
	}
	if e.ctxErr == nil {
		b.WriteString(": add it to the manager, or call its Run (or Factory.Start)")
	} else {
		fmt.Fprintf(&b, ": %v", e.ctxErr)
	}
	return b.String()
}

// Unwrap returns ctx's error and the last source error of each one that did not sync.
func (e *notSyncedError) Unwrap() []error {
	var errs []error
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	for _, s := range e.missing {
		if _, err := lastError(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// lastError returns the last source error of s (Stats.LastError) if s is an informer.
func lastError(s Syncer) (time.Time, error) {
	if st, ok := s.(interface{ Stats() Stats }); ok {
		stats := st.Stats()
		return stats.LastErrorAt, stats.LastError
	}
	return time.Time{}, nil
}

// Shutdown stops every informer the factory started and waits until all their goroutines
// have returned. Then the factory lets go of its informers: one the program no longer
// holds is collected with its cache, though the program keeps the factory. Later
// registrations fail with ErrFactoryShutdown, Start does nothing and WaitForCacheSync
// returns ErrFactoryShutdown. It returns the first error a Run returned
// (ErrAlreadyStarted for an informer that was also run by hand), or nil.
func (f *Factory) Shutdown() error {
	f.mu.Lock()
	f.shutdown = true
	f.mu.Unlock()
	f.cancel()
	err := f.running.Wait()
	f.mu.Lock()
	f.informers, f.started = nil, nil
	f.mu.Unlock()
	return err
}
