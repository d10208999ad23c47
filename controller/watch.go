package controller

import (
	"fmt"

	"github.com/informer-go/informer"
)

// Notifier is what a controller needs of an informer: a source of typed notifications it
// can register a handler on, and whose initial state it can wait for.
// *informer.Informer[K, V] implements it for any key type K, which need not be the
// controller's.
type Notifier[V any] interface {
	// Name identifies the informer in errors and logs.
	Name() string
	// AddHandler registers a handler; see informer.Informer.AddHandler.
	AddHandler(h informer.Handler[V], opts informer.HandlerOptions) (*informer.Registration, error)
	// RemoveHandler unregisters a handler and waits for its goroutine.
	RemoveHandler(reg *informer.Registration) bool
	// Synced returns a channel closed once the initial list is in the cache. A channel,
	// not a bool: the controller waits on it beside its context and its sync timeout.
	Synced() <-chan struct{}
}

// Predicate filters an informer's notifications before they become keys: a notification
// is turned into keys only if every predicate of its watch returns true for it.
// Predicates are called from the informer's handler goroutine, one call at a time per
// watch, and must not block.
type Predicate[V any] interface {
	// Add filters OnAdd, including the adds of the initial list.
	Add(obj V) bool
	// Update filters OnUpdate, including resyncs (old and new are then the same object).
	Update(old, new V) bool
	// Delete filters OnDelete.
	Delete(obj V) bool
}

// PredicateFuncs adapts functions into a Predicate. A nil function lets every
// notification of its kind through.
type PredicateFuncs[V any] struct {
	// AddFunc filters OnAdd; nil lets every add through.
	AddFunc func(obj V) bool
	// UpdateFunc filters OnUpdate, resyncs included; nil lets every update through.
	UpdateFunc func(old, new V) bool
	// DeleteFunc filters OnDelete; nil lets every delete through.
	DeleteFunc func(obj V) bool
}

// Add returns AddFunc(obj), or true if AddFunc is nil.
func (p PredicateFuncs[V]) Add(obj V) bool { return p.AddFunc == nil || p.AddFunc(obj) }

// Update returns UpdateFunc(old, new), or true if UpdateFunc is nil.
func (p PredicateFuncs[V]) Update(old, new V) bool {
	return p.UpdateFunc == nil || p.UpdateFunc(old, new)
}

// Delete returns DeleteFunc(obj), or true if DeleteFunc is nil.
func (p PredicateFuncs[V]) Delete(obj V) bool { return p.DeleteFunc == nil || p.DeleteFunc(obj) }

// For makes c reconcile every object of inf under its own key: each add, update (resyncs
// included) and delete that passes preds queues key(obj). A key function that fails drops
// that notification, with an error logged. It is what controller-runtime's builder For and
// EnqueueRequestForObject do.
//
// key may be nil when inf has a Key method with the controller's key type, as an
// *informer.Informer[K, V] does: the informer's own key is then used, so that the key
// function is written once.
//
// For must be called before Start; it fails with ErrAlreadyStarted or ErrShutDown after.
// The handler is registered on inf when Start runs, so inf may be started before or after c.
func For[K comparable, V any](c *Controller[K], inf Notifier[V], key informer.KeyFunc[K, V], preds ...Predicate[V]) error {
	if key == nil {
		k, ok := inf.(interface{ Key(V) (K, error) })
		if !ok {
			return fmt.Errorf("controller %s: For: nil key function, and informer %s has no Key method of the controller's key type", c.name, inf.Name())
		}
		key = k.Key
	}
	return addWatch(c, inf, &handler[K, V]{c: c, key: key, preds: preds})
}

// Watches makes c reconcile the keys that keys maps an object of inf to — an owner, the
// objects that refer to it, or nothing — for each add, update (resyncs included) and delete
// that passes preds. For an update it queues the keys of both the old and the new object, so
// that an object that changes owner is reconciled by both. It is what controller-runtime's
// Watches with EnqueueRequestsFromMapFunc does.
//
// Watches must be called before Start; it fails with ErrAlreadyStarted or ErrShutDown after.
// The handler is registered on inf when Start runs, so inf may be started before or after c.
func Watches[K comparable, V any](c *Controller[K], inf Notifier[V], keys func(obj V) []K, preds ...Predicate[V]) error {
	if keys == nil {
		return fmt.Errorf("controller %s: Watches: nil mapping function", c.name)
	}
	return addWatch(c, inf, &handler[K, V]{c: c, keys: keys, preds: preds})
}

func addWatch[K comparable, V any](c *Controller[K], inf Notifier[V], h *handler[K, V]) error {
	if inf == nil {
		return fmt.Errorf("controller %s: nil informer", c.name)
	}
	h.inf = inf.Name()
	w := &watch{
		name: inf.Name(),
		add: func(name string) (*informer.Registration, error) {
			return inf.AddHandler(h, informer.HandlerOptions{Name: name})
		},
		remove: func(reg *informer.Registration) { inf.RemoveHandler(reg) },
		synced: inf.Synced,
	}
	if st, ok := inf.(interface{ Stats() informer.Stats }); ok {
		w.started = func() bool { return st.Stats().Started }
	}
	return c.addWatch(w)
}

// watch is one informer watched by a controller, with its handler's registration once
// Start has made it.
type watch struct {
	name   string
	add    func(handlerName string) (*informer.Registration, error)
	remove func(*informer.Registration)
	synced func() <-chan struct{}
	// started reports whether the informer's Run has been called; nil when the informer
	// does not say (it has no Stats).
	started func() bool
	reg     *informer.Registration
}

// NeverStarted reports whether the informer has not synced and its Run was never called.
func (w *watch) NeverStarted() bool {
	return w.started != nil && !w.started() && !closed(w.synced())
}

// Behind says why the informer keeps the controller from reconciling, or "": never
// started, not synced, or (with handler, from Start's goroutine, which registers it) its
// initial list not yet given to the controller's handler.
func (w *watch) Behind(handler bool) string {
	switch {
	case w.NeverStarted():
		return fmt.Sprintf("informer %s was never started: add it to the manager, or call its Run (or Factory.Start)", w.name)
	case !closed(w.synced()):
		return fmt.Sprintf("informer %s has not synced", w.name)
	case handler && w.reg != nil && !closed(w.reg.Synced()):
		return fmt.Sprintf("informer %s has synced but has not yet given the controller's handler its initial list", w.name)
	}
	return ""
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// handler turns one informer's notifications into keys on the controller's queue.
type handler[K comparable, V any] struct {
	c     *Controller[K]
	inf   string
	key   informer.KeyFunc[K, V] // For
	keys  func(V) []K            // Watches
	preds []Predicate[V]
}

func (h *handler[K, V]) OnAdd(obj V, _ bool) {
	for _, p := range h.preds {
		if !p.Add(obj) {
			return
		}
	}
	h.enqueue(obj)
}

func (h *handler[K, V]) OnUpdate(old, new V) {
	for _, p := range h.preds {
		if !p.Update(old, new) {
			return
		}
	}
	if h.keys != nil {
		h.enqueue(old) // the old owner too; the queue merges duplicates
	}
	h.enqueue(new)
}

func (h *handler[K, V]) OnDelete(obj V, _ bool) {
	for _, p := range h.preds {
		if !p.Delete(obj) {
			return
		}
	}
	h.enqueue(obj)
}

func (h *handler[K, V]) enqueue(obj V) {
	if h.keys != nil {
		for _, k := range h.keys(obj) {
			h.c.queue.Add(k)
		}
		return
	}
	k, err := h.key(obj)
	if err != nil {
		h.c.log.Error("key function failed; notification dropped", "informer", h.inf, "err", err)
		return
	}
	h.c.queue.Add(k)
}
