package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/informer-go/informer"
)

// Informer is what the metrics read of an informer. *informer.Informer[K, V] implements it
// for every K and V.
type Informer interface {
	// Name labels the informer's series.
	Name() string
	// Stats returns the informer's counters; they are read when the registry is gathered.
	Stats() *informer.Stats
	// LastSyncRevision returns the revision of the last list or watch event received.
	LastSyncRevision() string
	// HasSynced reports whether the initial list is in the cache.
	HasSynced() bool
}

// Handler is what the metrics read of a handler registered on an informer.
// *informer.Registration implements it.
type Handler interface {
	// Name labels the handler's series; it must not be empty.
	Name() string
	// Stats returns the handler's counters; they are read when the registry is gathered.
	Stats() informer.HandlerStats
	// HasSynced reports whether the handler has been given the initial state.
	HasSynced() bool
}

// InformerMetrics is the registration of one informer's series, and of the series of the
// handlers added to it. Its methods are safe for concurrent use, including with a gather.
type InformerMetrics struct {
	reg prometheus.Registerer
	c   *informerCollector

	unregistered atomic.Bool
}

// RegisterInformer registers inf's series (see the package documentation), labelled
// name=inf.Name(), on reg. The series are computed from inf's counters when reg is
// gathered: nothing is added to the informer's own work. It fails, registering nothing, if
// reg refuses them, typically with a prometheus.AlreadyRegisteredError because an informer
// of the same name is registered on reg.
//
// Call Unregister once inf has stopped (its Run has returned) to remove the series.
func RegisterInformer(reg prometheus.Registerer, inf Informer) (*InformerMetrics, error) {
	if reg == nil || inf == nil {
		return nil, errors.New("metrics: RegisterInformer: nil Registerer or Informer")
	}
	c := newInformerCollector(inf)
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("metrics: registering informer %q: %w", inf.Name(), err)
	}
	return &InformerMetrics{reg: reg, c: c}, nil
}

// AddHandler adds the series of h, a handler registered on the informer, labelled
// handler=h.Name(). It fails if h has no name, or if a handler of the same name has been
// added already. Call RemoveHandler when the handler is removed from the informer, or
// Unregister to remove everything.
func (m *InformerMetrics) AddHandler(h Handler) error {
	return m.c.addHandler(h)
}

// RemoveHandler removes the series of the handler named h.Name(). It reports whether such
// a handler had been added (and not removed since).
func (m *InformerMetrics) RemoveHandler(h Handler) bool {
	return m.c.removeHandler(h)
}

// Unregister removes every series of the informer and of its handlers from the registry.
// It reports whether it removed them: false on a second call. It does not stop the
// informer, and is meant to be called once it has stopped.
func (m *InformerMetrics) Unregister() bool {
	return !m.unregistered.Swap(true) && m.reg.Unregister(m.c)
}

// The kinds of the informer_errors_total series.
var errorKinds = [...]string{"key", "index", "transform", "source", "handler_panic", "other"}

// The types of the informer_watch_events_total series.
var eventTypes = [...]string{"added", "modified", "deleted", "bookmark"}

// informerCollector reads an informer's counters when it is collected. Its descriptions
// carry the informer's name as a constant label, so that each informer is a collector of
// its own, registered and unregistered with it.
type informerCollector struct {
	src Informer

	lists, listErrors, relists, watches, watchErrors, expirations *prometheus.Desc
	events, errs                                                  *prometheus.Desc
	objects, synced, lastRevision                                 *prometheus.Desc

	hQueued, hDelivered, hCoalesced, hBlocked, hPanics, hSynced *prometheus.Desc

	mu       sync.Mutex
	handlers map[string]Handler
}

func newInformerCollector(src Informer) *informerCollector {
	labels := prometheus.Labels{"name": src.Name()}
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	return &informerCollector{
		src:          src,
		lists:        d("informer_lists_total", "Lists started by the informer, streaming lists included."),
		listErrors:   d("informer_list_errors_total", "Lists that failed."),
		relists:      d("informer_relists_total", "Lists, the initial one included, whose result replaced the content of the informer's cache."),
		watches:      d("informer_watches_total", "Watches opened by the informer."),
		watchErrors:  d("informer_watch_errors_total", "Watches that failed."),
		expirations:  d("informer_expirations_total", "Times the informer found its revision expired."),
		events:       d("informer_watch_events_total", "Watch events received, by type.", "type"),
		errs:         d("informer_errors_total", "Errors the informer reported, by kind: key, index or transform function failures, bad input from the source, handler panics, other.", "kind"),
		objects:      d("informer_store_objects", "Objects in the informer's cache."),
		synced:       d("informer_synced", "1 once the informer's initial list is in its cache, else 0."),
		lastRevision: d("informer_last_sync_revision", "Revision of the last list or watch event the informer received (its 15 least significant digits); absent until then, or when the revision is not a decimal integer."),
		hQueued:      d("informer_handler_queue_depth", "Notifications waiting for the handler, the one being delivered included.", "handler"),
		hDelivered:   d("informer_handler_delivered_total", "Calls made to the handler.", "handler"),
		hCoalesced:   d("informer_handler_coalesced_total", "Notifications merged into a newer one because the handler's queue was full.", "handler"),
		hBlocked:     d("informer_handler_blocked_total", "Times the informer waited for room in the handler's queue.", "handler"),
		hPanics:      d("informer_handler_panics_total", "Handler calls that panicked.", "handler"),
		hSynced:      d("informer_handler_synced", "1 once the handler has been given the initial state, else 0.", "handler"),
		handlers:     make(map[string]Handler),
	}
}

func (c *informerCollector) addHandler(h Handler) error {
	if h == nil {
		return errors.New("metrics: AddHandler: nil Handler")
	}
	name := h.Name()
	if name == "" {
		return fmt.Errorf("metrics: informer %q: a handler needs a name (informer.HandlerOptions.Name) to be measured", c.src.Name())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.handlers[name]; ok {
		return fmt.Errorf("metrics: informer %q: a handler named %q is already measured", c.src.Name(), name)
	}
	c.handlers[name] = h
	return nil
}

func (c *informerCollector) removeHandler(h Handler) bool {
	if h == nil {
		return false
	}
	name := h.Name()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.handlers[name]; !ok {
		return false
	}
	delete(c.handlers, name)
	return true
}

// Describe sends the descriptions of every series the informer may have.
func (c *informerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{
		c.lists, c.listErrors, c.relists, c.watches, c.watchErrors, c.expirations,
		c.events, c.errs, c.objects, c.synced, c.lastRevision,
		c.hQueued, c.hDelivered, c.hCoalesced, c.hBlocked, c.hPanics, c.hSynced,
	} {
		ch <- d
	}
}

// Collect reads the informer's and its handlers' counters.
func (c *informerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.lists, s.Lists.Load())
	counter(c.listErrors, s.ListErrors.Load())
	counter(c.relists, s.Relists.Load())
	counter(c.watches, s.Watches.Load())
	counter(c.watchErrors, s.WatchErrors.Load())
	counter(c.expirations, s.Expirations.Load())
	for i, v := range [len(eventTypes)]uint64{
		s.Added.Load(), s.Modified.Load(), s.Deleted.Load(), s.Bookmarks.Load(),
	} {
		counter(c.events, v, eventTypes[i])
	}
	for i, v := range [len(errorKinds)]uint64{
		s.KeyErrors.Load(), s.IndexErrors.Load(), s.TransformErrors.Load(),
		s.SourceErrors.Load(), s.HandlerPanics.Load(), s.OtherErrors.Load(),
	} {
		counter(c.errs, v, errorKinds[i])
	}
	gauge(c.objects, float64(s.Objects.Load()))
	gauge(c.synced, boolValue(c.src.HasSynced()))
	if rev, ok := revisionValue(c.src.LastSyncRevision()); ok {
		gauge(c.lastRevision, rev)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for name, h := range c.handlers {
		hs := h.Stats()
		gauge(c.hQueued, float64(hs.Queued), name)
		counter(c.hDelivered, hs.Delivered, name)
		counter(c.hCoalesced, hs.Coalesced, name)
		counter(c.hBlocked, hs.Blocked, name)
		counter(c.hPanics, hs.Panics, name)
		gauge(c.hSynced, boolValue(h.HasSynced()), name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// revisionValue returns a decimal revision's 15 least significant digits as a number (a
// float64 holds them exactly), as client-go's informer_store_resource_version does. It
// reports false for an empty or non-decimal revision.
func revisionValue(rev string) (float64, bool) {
	if rev == "" {
		return 0, false
	}
	for i := 0; i < len(rev); i++ {
		if rev[i] < '0' || rev[i] > '9' {
			return 0, false
		}
	}
	if len(rev) > 15 {
		rev = rev[len(rev)-15:]
	}
	v, err := strconv.ParseUint(rev, 10, 64)
	if err != nil {
		return 0, false
	}
	return float64(v), true
}
