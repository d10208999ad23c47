package manager

import (
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/informer-go/informer"
)

// Watchdog bounds the time of calls that must not hang, such as an informer handler's:
// /healthz fails, naming it, while one of its calls has been running longer than its bound.
// Make one with Manager.Watchdog; wrap a handler with TrackHandler, or call Begin yourself.
type Watchdog struct {
	name  string
	bound time.Duration

	mu     sync.Mutex
	next   uint64
	flight map[uint64]time.Time
}

// Watchdog returns a watchdog named name whose calls may each last up to bound; it is
// checked by /healthz from then on.
func (m *Manager) Watchdog(name string, bound time.Duration) *Watchdog {
	d := &Watchdog{name: name, bound: bound, flight: map[uint64]time.Time{}}
	m.mu.Lock()
	m.watchdogs = append(m.watchdogs, d)
	m.mu.Unlock()
	return d
}

// watchdogErrs yields each watchdog's name and why it fails at now (nil: it passes), in
// the order they were made.
func (m *Manager) watchdogErrs(now time.Time) iter.Seq2[string, error] {
	m.mu.Lock()
	dogs := append([]*Watchdog(nil), m.watchdogs...)
	m.mu.Unlock()
	return func(yield func(string, error) bool) {
		for _, d := range dogs {
			if !yield(d.name, d.check(now)) {
				return
			}
		}
	}
}

// Begin marks a call started; call the returned function when it ends.
func (d *Watchdog) Begin() (end func()) {
	d.mu.Lock()
	id := d.next
	d.next++
	d.flight[id] = time.Now()
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		delete(d.flight, id)
		d.mu.Unlock()
	}
}

func (d *Watchdog) check(now time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var oldest time.Time
	for _, t := range d.flight {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	if !oldest.IsZero() && now.Sub(oldest) > d.bound {
		return fmt.Errorf("a call has been running for %v (bound %v)", now.Sub(oldest).Round(time.Millisecond), d.bound)
	}
	return nil
}

// TrackHandler returns h with each of its calls tracked by d. If h is an
// informer.RevisionHandler, so is the handler it returns, and its OnRevision calls are
// tracked too.
func TrackHandler[V any](d *Watchdog, h informer.Handler[V]) informer.Handler[V] {
	t := tracked[V]{d: d, h: h}
	if r, ok := h.(informer.RevisionHandler); ok {
		return trackedRevisions[V]{t, r}
	}
	return t
}

// trackedRevisions is a tracked handler that is told revisions.
type trackedRevisions[V any] struct {
	tracked[V]
	r informer.RevisionHandler
}

func (t trackedRevisions[V]) OnRevision(rev string) {
	defer t.d.Begin()()
	t.r.OnRevision(rev)
}

type tracked[V any] struct {
	d *Watchdog
	h informer.Handler[V]
}

func (t tracked[V]) OnAdd(obj V, initial bool) {
	defer t.d.Begin()()
	t.h.OnAdd(obj, initial)
}

func (t tracked[V]) OnUpdate(old, new V) {
	defer t.d.Begin()()
	t.h.OnUpdate(old, new)
}

func (t tracked[V]) OnDelete(obj V, finalStateUnknown bool) {
	defer t.d.Begin()()
	t.h.OnDelete(obj, finalStateUnknown)
}
