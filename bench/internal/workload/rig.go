package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/informer-go/informer"
)

// Side is one of the two informers under comparison.
type Side string

// The two sides.
const (
	Ours     Side = "ours"
	ClientGo Side = "clientgo"
)

// Sides lists both, ours first.
var Sides = []Side{Ours, ClientGo}

// listSpec is one list a source serves: its items (a ConfigMapList's Items) and revision.
type listSpec struct {
	items []corev1.ConfigMap
	rev   string
}

// rigConfig describes what a source serves and how the informer is set up.
type rigConfig struct {
	// lists are served in order, one per List call, and forgotten once served (so that
	// W2 and W5 measure what the informer keeps, not what the source keeps).
	lists []*listSpec
	// stream: the first watch delivers these events once released; later watches
	// deliver nothing.
	stream *Stream
	// expire ends the first watch, once released, with an "expired" error.
	expire   bool
	handlers int
	// emit, if set, receives each event's emit time (ns since base), indexed by its
	// Generation, and each handler records the delivery latency (W3).
	emit []int64
	base time.Time
	// rate paces the events (events/s); 0 sends them as fast as the informer takes them.
	rate float64
	// onList is called at the start of every List call with its number (0, 1, ...).
	onList func(call int)
	// structKey keys our informer by struct{Namespace, Name string}, which shares the
	// object's strings, instead of a "namespace/name" string (client-go's side is unchanged).
	structKey bool
}

// rig is one informer wired to its source and counting handlers.
type rig struct {
	handlers []*counter
	// start runs the informer; the returned function stops it and waits for it.
	start func() (stop func())
	// release starts the first watch's events (and expiry).
	release func()
	// byIndex reads one index bucket and returns how many objects it holds.
	byIndex func(index, value string) int
}

func newRig(side Side, cfg rigConfig) (*rig, error) {
	if err := checkGates(); err != nil {
		return nil, err
	}
	r := &rig{handlers: make([]*counter, cfg.handlers)}
	for i := range r.handlers {
		r.handlers[i] = &counter{emit: cfg.emit, base: cfg.base}
		if cfg.emit != nil {
			r.handlers[i].hist = new(histogram)
		}
	}
	gate := make(chan struct{})
	var once sync.Once
	r.release = func() { once.Do(func() { close(gate) }) }
	var err error
	switch side {
	case Ours:
		err = r.ours(cfg, gate)
	case ClientGo:
		err = r.clientgo(cfg, gate)
	default:
		err = fmt.Errorf("unknown side %q", side)
	}
	return r, err
}

// lists hands out cfg.lists once each, in order.
type lists struct {
	mu     sync.Mutex
	specs  []*listSpec
	calls  int
	onList func(int)
}

func (l *lists) next() (*listSpec, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.calls
	l.calls++
	if l.onList != nil {
		l.onList(n)
	}
	if n >= len(l.specs) {
		return nil, fmt.Errorf("workload: list call %d: no more lists", n)
	}
	s := l.specs[n]
	l.specs[n] = nil
	return s, nil
}

// watches counts Watch calls: only the first one streams.
type watches struct{ calls atomic.Int64 }

func (w *watches) first() bool { return w.calls.Add(1) == 1 }

// produce is the source side of the first watch, the same code for both informers: it
// waits for the gate, then sends the pre-built events in order into ch (stamping their
// emit time when asked, pacing them when asked), then the expiry event if any.
func produce[E any](ch chan<- E, done <-chan struct{}, gate <-chan struct{}, evs []E, gens []int64, cfg *rigConfig, expiry *E) {
	select {
	case <-gate:
	case <-done:
		return
	}
	start := time.Now()
	for i := range evs {
		if cfg.rate > 0 {
			for due := time.Duration(float64(i) / cfg.rate * float64(time.Second)); time.Since(start) < due; {
				time.Sleep(200 * time.Microsecond)
			}
		}
		if cfg.emit != nil {
			cfg.emit[gens[i]] = int64(time.Since(cfg.base))
		}
		select {
		case ch <- evs[i]:
		case <-done:
			return
		}
	}
	if expiry != nil {
		select {
		case ch <- *expiry:
		case <-done:
		}
	}
}

const chanSize = 1024

// ---- ours ----

// ourWatch is a watch over a channel fed by produce.
type ourWatch struct {
	ctx  context.Context
	ch   chan informer.Event[*corev1.ConfigMap]
	done chan struct{}
	once sync.Once
}

var errStopped = errors.New("workload: watch stopped")

func (w *ourWatch) Next() (informer.Event[*corev1.ConfigMap], error) {
	select {
	case ev := <-w.ch:
		if ev.Type == 0 {
			return ev, fmt.Errorf("workload: %w", informer.ErrExpired)
		}
		return ev, nil
	case <-w.done:
		return informer.Event[*corev1.ConfigMap]{}, errStopped
	case <-w.ctx.Done():
		return informer.Event[*corev1.ConfigMap]{}, w.ctx.Err()
	}
}

func (w *ourWatch) Stop() { w.once.Do(func() { close(w.done) }) }

type ourSource struct {
	lists   *lists
	watches watches
	cfg     *rigConfig
	gate    chan struct{}
}

func (s *ourSource) List(_ context.Context, _ informer.ListOptions) (informer.List[*corev1.ConfigMap], error) {
	l, err := s.lists.next()
	if err != nil {
		return informer.List[*corev1.ConfigMap]{}, err
	}
	items := make([]*corev1.ConfigMap, len(l.items))
	for i := range l.items {
		items[i] = &l.items[i]
	}
	return informer.List[*corev1.ConfigMap]{Items: items, Revision: l.rev}, nil
}

func (s *ourSource) Watch(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*corev1.ConfigMap], error) {
	w := &ourWatch{ctx: ctx, ch: make(chan informer.Event[*corev1.ConfigMap], chanSize), done: make(chan struct{})}
	if s.watches.first() {
		var evs []informer.Event[*corev1.ConfigMap]
		var gens []int64
		if s.cfg.stream != nil {
			evs, gens = s.cfg.stream.ours, s.cfg.stream.gens
		}
		var expiry *informer.Event[*corev1.ConfigMap]
		if s.cfg.expire {
			expiry = &informer.Event[*corev1.ConfigMap]{}
		}
		go produce(w.ch, w.done, s.gate, evs, gens, s.cfg, expiry)
	}
	return w, nil
}

// ourKey is namespace/name, computed the way client-go's MetaNamespaceKeyFunc does.
func ourKey(o *corev1.ConfigMap) (string, error) {
	if o.Namespace == "" {
		return o.Name, nil
	}
	return o.Namespace + "/" + o.Name, nil
}

// nameKey is the struct key of our informer with rigConfig.structKey: it holds the
// object's own strings, so computing it allocates nothing. Its order (namespace, then
// name) is the default one for a struct of strings.
type nameKey struct{ Namespace, Name string }

func ourNameKey(o *corev1.ConfigMap) (nameKey, error) { return nameKey{o.Namespace, o.Name}, nil }

func (r *rig) ours(cfg rigConfig, gate chan struct{}) error {
	if cfg.structKey {
		return oursKeyed(r, cfg, gate, ourNameKey)
	}
	return oursKeyed(r, cfg, gate, ourKey)
}

func oursKeyed[K comparable](r *rig, cfg rigConfig, gate chan struct{}, key informer.KeyFunc[K, *corev1.ConfigMap]) error {
	src := &ourSource{lists: &lists{specs: cfg.lists, onList: cfg.onList}, cfg: &cfg, gate: gate}
	inf, err := informer.New[K, *corev1.ConfigMap](src, informer.Options[K, *corev1.ConfigMap]{
		Key: key,
		Indexers: informer.Indexers[*corev1.ConfigMap]{
			"namespace": informer.IndexBy(func(o *corev1.ConfigMap) (string, error) { return o.Namespace, nil }),
			"app":       informer.IndexBy(func(o *corev1.ConfigMap) (string, error) { return o.Labels["app"], nil }),
		},
		Revision: func(o *corev1.ConfigMap) string { return o.ResourceVersion },
		PageSize: -1, // the source serves whole lists, as client-go's side does
		ErrorHandler: func(err error) {
			if !errors.Is(err, informer.ErrExpired) {
				fmt.Println("ours: informer error:", err)
			}
		},
	})
	if err != nil {
		return err
	}
	for _, h := range r.handlers {
		if _, err := inf.AddHandler(ourHandler{h}, informer.HandlerOptions{Policy: informer.Block}); err != nil {
			return err
		}
	}
	r.start = starter(func(ctx context.Context) { inf.Run(ctx) })
	r.byIndex = func(index, value string) int {
		objs, _ := inf.ByIndex(index, value) // an iterator: no slice, unlike client-go's
		n := 0
		for range objs {
			n++
		}
		return n
	}
	return nil
}

type ourHandler struct{ c *counter }

func (h ourHandler) OnAdd(o *corev1.ConfigMap, _ bool)    { h.c.observe(o) }
func (h ourHandler) OnUpdate(_, o *corev1.ConfigMap)      { h.c.observe(o) }
func (h ourHandler) OnDelete(o *corev1.ConfigMap, _ bool) { h.c.observe(o) }

// ---- client-go ----

// cgWatch is a watch.Interface over a channel fed by produce.
type cgWatch struct {
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func (w *cgWatch) ResultChan() <-chan watch.Event { return w.ch }
func (w *cgWatch) Stop()                          { w.once.Do(func() { close(w.done) }) }

func (r *rig) clientgo(cfg rigConfig, gate chan struct{}) error {
	ls := &lists{specs: cfg.lists, onList: cfg.onList}
	var ws watches
	lw := &cache.ListWatch{
		ListWithContextFunc: func(_ context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			l, err := ls.next()
			if err != nil {
				return nil, err
			}
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: l.rev}, Items: l.items}, nil
		},
		WatchFuncWithContext: func(_ context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			w := &cgWatch{ch: make(chan watch.Event, chanSize), done: make(chan struct{})}
			if ws.first() {
				var evs []watch.Event
				var gens []int64
				if cfg.stream != nil {
					evs, gens = cfg.stream.cg, cfg.stream.gens
				}
				var expiry *watch.Event
				if cfg.expire {
					expiry = &watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("workload: expired").ErrStatus}
				}
				go produce(w.ch, w.done, gate, evs, gens, &cfg, expiry)
			}
			return w, nil
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{
		"namespace": cache.MetaNamespaceIndexFunc,
		"app": func(obj any) ([]string, error) {
			return []string{obj.(*corev1.ConfigMap).Labels["app"]}, nil
		},
	})
	for _, h := range r.handlers {
		if _, err := inf.AddEventHandler(cgHandler{h}); err != nil {
			return err
		}
	}
	r.start = starter(inf.RunWithContext)
	idx := inf.GetIndexer()
	r.byIndex = func(index, value string) int {
		objs, _ := idx.ByIndex(index, value)
		return len(objs)
	}
	return nil
}

type cgHandler struct{ c *counter }

func (h cgHandler) OnAdd(o any, _ bool) { h.c.observe(cgObject(o)) }
func (h cgHandler) OnUpdate(_, o any)   { h.c.observe(cgObject(o)) }
func (h cgHandler) OnDelete(o any)      { h.c.observe(cgObject(o)) }
func cgObject(o any) *corev1.ConfigMap {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	cm, _ := o.(*corev1.ConfigMap)
	return cm
}

// ---- handlers ----

// counter counts its handler's calls and closes a channel when the count reaches the
// target: the harness waits on it, nothing spins. With hist set it records each event's
// delivery latency.
type counter struct {
	n       atomic.Int64
	target  atomic.Int64
	reached atomic.Pointer[chan struct{}]
	emit    []int64
	base    time.Time
	hist    *histogram
}

func (c *counter) observe(o *corev1.ConfigMap) {
	if c.hist != nil && o != nil && o.Generation > 0 {
		c.hist.record(int64(time.Since(c.base)) - c.emit[o.Generation])
	}
	if n := c.n.Add(1); n == c.target.Load() {
		close(*c.reached.Load())
	}
}

// expect arms the counter for a total of n calls.
func (c *counter) expect(n int64) {
	ch := make(chan struct{})
	c.reached.Store(&ch)
	c.target.Store(n)
	if c.n.Load() >= n {
		close(ch)
	}
}

var errTimeout = errors.New("workload: timed out waiting for the handlers")

func (r *rig) wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for i, h := range r.handlers {
		select {
		case <-*h.reached.Load():
		case <-t.C:
			return fmt.Errorf("%w: handler %d saw %d of %d", errTimeout, i, h.n.Load(), h.target.Load())
		}
	}
	return nil
}

// startRig is newRig then startListed.
func startRig(side Side, cfg rigConfig, listed, then int) (*rig, func(), error) {
	r, err := newRig(side, cfg)
	if err != nil {
		return nil, nil, err
	}
	stop, err := r.startListed(listed, then)
	if err != nil {
		return nil, nil, err
	}
	return r, stop, nil
}

// startListed starts the informer, waits until every handler has seen the listed objects
// and arms the counter for then more calls after them. stop stops the informer; after an
// error nothing runs.
func (r *rig) startListed(listed, then int) (stop func(), err error) {
	r.expect(int64(listed))
	stop = r.start()
	if err := r.wait(timeout); err != nil {
		stop()
		return nil, fmt.Errorf("initial list: %w", err)
	}
	r.expect(int64(listed + then))
	return stop, nil
}

func (r *rig) expect(n int64) {
	for _, h := range r.handlers {
		h.expect(n)
	}
}

// starter returns a rig's start function for run: start runs run in a goroutine and
// returns a stop that cancels run's context and waits for run to return.
func starter(run func(context.Context)) func() func() {
	return func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { run(ctx); close(done) }()
		return func() { cancel(); <-done }
	}
}
