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

// StatsProvider is what the metrics read of an informer: its name, its state and
// counters, and when it stops. *informer.Informer[K, V] implements it for every K and V.
type StatsProvider interface {
	// Name labels the informer's series.
	Name() string
	// Stats returns the informer's state, counters and handlers; it is read when the
	// registry is gathered.
	Stats() informer.Stats
	// Done returns a channel closed once the informer has stopped; the informer's series
	// are removed then.
	Done() <-chan struct{}
}

// InformerMetrics is the registration of one informer's series, its handlers' included.
// Its methods are safe for concurrent use, including with a gather.
type InformerMetrics struct {
	reg  prometheus.Registerer
	c    *informerCollector
	stop chan struct{} // closed by Unregister: ends the goroutine waiting for the informer's stop

	stopOnce     sync.Once
	mu           sync.Mutex // held while the series are removed, so that one removal is seen whole
	unregistered bool
}

// RegisterInformer registers inf's series (see the package documentation), labelled
// name=inf.Name(), on reg, and the series of every handler inf has at each gather,
// labelled handler=its name. The series are computed from inf's Stats when reg is
// gathered: nothing is added to the informer's own work.
//
// The series go when inf stops (its Done channel closes): from then on a gather yields
// none of them and the name is free for another registration, and a goroutine that
// waited for the stop (or for Unregister) removes the collector from reg. Registering an
// informer that has stopped already registers nothing and returns an InformerMetrics
// whose Unregister reports false.
//
// It fails, registering nothing, if reg refuses the series, typically with a
// prometheus.AlreadyRegisteredError because a running informer of the same name is
// registered on reg.
func RegisterInformer(reg prometheus.Registerer, inf StatsProvider) (*InformerMetrics, error) {
	if reg == nil || inf == nil {
		return nil, errors.New("metrics: RegisterInformer: nil Registerer or StatsProvider")
	}
	m := &InformerMetrics{reg: reg, stop: make(chan struct{})}
	if stopped(inf) {
		m.unregistered = true
		return m, nil
	}
	m.c = newInformerCollector(inf, m)
	err := reg.Register(m.c)
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		// An informer of the same name that has stopped, whose goroutine has not removed
		// its series yet: remove them now and take the name.
		if old, ok := dup.ExistingCollector.(*informerCollector); ok && stopped(old.source()) {
			old.m.unregister()
			err = reg.Register(m.c)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: registering informer %q: %w", inf.Name(), err)
	}
	go func() {
		select {
		case <-inf.Done():
			m.c.release() // first: once the series are gone, nothing here holds inf
			m.unregister()
		case <-m.stop:
		}
	}()
	return m, nil
}

// Unregister removes every series of the informer and of its handlers from the registry
// now, rather than when the informer stops. It reports whether it removed them: false on a
// second call, or once the informer has stopped (its stop removed them). It does not stop
// the informer.
//
// Once the series are removed, by the informer's stop or by Unregister, the
// InformerMetrics no longer holds the informer: a program that keeps it does not keep a
// stopped informer and its cache.
func (m *InformerMetrics) Unregister() bool {
	m.stopOnce.Do(func() { close(m.stop) })
	if !m.unregister() {
		return false
	}
	removed := !stopped(m.c.source())
	m.c.release()
	return removed
}

// unregister removes the collector from the registry, once; it reports whether this call
// did.
func (m *InformerMetrics) unregister() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unregistered {
		return false
	}
	m.unregistered = true
	return m.reg.Unregister(m.c)
}

// stopped reports whether inf has stopped.
func stopped(inf StatsProvider) bool {
	select {
	case <-inf.Done():
		return true
	default:
		return false
	}
}

// The kinds of the informer_errors_total series.
var errorKinds = [...]string{"key", "index", "transform", "decode", "source", "handler_panic", "other"}

// The types of the informer_watch_events_total series.
var eventTypes = [...]string{"added", "modified", "deleted", "bookmark"}

// informerCollector reads an informer's counters when it is collected. Its descriptions
// carry the informer's name as a constant label, so that each informer is a collector of
// its own, registered and unregistered with it.
type informerCollector struct {
	src atomic.Pointer[provider] // the informer; once unregistered, a stand-in (release)
	m   *InformerMetrics         // the registration that removes it

	lists, listErrors, relists, watches, watchErrors, expirations *prometheus.Desc
	events, errs, applied, quorumLists, duplicates                *prometheus.Desc
	objects, synced, lastRevision                                 *prometheus.Desc
	listDuration, listItems, watchDuration                        *prometheus.Desc

	hQueued, hDelivered, hCoalesced, hBlocked, hPanics, hSynced, hLatency *prometheus.Desc
}

func newInformerCollector(src StatsProvider, m *InformerMetrics) *informerCollector {
	labels := prometheus.Labels{"name": src.Name()}
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	c := &informerCollector{
		m:             m,
		lists:         d("informer_lists_total", "Lists started by the informer, streaming lists included."),
		listErrors:    d("informer_list_errors_total", "Lists that failed."),
		relists:       d("informer_relists_total", "Lists, the initial one included, whose result replaced the content of the informer's cache."),
		quorumLists:   d("informer_consistent_lists_total", "Consistent (quorum) lists the informer asked of its source: relists the source could not serve at the last revision seen. A rising rate means a relist storm on the store."),
		watches:       d("informer_watches_total", "Watches opened by the informer."),
		watchErrors:   d("informer_watch_errors_total", "Watches that failed."),
		expirations:   d("informer_expirations_total", "Times the informer found its revision expired."),
		events:        d("informer_watch_events_total", "Watch events received, by type.", "type"),
		applied:       d("informer_applied_total", "Changes applied to the informer's cache, listed objects and resyncs included."),
		duplicates:    d("informer_duplicates_total", "Objects the source sent for a key the informer already had: a key twice in one list, or an ADDED event for a cached key."),
		listDuration:  d("informer_list_duration_seconds", "Duration of the informer's lists, failed ones and streaming lists included."),
		listItems:     d("informer_list_items", "Objects per successful list."),
		watchDuration: d("informer_watch_duration_seconds", "How long each watch stayed open, from its request to its end."),
		errs:          d("informer_errors_total", "Errors the informer reported, by kind: key, index or transform function failures, objects the source could not decode, other bad input from the source, handler panics, other.", "kind"),
		objects:       d("informer_store_objects", "Objects in the informer's cache."),
		synced:        d("informer_synced", "1 once the informer's initial list is in its cache, else 0."),
		lastRevision:  d("informer_last_sync_revision", "Revision of the last list or watch event the informer received (its 15 least significant digits); absent until then, or when the revision is not a decimal integer."),
		hQueued:       d("informer_handler_queue_depth", "Notifications waiting for the handler, the one being delivered included.", "handler"),
		hDelivered:    d("informer_handler_delivered_total", "Calls made to the handler.", "handler"),
		hCoalesced:    d("informer_handler_coalesced_total", "Notifications merged into a newer one because the handler's queue was full.", "handler"),
		hBlocked:      d("informer_handler_blocked_total", "Times the informer waited for room in the handler's queue.", "handler"),
		hPanics:       d("informer_handler_panics_total", "Handler calls that panicked.", "handler"),
		hSynced:       d("informer_handler_synced", "1 once the handler has been given the initial state, else 0.", "handler"),
		hLatency:      d("informer_handler_delivery_latency_seconds", "Time notifications waited in the handler's queue; kept for handlers added with HandlerOptions.MeasureLatency.", "handler"),
	}
	c.src.Store(&provider{src})
	return c
}

// provider holds a StatsProvider, for an atomic.Pointer.
type provider struct{ StatsProvider }

// source returns the informer the collector reads, or its stand-in once released.
func (c *informerCollector) source() StatsProvider { return c.src.Load().StatsProvider }

// release replaces the informer by a stand-in of its name that has stopped, once the
// collector is off the registry: the registration, which the program may keep, then no
// longer keeps the informer and its cache.
func (c *informerCollector) release() {
	c.src.Store(&provider{released{name: c.source().Name()}})
}

// released stands in for an informer whose series were removed: it has stopped and
// counts nothing.
type released struct{ name string }

// Name returns the informer's name.
func (r released) Name() string { return r.name }

// Stats returns no counters.
func (released) Stats() informer.Stats { return informer.Stats{} }

// Done returns a closed channel.
func (released) Done() <-chan struct{} { return closedDone }

var closedDone = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Describe sends the descriptions of every series the informer may have.
func (c *informerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{
		c.lists, c.listErrors, c.relists, c.quorumLists, c.watches, c.watchErrors, c.expirations,
		c.events, c.errs, c.applied, c.duplicates, c.objects, c.synced, c.lastRevision,
		c.listDuration, c.listItems, c.watchDuration,
		c.hQueued, c.hDelivered, c.hCoalesced, c.hBlocked, c.hPanics, c.hSynced, c.hLatency,
	} {
		ch <- d
	}
}

// Collect reads the informer's and its handlers' counters; it yields nothing once the
// informer has stopped.
func (c *informerCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.source()
	if stopped(src) {
		return
	}
	s := src.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.lists, s.Lists)
	counter(c.listErrors, s.ListErrors)
	counter(c.relists, s.Relists)
	counter(c.quorumLists, s.ConsistentLists)
	counter(c.watches, s.Watches)
	counter(c.watchErrors, s.WatchErrors)
	counter(c.expirations, s.Expirations)
	for i, v := range [len(eventTypes)]uint64{
		s.Added, s.Modified, s.Deleted, s.Bookmarks,
	} {
		counter(c.events, v, eventTypes[i])
	}
	for i, v := range [len(errorKinds)]uint64{
		s.KeyErrors, s.IndexErrors, s.TransformErrors, s.DecodeErrors,
		s.SourceErrors, s.HandlerPanics, s.OtherErrors,
	} {
		counter(c.errs, v, errorKinds[i])
	}
	counter(c.applied, s.Applied)
	counter(c.duplicates, s.Duplicates)
	histogram(ch, c.listDuration, s.ListDuration)
	histogram(ch, c.listItems, s.ListItems)
	histogram(ch, c.watchDuration, s.WatchDuration)
	gauge(c.objects, float64(s.Objects))
	gauge(c.synced, boolValue(s.Synced))
	if rev, ok := revisionValue(s.ReceivedRevision); ok {
		gauge(c.lastRevision, rev)
	}

	var seen map[string]int
	for _, h := range s.Handlers {
		name := h.Name()
		// Two handlers of one name would make the gather fail: the second is name#2.
		if seen == nil {
			seen = make(map[string]int)
		}
		if n := seen[name]; n > 0 {
			seen[name] = n + 1
			name += "#" + strconv.Itoa(n+1)
		} else {
			seen[name] = 1
		}
		hs := h.Stats()
		gauge(c.hQueued, float64(hs.Queued), name)
		counter(c.hDelivered, hs.Delivered, name)
		counter(c.hCoalesced, hs.Coalesced, name)
		counter(c.hBlocked, hs.Blocked, name)
		counter(c.hPanics, hs.Panics, name)
		gauge(c.hSynced, boolValue(hs.Synced), name)
		if hs.Latency.Bounds != nil {
			histogram(ch, c.hLatency, hs.Latency, name)
		}
	}
}

// histogram sends a snapshot of one of the informer's histograms.
func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, s informer.Histogram, labels ...string) {
	if s.Bounds == nil {
		return
	}
	ch <- prometheus.MustNewConstHistogram(d, s.Count, s.Sum, s.Cumulative(), labels...)
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
