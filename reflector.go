package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/informer-go/informer/clock"
)

// Backoff configures the reflector's jittered exponential backoff between failed attempts.
// The zero value means the defaults client-go uses: 800 ms doubling to 30 s, full jitter,
// reset after 2 minutes without a failure.
type Backoff struct {
	Initial time.Duration // default 800 ms
	Max     time.Duration // default 30 s
	Factor  float64       // default 2
	// Jitter adds up to Jitter×delay at random; default 1.0. A negative value disables it.
	Jitter float64
	// Reset: a failure this long after the previous one starts again from Initial;
	// default 2 min.
	Reset time.Duration
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 800 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	if b.Factor < 1 {
		b.Factor = 2
	}
	if b.Jitter == 0 {
		b.Jitter = 1
	}
	if b.Jitter < 0 {
		b.Jitter = 0
	}
	if b.Reset <= 0 {
		b.Reset = 2 * time.Minute
	}
	return b
}

// backoff is the sliding exponential backoff of R-1: each call to next returns the delay to
// wait before the next attempt.
type backoff struct {
	cfg   Backoff
	clock clock.Clock
	delay time.Duration
	last  time.Time
}

func (b *backoff) next() time.Duration {
	now := b.clock.Now()
	if b.delay == 0 || now.Sub(b.last) > b.cfg.Reset {
		b.delay = b.cfg.Initial
	} else {
		b.delay = min(time.Duration(float64(b.delay)*b.cfg.Factor), b.cfg.Max)
	}
	b.last = now
	d := b.delay
	if b.cfg.Jitter > 0 {
		d += time.Duration(rand.Float64() * b.cfg.Jitter * float64(d))
	}
	return d
}

// reflectorSink is where the reflector writes: the informer's queue.
type reflectorSink[V any] interface {
	replace(items []V, rev string) error
	event(ev Event[V]) error // Added, Modified, Deleted
	bookmark(rev string)
	resync() error
	resyncPeriod() time.Duration
	shouldResync() bool
}

// reflectorConfig holds what the informer passes to its reflector.
type reflectorConfig struct {
	name            string
	pageSize        int64
	minWatchTimeout time.Duration
	backoff         Backoff
	clock           clock.Clock
	logger          *slog.Logger
	report          func(error)
	stats           *counters
}

// reflector lists a source and then watches it, writing every change to the sink (§2).
type reflector[V any] struct {
	cfg      reflectorConfig
	lw       ListerWatcher[V]
	compare  RevisionComparer // nil when revisions are opaque
	sink     reflectorSink[V]
	backoff  *backoff
	noStream bool // the source said ErrNotSupported to a streaming list
	// transform, if set, is applied to every object as it arrives; false means the object
	// failed (and was reported) and is dropped.
	transform func(V) (V, bool)

	mu       sync.Mutex
	lastSync string
	expired  bool   // the next list must be a consistent one
	resume   bool   // warm restart: the next pass watches from lastSync without a list
}

// errVeryShortWatch is returned for a watch that ended within a second with no event
// (R-13h): the source is probably failing fast, so the reflector relists after a backoff.
var errVeryShortWatch = errors.New("very short watch: the watch ended within a second and delivered nothing")

func newReflector[V any](lw ListerWatcher[V], sink reflectorSink[V], cfg reflectorConfig) *reflector[V] {
	r := &reflector[V]{cfg: cfg, lw: lw, sink: sink}
	r.compare, _ = lw.(RevisionComparer)
	r.backoff = &backoff{cfg: cfg.backoff, clock: cfg.clock}
	if s, ok := lw.(StreamingLister); !ok || !s.StreamingList() {
		r.noStream = true
	}
	return r
}

// lastSyncRevision returns the revision of the last list or watch event applied.
func (r *reflector[V]) lastSyncRevision() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastSync
}

func (r *reflector[V]) setLastSync(rev string) {
	r.mu.Lock()
	r.lastSync = rev
	r.mu.Unlock()
}

// run lists and watches until ctx is done: every return of listAndWatch, with or
// without an error, is followed by a backoff and a fresh list.
func (r *reflector[V]) run(ctx context.Context) {
	r.cfg.logger.Debug("starting reflector")
	defer r.cfg.logger.Debug("stopping reflector")
	for ctx.Err() == nil {
		err := r.listAndWatch(ctx)
		if err != nil && ctx.Err() == nil {
			r.cfg.report(err)
		}
		d := r.backoff.next()
		if ra, ok := RetryAfterOf(err); ok && ra > d {
			d = ra // the source asked for at least this long (a 429 or 503 on a list)
		}
		if !r.sleep(ctx, d) {
			return
		}
	}
}

// sleep waits d on the reflector's clock; false if ctx ended first.
func (r *reflector[V]) sleep(ctx context.Context, d time.Duration) bool {
	t := r.cfg.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// listAndWatch is one pass of §2: list (or stream the list), start the resync timer, then
// watch until the watch fails in a way that needs a relist.
func (r *reflector[V]) listAndWatch(ctx context.Context) error {
	if r.takeResume() {
		return r.resumeWatch(ctx) // warm restart: the cache holds the state at lastSync
	}
	var w Watch[V]
	if !r.noStream {
		var err error
		w, err = r.streamList(ctx)
		if errors.Is(err, ErrNotSupported) {
			r.cfg.logger.Info("source does not support streaming lists; falling back to list")
			r.noStream = true
		} else if err != nil {
			return err
		}
	}
	if w == nil {
		if err := r.list(ctx); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		if w != nil {
			w.Stop()
		}
		return nil
	}

	// The resync timer lives exactly as long as this pass (RS-2).
	passCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	if period := r.sink.resyncPeriod(); period > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.resyncLoop(passCtx, period) }()
	}
	return r.watchLoop(ctx, w)
}

func (r *reflector[V]) resyncLoop(ctx context.Context, period time.Duration) {
	t := r.cfg.clock.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if r.sink.shouldResync() {
			if err := r.sink.resync(); err != nil {
				return
			}
		}
		t.Reset(period)
	}
}

// relistOptions says which revision the next list asks for: the last synced one if
// known, else any; after an expiry, a consistent read of the newest state.
func (r *reflector[V]) relistOptions() ListOptions {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expired {
		return ListOptions{Consistent: true}
	}
	return ListOptions{Revision: r.lastSync}
}

func (r *reflector[V]) setExpired(v bool) {
	r.mu.Lock()
	r.expired = v
	r.mu.Unlock()
}

// list reads every page at one revision and replaces the queue's contents (R-4..R-9).
func (r *reflector[V]) list(ctx context.Context) error {
	start := r.cfg.clock.Now()
	opts := r.relistOptions()
	items, rev, err := r.listPages(ctx, opts)
	if errors.Is(err, ErrExpired) && !opts.Consistent {
		// retry at once with a consistent list.
		r.setExpired(true)
		r.cfg.stats.Expirations.Add(1)
		items, rev, err = r.listPages(ctx, r.relistOptions())
	}
	r.cfg.stats.Lists.Add(1)
	r.cfg.stats.ListDuration.ObserveDuration(r.cfg.clock.Since(start))
	if err != nil {
		r.cfg.stats.ListErrors.Add(1)
		if ctx.Err() != nil {
			return nil // a stop during a list is not an error
		}
		if errors.Is(err, ErrExpired) {
			r.setExpired(true)
		}
		return fmt.Errorf("informer %s: list: %w", r.cfg.name, err)
	}
	r.cfg.stats.ListItems.Observe(float64(len(items)))
	if d := r.cfg.clock.Since(start); d > 10*time.Second {
		r.cfg.logger.Info("slow list", "duration", d, "items", len(items))
	}
	if err := r.sink.replace(items, rev); err != nil {
		return fmt.Errorf("informer %s: unable to sync list result: %w", r.cfg.name, err)
	}
	r.setExpired(false)
	r.setLastSync(rev)
	return nil
}

func (r *reflector[V]) listPages(ctx context.Context, opts ListOptions) ([]V, string, error) {
	var items []V
	rev := ""
	opts.Limit = r.cfg.pageSize
	for page := 0; ; page++ {
		l, err := r.lw.List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		if r.transform != nil {
			kept := l.Items[:0]
			for _, obj := range l.Items {
				if obj, ok := r.transform(obj); ok {
					kept = append(kept, obj)
				}
			}
			clear(l.Items[len(kept):])
			l.Items = kept
		}
		if page == 0 {
			rev = l.Revision
		} else if l.Revision != rev {
			return nil, "", fmt.Errorf("%w: page %d of a list reports revision %q, the first page %q", ErrBadInput, page, l.Revision, rev)
		}
		if items == nil {
			items = l.Items
		} else {
			items = append(items, l.Items...)
		}
		if l.Continue == "" {
			return items, rev, nil
		}
		if opts.Continue == l.Continue {
			return nil, "", fmt.Errorf("%w: list returned the same continue token twice", ErrBadInput)
		}
		opts.Continue = l.Continue
	}
}

// streamList starts a watch that begins with the current state (a streaming list) and
// replaces the queue's contents once the end-of-initial-events bookmark arrives. It returns
// the watch, which goes on with changes.
func (r *reflector[V]) streamList(ctx context.Context) (Watch[V], error) {
	start := r.cfg.clock.Now()
	opts := WatchOptions{SendInitialEvents: true, AllowBookmarks: true, Timeout: r.watchTimeout()}
	w, err := r.lw.Watch(ctx, opts)
	r.cfg.stats.Lists.Add(1)
	if err != nil {
		r.cfg.stats.ListDuration.ObserveDuration(r.cfg.clock.Since(start))
		r.cfg.stats.ListErrors.Add(1)
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("informer %s: streaming list: %w", r.cfg.name, err)
	}
	var items []V
	for {
		ev, err := w.Next()
		if err != nil {
			w.Stop()
			r.cfg.stats.ListDuration.ObserveDuration(r.cfg.clock.Since(start))
			r.cfg.stats.ListErrors.Add(1)
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: stream ended before the end of the initial events", io.ErrUnexpectedEOF)
			}
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, fmt.Errorf("informer %s: streaming list: %w", r.cfg.name, err)
		}
		switch {
		case ev.Type == Added:
			obj, ok := ev.Object, true
			if r.transform != nil {
				obj, ok = r.transform(obj)
			}
			if ok {
				items = append(items, obj)
			}
		case ev.Type == Bookmark && ev.EndOfInitialEvents:
			r.cfg.stats.ListDuration.ObserveDuration(r.cfg.clock.Since(start))
			r.cfg.stats.ListItems.Observe(float64(len(items)))
			if err := r.sink.replace(items, ev.Revision); err != nil {
				w.Stop()
				return nil, fmt.Errorf("informer %s: unable to sync list result: %w", r.cfg.name, err)
			}
			r.setExpired(false)
			r.setLastSync(ev.Revision)
			return w, nil
		case ev.Type == Bookmark:
		default:
			w.Stop()
			return nil, fmt.Errorf("informer %s: streaming list: %w: %v event before the end of the initial events", r.cfg.name, ErrBadInput, ev.Type)
		}
	}
}

// watchTimeout is uniform in [min, 2·min) so that reconnects spread out.
func (r *reflector[V]) watchTimeout() time.Duration {
	m := r.cfg.minWatchTimeout
	return m + time.Duration(rand.Int64N(int64(m)))
}

// watchLoop watches from the last synced revision over and over. A watch that
// ends normally is reopened from where it stopped; a retryable failure backs off and
// re-watches from the same revision without a relist; an expired revision or any
// other failure returns, so that the caller relists.
func (r *reflector[V]) watchLoop(ctx context.Context, w Watch[V]) error {
	for {
		if ctx.Err() != nil {
			if w != nil {
				w.Stop()
			}
			return nil
		}
		start := r.cfg.clock.Now()
		if w == nil {
			var err error
			w, err = r.lw.Watch(ctx, WatchOptions{
				Revision:       r.lastSyncRevision(),
				Timeout:        r.watchTimeout(),
				AllowBookmarks: true,
			})
			r.cfg.stats.Watches.Add(1)
			if err != nil {
				r.cfg.stats.WatchErrors.Add(1)
				if retry, err := r.afterWatchError(ctx, err); !retry {
					return err
				}
				continue
			}
		}
		err := r.handleWatch(ctx, w)
		w.Stop()
		w = nil
		r.cfg.stats.WatchDuration.ObserveDuration(r.cfg.clock.Since(start))
		if err == nil {
			continue
		}
		r.cfg.stats.WatchErrors.Add(1)
		if retry, err := r.afterWatchError(ctx, err); !retry {
			return err
		}
	}
}

// afterWatchError decides what a failed watch leads to. It reports whether to watch again
// (after it has backed off); otherwise the error to return (nil for a quiet relist).
func (r *reflector[V]) afterWatchError(ctx context.Context, err error) (bool, error) {
	switch {
	case ctx.Err() != nil:
		return false, nil
	case errors.Is(err, ErrExpired):
		r.cfg.logger.Debug("watch revision expired; relisting", "err", err)
		r.cfg.stats.Expirations.Add(1)
		r.setExpired(true)
		return false, nil
	case errors.Is(err, ErrRetryable):
		d := r.backoff.next()
		if ra, ok := RetryAfterOf(err); ok && ra > d {
			d = ra
		}
		r.cfg.logger.Debug("watch failed; retrying from the same revision", "err", err, "delay", d)
		r.cfg.report(fmt.Errorf("informer %s: watch (retrying in %v): %w", r.cfg.name, d, err))
		return r.sleep(ctx, d), nil
	}
	return false, fmt.Errorf("informer %s: watch: %w", r.cfg.name, err)
}

// handleWatch reads one watch until it ends. It returns nil when the stream ended
// normally.
func (r *reflector[V]) handleWatch(ctx context.Context, w Watch[V]) error {
	start := r.cfg.clock.Now()
	count := 0
	rev := r.lastSyncRevision()
	for {
		ev, err := w.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				if count == 0 && r.cfg.clock.Since(start) < time.Second {
					return errVeryShortWatch
				}
				return nil
			}
			return err
		}
		if r.compare != nil && ev.Revision != "" && rev != "" {
			c, err := r.compare.CompareRevisions(ev.Revision, rev)
			if err != nil {
				return fmt.Errorf("%w: event revision %q: %v", ErrBadInput, ev.Revision, err)
			}
			if c < 0 {
				return fmt.Errorf("%w: %v event at revision %s after revision %s: the source went back in time", ErrBadInput, ev.Type, ev.Revision, rev)
			}
		}
		switch ev.Type {
		case Added, Modified, Deleted:
			r.cfg.stats.countEvent(ev.Type)
			if r.transform != nil {
				obj, ok := r.transform(ev.Object)
				if !ok {
					break
				}
				ev.Object = obj
			}
			if err := r.sink.event(ev); err != nil {
				if errors.Is(err, errFIFOClosed) {
					return nil
				}
				// R-13f: an object the informer cannot take is reported, not fatal.
				r.cfg.report(err)
			}
		case Bookmark:
			r.cfg.stats.Bookmarks.Add(1)
			if ev.Revision != "" {
				r.sink.bookmark(ev.Revision)
			}
		default:
			return fmt.Errorf("%w: unknown event type %d", ErrBadInput, uint8(ev.Type))
		}
		if ev.Revision != "" {
			rev = ev.Revision
			r.setLastSync(rev)
		}
		count++
	}
}

// --- warm restart (Options.Persist) ---

// resumeFrom makes the next pass of listAndWatch watch from rev, the revision of a state
// the informer restored, instead of listing. If the source says rev expired, the pass
// after it lists (consistently), as after any expiry.
func (r *reflector[V]) resumeFrom(rev string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastSync = rev
	r.resume = true
}

// resumeWatch is the pass of listAndWatch that resumes a restored state: the resync timer
// and the watch, without a list.
func (r *reflector[V]) resumeWatch(ctx context.Context) error {
	passCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	if period := r.sink.resyncPeriod(); period > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.resyncLoop(passCtx, period) }()
	}
	return r.watchLoop(ctx, nil)
}

// takeResume reports whether this pass resumes a restored state, once.
func (r *reflector[V]) takeResume() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	resume := r.resume
	r.resume = false
	return resume
}
