package informer

import (
	"fmt"
	"time"
)

// sink is where the reflector writes: it keys each object, has the store prepare each
// event's index values on the reflector's goroutine (the writer's, the pipeline's busiest,
// is spared them) and queues the result in the delta queue.
type sink[K comparable, V any] struct {
	name     string
	key      KeyFunc[K, V]
	xform    func(V) (V, error) // Options.Transform; nil: none
	report   func(error)
	queue    *deltaFIFO[K, V]
	store    *store[K, V]
	relisted func() // the counters' Relisted

	resyncPeriod func() time.Duration // the processor's ResyncPeriod
	shouldResync func() bool          // the processor's ShouldResync

	hint   storeHint[V] // the reflector goroutine's buffer for an event's index values
	handed int          // items of the list being read already queued by pages; -1: none will be
}

// newSink returns the sink into queue and st; resyncPeriod and shouldResync are the
// processor's, which the reflector asks through the sink.
func newSink[K comparable, V any](opts Options[K, V], report func(error), queue *deltaFIFO[K, V], st *store[K, V], resyncPeriod func() time.Duration, shouldResync func() bool, relisted func()) *sink[K, V] {
	return &sink[K, V]{
		name: opts.Name, key: opts.Key, xform: opts.Transform, report: report,
		queue: queue, store: st, relisted: relisted, resyncPeriod: resyncPeriod, shouldResync: shouldResync,
	}
}

// Key returns obj's key (Options.Key; a panic is an error).
func (s *sink[K, V]) Key(obj V) (K, error) {
	k, err := safeCall(s.key, obj)
	if err != nil {
		return k, &ObjectError{Informer: s.name, Op: "key", Object: obj, Err: err}
	}
	return k, nil
}

func (s *sink[K, V]) Transform(obj V) (V, bool) {
	out, err := safeCall(s.xform, obj)
	if err != nil {
		s.report(&ObjectError{Op: "transform", Object: obj, Err: err})
		return out, false
	}
	return out, true
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

func (s *sink[K, V]) Replace(items []V, rev string) error {
	items = items[max(s.handed, 0):] // the pages queued already
	s.handed = 0
	keys, objs := s.keysOf(items)
	s.relisted()
	return s.queue.Replace(keys, objs, rev)
}

// ListPage is a page of a list, not its last, read by the reflector. A first list that
// finds the queue and the cache empty is queued page by page, so that the store loads a
// page while the next is read; otherwise the page comes again with the whole list in
// Replace.
func (s *sink[K, V]) ListPage(items []V) {
	if s.handed < 0 || !s.queue.TakesPages() {
		s.handed = -1 // the list comes whole
		return
	}
	n := len(items)
	keys, objs := s.keysOf(items)
	if !s.queue.FirstPage(keys, objs) {
		s.handed = -1 // closed
		return
	}
	s.handed += n
}

// ListAborted says that the list whose pages ListPage saw failed, at revision rev; the
// next list starts afresh.
func (s *sink[K, V]) ListAborted(rev string) {
	if s.handed > 0 {
		s.queue.AbortFirst(rev)
	}
	s.handed = 0
}

// keysOf computes the key of every item, reporting and dropping the items whose key
// fails; it reuses items for the objects it returns.
func (s *sink[K, V]) keysOf(items []V) ([]K, []V) {
	keys := make([]K, 0, len(items))
	objs := items[:0]
	for _, obj := range items {
		k, err := s.Key(obj)
		if err != nil {
			s.report(err)
			continue
		}
		keys = append(keys, k)
		objs = append(objs, obj)
	}
	clear(items[len(objs):])
	return keys, objs
}

func (s *sink[K, V]) Event(ev Event[V], more bool) error {
	k, err := s.Key(ev.Object)
	if err != nil {
		return err
	}
	// The store prepares the object here rather than on the writer's goroutine, the
	// pipeline's busiest. If it fails, the writer tries again and reports the error. A
	// delete that carries the key alone has no index values to prepare: the store finds
	// them from the cached object.
	var prep any
	if !(ev.Type == Deleted && ev.LastStateUnknown) && s.store.Prepare(&s.hint, ev.Object) {
		prep = &s.hint
	}
	return s.queue.Add(ev, k, more, prep)
}

func (s *sink[K, V]) Bookmark(rev string) { s.queue.Bookmark(rev) }

func (s *sink[K, V]) Resync() error { return s.queue.Resync() }

func (s *sink[K, V]) ResyncPeriod() time.Duration { return s.resyncPeriod() }

func (s *sink[K, V]) ShouldResync() bool { return s.shouldResync() }
