package informer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// SharedInformer is what a Factory runs: any *Informer[K, V].
type SharedInformer interface {
	Name() string
	Run(ctx context.Context) error
	HasSynced() bool
	Synced() <-chan struct{}
}

var _ SharedInformer = (*Informer[string, int])(nil)

// Factory shares one informer per source among many consumers, so that a
// collection is listed and watched once however many parts of a program read it. Its
// methods are safe for concurrent use. The zero value is not usable; call NewFactory.
type Factory struct {
	mu        sync.Mutex
	informers map[string]SharedInformer
	started   map[string]bool
	ctx       context.Context // cancelled by Shutdown
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	shutdown  bool
}

// NewFactory returns an empty factory.
func NewFactory() *Factory {
	ctx, cancel := context.WithCancel(context.Background())
	return &Factory{
		informers: make(map[string]SharedInformer),
		started:   make(map[string]bool),
		ctx:       ctx,
		cancel:    cancel,
	}
}

// ErrFactoryShutdown is returned when registering with a factory that has shut down.
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
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer stop()
			defer cancel()
			_ = inf.Run(runCtx)
		}()
	}
}

// WaitForCacheSync waits, concurrently, for every started informer to sync, or for ctx to
// end, and reports for each started informer's id whether it synced. Informers
// registered but not started are not in the result.
func (f *Factory) WaitForCacheSync(ctx context.Context) map[string]bool {
	f.mu.Lock()
	started := make(map[string]SharedInformer, len(f.started))
	for id := range f.started {
		started[id] = f.informers[id]
	}
	f.mu.Unlock()
	res := make(map[string]bool, len(started))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, inf := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := false
			select {
			case <-inf.Synced():
				ok = true
			case <-ctx.Done():
				ok = inf.HasSynced()
			}
			mu.Lock()
			res[id] = ok
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// NotSynced returns the ids of a WaitForCacheSync result that did not sync, sorted.
func NotSynced(res map[string]bool) []string {
	var out []string
	for id, ok := range res {
		if !ok {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Shutdown stops every informer the factory started and waits until all their goroutines
// have returned. Later registrations fail with ErrFactoryShutdown and Start does nothing.
func (f *Factory) Shutdown() {
	f.mu.Lock()
	f.shutdown = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}
