package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/informer-go/informer/clock"
)

// The reflector is the first stage of the pipeline: it lists the source, then watches it,
// and writes what it reads to the informer's queue. Its rules, in one place:
//
// Which list it asks for. A list asks for the cheapest state that is still correct:
//   - the first list asks for any state (ListOptions.Revision empty): a cache may answer;
//   - every relist, after a watch failed or expired, asks for a state at least as new as
//     the last revision the informer has seen (ListOptions.Revision = that revision), which
//     a cache that has caught up with it (kube-apiserver's watch cache, fanout.Server)
//     can serve without a quorum read;
//   - if a page after the first answers ErrExpired (its continue token expired), the same
//     list is asked again without paging, so that no token can expire;
//   - only if the first page answers ErrExpired (the source cannot serve that revision) or
//     reports an older revision than the one asked for, the reflector asks for a consistent
//     (quorum) list: ListOptions.Consistent. Stats.ConsistentLists counts those requests,
//     so that an operator sees a storm of them coming. A revision the source refused once
//     goes straight to a consistent list the next time.
//
// Every list is paged (ListOptions.Limit: Options.PageSize, or the source's own page size,
// see PageSizer), the relists at a known revision included, which client-go leaves
// unpaged: paging keeps each response bounded. A list is bounded to MaxListPages pages.
//
// When it waits. A failure waits a jittered exponential backoff (see Backoff) before the
// next attempt, and the backoff grows only while failures repeat without progress: a
// watch that delivers an event (a bookmark included) starts it again from Backoff.Initial.
// An expired watch after progress is not a failure of the source (the source compacted
// its history past a revision the informer had been following): the reflector relists
// after a small jitter only (uniform in [0, Backoff.Initial/4)), so that informers that
// expired together do not all relist at the same instant. An expiry with no progress since
// the last list waits the backoff like any failure; but a list that succeeded after such
// an expiry starts the backoff again from Initial, so that a quiet source compacting past
// every watch (no change to deliver between compactions) is relisted after Initial each
// time, not after a wait that grows to Max. A list after any other failure (a watch that
// fails at once, say) leaves the backoff growing.
//
// How it fails. Whatever a source returns, the reflector does not panic: a nil watch, a
// nil object, an empty or malformed revision from a source with ordered revisions, an
// event of no known type, a continue token that repeats or cycles, more than MaxListPages
// pages, a panic in List, Watch, Watch.Next or Watch.Stop (recovered, and named in the
// error): each is an error matching ErrBadInput, reported to Options.ErrorHandler and
// counted in Stats, and the reflector lists again after the backoff. A nil item of a list
// is skipped and reported; the rest of the list is used.
//
// How it tells. Every source failure is reported (Options.ErrorHandler, Stats) and logged
// at Warn level, at most one line per kind of failure (the operation and the error class)
// per backoff step; the informer logs the detail of every error at Debug. The last source
// error and its time are kept for Stats.LastError until the source recovers.

// MaxListPages bounds the pages of one list. A list that has not ended after this many
// pages (a source whose continue tokens never run out) fails with an error matching
// ErrBadInput, as does a list whose continue token comes back (a repeat or a cycle, found
// in O(1) memory however long the cycle). 100,000 pages of the default 500 objects are
// 50 million objects.
const MaxListPages = 100_000

// defaultPageSize is the list Limit of an informer whose Options.PageSize is 0: the
// source's page size (PageSizer), else 500; 0 for no paging.
func defaultPageSize[V any](lw ListerWatcher[V]) int64 {
	if ps, ok := lw.(PageSizer); ok {
		if n := ps.DefaultPageSize(); n != 0 {
			return max(n, 0)
		}
	}
	return 500
}

// Backoff configures the reflector's jittered exponential backoff between failed attempts.
// The zero value means the defaults client-go uses: 800 ms doubling to 30 s, full jitter,
// reset after 2 minutes without a failure. The backoff also starts again from Initial as
// soon as a watch delivers an event: it grows only while failures repeat without progress.
type Backoff struct {
	Initial time.Duration // default 800 ms
	Max     time.Duration // default 30 s
	Factor  float64       // default 2
	// Jitter adds up to Jitter×delay at random; default 1.0. A negative value disables it,
	// and with it the jitter before a relist after an expired watch (which then relists at
	// once).
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

// backoff is the sliding exponential backoff between failed attempts: each call to next
// returns the delay to wait before the next attempt. It is used by the reflector's
// goroutine only.
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

// reset makes the next delay Initial again: the source made progress.
func (b *backoff) reset() { b.delay = 0 }

// step is the current backoff step (at least Initial), the window of the Warn rate limit.
func (b *backoff) step() time.Duration { return max(b.delay, b.cfg.Initial) }

// prompt is the wait before a relist that follows progress: uniform in [0, Initial/4), or
// nothing without jitter.
func (b *backoff) prompt() time.Duration {
	if b.cfg.Jitter <= 0 || b.cfg.Initial < 4 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(b.cfg.Initial / 4)))
}

// reflectorSink is where the reflector writes: the informer's queue.
type reflectorSink[V any] interface {
	replace(items []V, rev string) error
	// listPage sees each page of a paged list but the last as it is read, which then
	// comes with the whole list in replace; listAborted says that the list failed, and
	// the revision its pages were at ("" if none was read).
	listPage(items []V)
	listAborted(rev string)
	event(ev Event[V], more bool) error // Added, Modified, Deleted; more: see BatchedWatch
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
	progressTimeout time.Duration // 0: no bound
	backoff         Backoff
	clock           clock.Clock
	logger          *slog.Logger
	report          func(error)
	stats           *counters
}

// reflector lists a source and then watches it, writing every change to the sink.
type reflector[V any] struct {
	cfg      reflectorConfig
	lw       ListerWatcher[V]
	compare  RevisionComparer // nil when revisions are opaque
	sink     reflectorSink[V]
	backoff  *backoff
	noStream bool // the source said ErrNotSupported to a streaming list
	nilable  bool // V is a pointer, interface, map, channel or function type
	oneWord  bool // V is a pointer, map, channel or function type: one word, nil or not
	// transform, if set, is applied to every object as it arrives; false means the object
	// failed (and was reported) and is dropped.
	transform func(V) (V, bool)

	// Used by the reflector's goroutine only.
	unservable string               // a revision the source answered expired to a list at
	progressed bool                 // a watch delivered an event since the last list
	expired    bool                 // the pass ended because the watch expired with no progress
	warned     map[string]time.Time // when each kind of failure was last logged at Warn

	mu       sync.Mutex
	lastSync string // the revision of the last list or event applied
	resume   bool   // warm restart: the next pass watches from lastSync without a list

	lastErr atomic.Pointer[sourceError]
}

// sourceError is the last source error and when it was reported.
type sourceError struct {
	err error
	at  time.Time
}

// opError is a failed operation of the reflector: it names the informer and the operation
// once, then the source's error.
type opError struct {
	name, op string
	err      error
	retry    time.Duration // > 0: the operation is retried after this long
}

func (e *opError) Error() string {
	if e.retry > 0 {
		return fmt.Sprintf("informer %q: %s (retrying in %v): %v", e.name, e.op, e.retry, e.err)
	}
	return fmt.Sprintf("informer %q: %s: %v", e.name, e.op, e.err)
}
func (e *opError) Unwrap() error { return e.err }

// errVeryShortWatch is returned for a watch that ended within a second with no event: the
// source is probably failing fast, so the reflector relists after a backoff.
var errVeryShortWatch = errors.New("very short watch: the watch ended within a second and delivered nothing")

// errRelistPromptly ends a pass whose watch expired after progress: relist after a small
// jitter, not a backoff.
var errRelistPromptly = errors.New("relist promptly")

// errNoWatch is what a Watch that returned neither a watch nor an error becomes.
var errNoWatch = fmt.Errorf("%w: Watch returned neither a watch nor an error", ErrBadInput)

func newReflector[V any](lw ListerWatcher[V], sink reflectorSink[V], cfg reflectorConfig) *reflector[V] {
	r := &reflector[V]{cfg: cfg, lw: lw, sink: sink, warned: map[string]time.Time{}}
	r.compare, _ = lw.(RevisionComparer)
	r.backoff = &backoff{cfg: cfg.backoff, clock: cfg.clock}
	if s, ok := lw.(StreamingLister); !ok || !s.StreamingList() {
		r.noStream = true
	}
	switch reflect.TypeFor[V]().Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		r.nilable, r.oneWord = true, true
	case reflect.Interface:
		r.nilable = true
	}
	return r
}

// setTransform makes the reflector apply fn to every object as it arrives: see
// Options.Transform. Call it before run.
func (r *reflector[V]) setTransform(fn func(V) (V, bool)) { r.transform = fn }

// isNil reports whether obj is a nil pointer, interface, map, channel or function (or an
// interface holding one). It is called for every object: a pointer, map, channel or
// function value is one machine word, nil when that word is, so no reflection is needed
// (0.6 ns against 3.4 with reflect). An interface holding a value of a kind that cannot be
// nil (a struct) is not nil: asking reflect whether it is would panic.
func (r *reflector[V]) isNil(obj V) bool {
	switch {
	case r.oneWord:
		return *(*unsafe.Pointer)(unsafe.Pointer(&obj)) == nil
	case r.nilable: // an interface: nil, or holding a nil of a kind that has one
		x := any(obj)
		if x == nil {
			return true
		}
		switch v := reflect.ValueOf(x); v.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Slice:
			return v.IsNil()
		}
	}
	return false
}

// lastSyncRevision returns the revision of the last list or watch event applied.
func (r *reflector[V]) lastSyncRevision() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastSync
}

// received records rev, when not empty, as the last revision received (Stats.ReceivedRevision),
// before the list or event that carries it is handed to the queue: whoever sees its
// effect (the cache synced, a handler called) sees the revision too.
func (r *reflector[V]) received(rev string) {
	if rev != "" {
		r.setLastSync(rev)
	}
}

func (r *reflector[V]) setLastSync(rev string) {
	r.mu.Lock()
	r.lastSync = rev
	r.mu.Unlock()
}

// lastError returns when the last source error was reported and the error, or the zero
// time and nil. It is cleared when the source recovers: a list is applied, or a watch delivers an
// event.
func (r *reflector[V]) lastError() (at time.Time, err error) {
	if e := r.lastErr.Load(); e != nil {
		return e.at, e.err
	}
	return time.Time{}, nil
}

// recovered clears the last source error.
func (r *reflector[V]) recovered() {
	if r.lastErr.Load() != nil {
		r.lastErr.Store(nil)
	}
}

// fail reports a source failure: to the error handler and Stats, as the last error, and
// to the log at Warn at most once per kind of failure per backoff step.
func (r *reflector[V]) fail(err error) {
	now := r.cfg.clock.Now()
	r.lastErr.Store(&sourceError{err: err, at: now})
	r.cfg.report(err)
	kind := failureKind(err)
	if last, ok := r.warned[kind]; ok && now.Sub(last) < r.backoff.step() {
		return
	}
	r.warned[kind] = now
	r.cfg.logger.Warn("source failure", "kind", kind, "err", err)
}

// failureKind names a failure's operation and class, the key of the Warn rate limit.
func failureKind(err error) string {
	op := "source"
	var oe *opError
	if errors.As(err, &oe) {
		op = oe.op
	}
	switch {
	case errors.Is(err, ErrExpired):
		return op + ": expired"
	case errors.Is(err, ErrRetryable):
		return op + ": retryable"
	case errors.Is(err, ErrBadInput):
		return op + ": bad input"
	}
	return op + ": other"
}

func (r *reflector[V]) opErr(op string, err error) error {
	return &opError{name: r.cfg.name, op: op, err: err}
}

// run lists and watches until ctx is done: every return of listAndWatch is followed by a
// wait (a backoff, or a small jitter after progress) and a fresh list.
func (r *reflector[V]) run(ctx context.Context) {
	r.cfg.logger.Debug("starting reflector")
	defer r.cfg.logger.Debug("stopping reflector")
	for ctx.Err() == nil {
		err := r.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		var d time.Duration
		if errors.Is(err, errRelistPromptly) {
			d = r.backoff.prompt()
		} else {
			if err != nil {
				r.fail(err)
			}
			d = r.backoff.next()
			if ra, ok := RetryAfterOf(err); ok && ra > d {
				d = ra // the source asked for at least this long (a 429 or 503 on a list)
			}
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

// listAndWatch is one pass: list (or stream the list), start the resync timer, then watch
// until the watch fails in a way that needs a relist.
func (r *reflector[V]) listAndWatch(ctx context.Context) error {
	if r.takeResume() {
		return r.resumeWatch(ctx) // warm restart: the cache holds the state at lastSync
	}
	r.progressed = false
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
			r.stop(w)
		}
		return nil
	}

	// The resync timer lives exactly as long as this pass.
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
	every(ctx, r.cfg.clock, period, func() bool {
		return !r.sink.shouldResync() || r.sink.resync() == nil
	})
}

// every calls fn once per period, on clk, until ctx is done or fn returns false. A period
// starts when the previous call returns.
func every(ctx context.Context, clk clock.Clock, period time.Duration, fn func() bool) {
	t := clk.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if !fn() {
			return
		}
		t.Reset(period)
	}
}

// list reads every page of one list and replaces the queue's contents. It asks for the
// cheapest list that is correct; see the rules at the top of this file.
func (r *reflector[V]) list(ctx context.Context) error {
	start := r.cfg.clock.Now()
	r.cfg.stats.ListStarted.Store(start.UnixNano())
	opts := ListOptions{Revision: r.lastSyncRevision()}
	if opts.Revision != "" && opts.Revision == r.unservable {
		opts = ListOptions{Consistent: true}
	}
	items, rev, err := r.listAt(ctx, opts)
	if !opts.Consistent && (errors.Is(err, ErrExpired) || errors.Is(err, errStaleList)) {
		// The source cannot serve a list at least as new as the revision already seen.
		if errors.Is(err, errStaleList) {
			r.fail(r.opErr("list", err))
		} else {
			r.cfg.stats.Expirations.Add(1)
			r.cfg.logger.Debug("list at the last revision expired; listing consistently", "revision", opts.Revision, "err", err)
		}
		r.unservable = opts.Revision
		items, rev, err = r.listAt(ctx, ListOptions{Consistent: true})
	}
	r.cfg.stats.ListStarted.Store(0) // read: no longer in progress
	r.cfg.stats.Lists.Add(1)
	r.cfg.stats.ListDuration.ObserveDuration(r.cfg.clock.Since(start))
	if err != nil {
		r.cfg.stats.ListErrors.Add(1)
		if ctx.Err() != nil {
			return nil // a stop during a list is not an error
		}
		if errors.Is(err, ErrExpired) {
			r.cfg.stats.Expirations.Add(1)
		}
		return r.opErr("list", err)
	}
	r.cfg.stats.ListItems.Observe(float64(len(items)))
	if d := r.cfg.clock.Since(start); d > 10*time.Second {
		r.cfg.logger.Info("slow list", "duration", d, "items", len(items))
	}
	r.recovered() // before the replace, so that a caller who sees the sync sees it too
	if r.expired {
		// The source served a list after an expiry: it compacted, it did not fail.
		r.backoff.reset()
	}
	r.expired = false
	r.received(rev)
	if err := r.sink.replace(items, rev); err != nil {
		return r.opErr("unable to sync list result", err)
	}
	return nil
}

// errStaleList is a first page older than the revision the list asked for.
var errStaleList = fmt.Errorf("%w: the list is older than the revision it was asked to be at least as new as", ErrBadInput)

// continueExpiredError is a page after the first that answered ErrExpired: the list's
// continue token expired.
type continueExpiredError struct{ err error }

func (e *continueExpiredError) Error() string {
	return fmt.Sprintf("continue token expired: %v", e.err)
}
func (e *continueExpiredError) Unwrap() error { return e.err }

// listAt reads one list at opts, paged; if its continue token expires, it reads the same
// list again unpaged.
func (r *reflector[V]) listAt(ctx context.Context, opts ListOptions) ([]V, string, error) {
	if opts.Consistent {
		r.cfg.stats.ConsistentLists.Add(1)
	}
	items, rev, err := r.listPages(ctx, opts, r.cfg.pageSize)
	var ce *continueExpiredError
	if errors.As(err, &ce) {
		r.cfg.stats.Expirations.Add(1)
		r.cfg.logger.Debug("continue token expired; listing again unpaged", "err", err)
		if opts.Consistent {
			r.cfg.stats.ConsistentLists.Add(1)
		}
		items, rev, err = r.listPages(ctx, opts, 0)
	}
	return items, rev, err
}

// listPages reads every page of one list with the given page size (0: one request).
func (r *reflector[V]) listPages(ctx context.Context, opts ListOptions, limit int64) (_ []V, _ string, err error) {
	rev := ""
	defer func() {
		if err != nil {
			r.sink.listAborted(rev)
		}
	}()
	var items []V
	opts.Limit = limit
	// A page must come within progressTimeout: a watchdog, not a timer per page, which
	// would cost more than a small page.
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	dog := newWatchdog(r.cfg.progressTimeout, func() { cancel(errPageTimeout) })
	defer dog.stop()
	// Brent's cycle detection over the continue tokens: a token equal to the one saved at
	// the last power of two is a cycle (a repeat is a cycle of length 1).
	saved, power, steps := "", 1, 0
	for page := 0; ; page++ {
		if page == MaxListPages {
			return nil, "", fmt.Errorf("%w: the list did not end after %d pages (MaxListPages)", ErrBadInput, MaxListPages)
		}
		l, err := r.callList(ctx, opts)
		dog.moved.Add(1)
		if err != nil && parent.Err() == nil && context.Cause(ctx) == errPageTimeout {
			err = fmt.Errorf("%w: a list page did not return within %v (Options.ProgressTimeout): %v", ErrNoProgress, r.cfg.progressTimeout, err)
		}
		if err != nil {
			if page > 0 && errors.Is(err, ErrExpired) {
				return nil, "", &continueExpiredError{err: err}
			}
			return nil, "", err
		}
		if page == 0 {
			rev = l.Revision
			if err := r.checkListRevision(rev, opts.Revision); err != nil {
				return nil, "", err
			}
		} else if l.Revision != rev {
			return nil, "", fmt.Errorf("%w: page %d of a list reports revision %q, the first page %q", ErrBadInput, page, l.Revision, rev)
		}
		l.Items = r.keepItems(l.Items, "list", page)
		if l.Continue != "" {
			r.sink.listPage(l.Items)
		}
		if items == nil {
			items = l.Items
		} else {
			items = append(items, l.Items...)
		}
		if l.Continue == "" {
			return items, rev, nil
		}
		if l.Continue == opts.Continue || l.Continue == saved {
			return nil, "", fmt.Errorf("%w: list page %d returned a continue token already returned (the pages repeat)", ErrBadInput, page)
		}
		if steps++; steps == power {
			saved, power, steps = l.Continue, power*2, 0
		}
		opts.Continue = l.Continue
	}
}

// checkListRevision checks a list's revision when revisions are ordered: present, well
// formed, and not older than asked (atLeast, when set).
func (r *reflector[V]) checkListRevision(rev, atLeast string) error {
	if r.compare == nil {
		return nil
	}
	if rev == "" {
		return fmt.Errorf("%w: the list reports no revision", ErrBadInput)
	}
	if _, err := r.compare.CompareRevisions(rev, rev); err != nil {
		return fmt.Errorf("%w: list revision %q: %v", ErrBadInput, rev, err)
	}
	if atLeast == "" {
		return nil
	}
	if c, err := r.compare.CompareRevisions(rev, atLeast); err == nil && c < 0 {
		return fmt.Errorf("%w: list at revision %s, asked for at least %s", errStaleList, rev, atLeast)
	}
	return nil
}

// keepItems drops the nil items of a list (reported as a failure of op) and applies the
// transform. page is the list page, or negative for a streaming list's initial events.
func (r *reflector[V]) keepItems(items []V, op string, page int) []V {
	if !r.nilable && r.transform == nil {
		return items
	}
	kept, nils, first := items[:0], 0, -1
	for i, obj := range items {
		if r.isNil(obj) {
			if nils++; first < 0 {
				first = i
			}
			continue
		}
		if r.transform != nil {
			var ok bool
			if obj, ok = r.transform(obj); !ok {
				continue
			}
		}
		kept = append(kept, obj)
	}
	clear(items[len(kept):])
	if nils > 0 {
		where := "the initial events"
		if page >= 0 {
			where = fmt.Sprintf("page %d", page)
		}
		r.fail(r.opErr(op, fmt.Errorf("%w: %d nil items skipped in %s (the first at index %d)", ErrBadInput, nils, where, first)))
	}
	return kept
}

// streamList starts a watch that begins with the current state (a streaming list) and
// replaces the queue's contents once the end-of-initial-events bookmark arrives. It returns
// the watch, which goes on with changes.
func (r *reflector[V]) streamList(ctx context.Context) (Watch[V], error) {
	start := r.cfg.clock.Now()
	r.cfg.stats.ListStarted.Store(start.UnixNano())
	defer r.cfg.stats.ListStarted.Store(0)
	opts := WatchOptions{SendInitialEvents: true, AllowBookmarks: true, Timeout: r.watchTimeout()}
	w, err := r.callWatch(ctx, opts)
	r.cfg.stats.Lists.Add(1)
	if err == nil && w == nil {
		err = errNoWatch
	}
	if err != nil {
		if w != nil {
			r.stop(w)
		}
		r.cfg.stats.ListDuration.ObserveDuration(r.cfg.clock.Since(start))
		r.cfg.stats.ListErrors.Add(1)
		if ctx.Err() != nil {
			return nil, nil
		}
		if errors.Is(err, ErrNotSupported) {
			return nil, err
		}
		return nil, r.opErr("streaming list", err)
	}
	var items []V
	dog := r.watchdog(w, r.cfg.progressTimeout)
	defer dog.stop()
	fail := func(err error) (Watch[V], error) {
		if dog.stalled.Load() {
			err = fmt.Errorf("%w: no initial event of the streaming list within %v (Options.ProgressTimeout): %v", ErrNoProgress, r.cfg.progressTimeout, err)
		}
		r.stop(w)
		r.cfg.stats.ListDuration.ObserveDuration(r.cfg.clock.Since(start))
		r.cfg.stats.ListErrors.Add(1)
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, r.opErr("streaming list", err)
	}
	for {
		ev, err := r.next(w)
		dog.moved.Add(1)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: stream ended before the end of the initial events", io.ErrUnexpectedEOF)
			}
			return fail(err)
		}
		switch {
		case ev.Type == Added:
			items = append(items, ev.Object)
		case ev.Type == Bookmark && ev.EndOfInitialEvents:
			if err := r.checkListRevision(ev.Revision, ""); err != nil {
				return fail(err)
			}
			items = r.keepItems(items, "streaming list", -1)
			r.cfg.stats.ListDuration.ObserveDuration(r.cfg.clock.Since(start))
			r.cfg.stats.ListItems.Observe(float64(len(items)))
			r.recovered()
			r.received(ev.Revision)
			r.cfg.stats.ListStarted.Store(0)
			if err := r.sink.replace(items, ev.Revision); err != nil {
				r.stop(w)
				return nil, r.opErr("unable to sync list result", err)
			}
			return w, nil
		case ev.Type == Bookmark:
		default:
			return fail(fmt.Errorf("%w: %v event before the end of the initial events", ErrBadInput, ev.Type))
		}
	}
}

// watchTimeout is uniform in [min, 2·min) so that reconnects spread out.
func (r *reflector[V]) watchTimeout() time.Duration {
	m := r.cfg.minWatchTimeout
	return m + time.Duration(rand.Int64N(int64(m)))
}

// watchLoop watches from the last synced revision over and over. A watch that ends
// normally is reopened from where it stopped; a retryable failure backs off and re-watches
// from the same revision without a relist; an expired revision or any other failure
// returns, so that the caller relists.
func (r *reflector[V]) watchLoop(ctx context.Context, w Watch[V]) error {
	for {
		if ctx.Err() != nil {
			if w != nil {
				r.stop(w)
			}
			return nil
		}
		start := r.cfg.clock.Now()
		if w == nil {
			var err error
			w, err = r.callWatch(ctx, WatchOptions{
				Revision:       r.lastSyncRevision(),
				Timeout:        r.watchTimeout(),
				AllowBookmarks: true,
			})
			r.cfg.stats.Watches.Add(1)
			if err == nil && w == nil {
				err = errNoWatch
			}
			if err != nil {
				if w != nil {
					r.stop(w)
					w = nil
				}
				r.cfg.stats.WatchErrors.Add(1)
				if retry, err := r.afterWatchError(ctx, err); !retry {
					return err
				}
				continue
			}
		}
		err := r.handleWatch(ctx, w)
		r.stop(w)
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
// (after it has backed off); otherwise the error to return: nil for a quiet relist after a
// backoff, errRelistPromptly for a relist after progress.
func (r *reflector[V]) afterWatchError(ctx context.Context, err error) (bool, error) {
	switch {
	case ctx.Err() != nil:
		return false, nil
	case errors.Is(err, ErrExpired):
		r.cfg.stats.Expirations.Add(1)
		if r.progressed {
			r.cfg.logger.Debug("watch revision expired after progress; relisting promptly", "err", err)
			return false, errRelistPromptly
		}
		r.cfg.logger.Debug("watch revision expired with no progress since the list; relisting after a backoff", "err", err)
		r.expired = true
		return false, nil
	case errors.Is(err, ErrRetryable):
		d := r.backoff.next()
		if ra, ok := RetryAfterOf(err); ok && ra > d {
			d = ra
		}
		r.fail(&opError{name: r.cfg.name, op: "watch", err: err, retry: d.Round(time.Millisecond)})
		return r.sleep(ctx, d), nil
	}
	return false, r.opErr("watch", err)
}

// handleWatch reads one watch until it ends. It returns nil when the stream ended
// normally.
func (r *reflector[V]) handleWatch(ctx context.Context, w Watch[V]) error {
	start := r.cfg.clock.Now()
	count := 0
	rev := r.lastSyncRevision()
	batched, _ := w.(BatchedWatch)
	var bound time.Duration
	if r.cfg.progressTimeout > 0 {
		bound = 2*r.cfg.minWatchTimeout + r.cfg.progressTimeout
	}
	dog := r.watchdog(w, bound)
	defer dog.stop()
	for {
		ev, err := r.next(w)
		dog.moved.Add(1)
		if err != nil {
			if ctx.Err() != nil {
				return nil // a stop is not an error
			}
			if dog.stalled.Load() {
				return fmt.Errorf("%w: the watch delivered nothing for %v (2×MinWatchTimeout + Options.ProgressTimeout; it was asked to end by 2×MinWatchTimeout): %v", ErrNoProgress, bound, err)
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
			if r.isNil(ev.Object) {
				return fmt.Errorf("%w: %v event at revision %q with a nil object", ErrBadInput, ev.Type, ev.Revision)
			}
			r.cfg.stats.countEvent(ev.Type)
			r.received(ev.Revision)
			if r.transform != nil {
				obj, ok := r.transform(ev.Object)
				if !ok {
					break
				}
				ev.Object = obj
			}
			if err := r.sink.event(ev, batched != nil && batched.MoreAtRevision()); err != nil {
				if errors.Is(err, errFIFOClosed) {
					return nil
				}
				// An object the informer cannot take is reported, not fatal.
				r.cfg.report(err)
			}
		case Bookmark:
			r.cfg.stats.Bookmarks.Add(1)
			r.received(ev.Revision)
			if ev.Revision != "" {
				r.sink.bookmark(ev.Revision)
			}
		default:
			return fmt.Errorf("%w: unknown event type %d", ErrBadInput, uint8(ev.Type))
		}
		if ev.Revision != "" {
			rev = ev.Revision
		}
		if count == 0 {
			// Progress: the backoff starts again from Initial, the source has recovered.
			r.progressed = true
			r.backoff.reset()
			r.recovered()
		}
		count++
	}
}

// The source's calls are a trust boundary: a panic in List, Watch, Watch.Next or
// Watch.Stop is recovered and becomes an error matching ErrBadInput that names the call,
// reported like any failure of the source; the reflector backs off and lists again.

func sourcePanic(call string, p any) error {
	return fmt.Errorf("%w: the source's %s panicked: %v", ErrBadInput, call, p)
}

// errPageTimeout is the cause of a list's context ended by Options.ProgressTimeout.
var errPageTimeout = errors.New("list page timeout")

// callList calls the source's List, recovering a panic.
func (r *reflector[V]) callList(ctx context.Context, opts ListOptions) (l List[V], err error) {
	defer func() {
		if p := recover(); p != nil {
			l, err = List[V]{}, sourcePanic("List", p)
		}
	}()
	return r.lw.List(ctx, opts)
}

// callWatch calls the source's Watch, recovering a panic.
func (r *reflector[V]) callWatch(ctx context.Context, opts WatchOptions) (w Watch[V], err error) {
	defer func() {
		if p := recover(); p != nil {
			w, err = nil, sourcePanic("Watch", p)
		}
	}()
	return r.lw.Watch(ctx, opts)
}

// next calls w.Next, recovering a panic.
func (r *reflector[V]) next(w Watch[V]) (ev Event[V], err error) {
	defer func() {
		if p := recover(); p != nil {
			ev, err = Event[V]{}, sourcePanic("Watch.Next", p)
		}
	}()
	return w.Next()
}

// watchdog ends a call that makes no progress for a whole bound (checked every bound, so
// a stall is found between one and two bounds after the last progress): the reading
// goroutine counts each return of Next, or each page, in moved; stalled says the
// watchdog called its end function. It runs on the wall clock: a fake clock's waiters
// stay the test's.
type watchdog struct {
	moved   atomic.Uint64
	stalled atomic.Bool
	mu      sync.Mutex
	t       *time.Timer // nil: no bound, or stopped
}

func (r *reflector[V]) watchdog(w Watch[V], bound time.Duration) *watchdog {
	return newWatchdog(bound, func() {
		defer func() { _ = recover() }() // a panic in Stop is reported by the reader's stop
		w.Stop()
	})
}

func newWatchdog(bound time.Duration, end func()) *watchdog {
	d := &watchdog{}
	if bound <= 0 {
		return d
	}
	seen := uint64(0)
	var check func()
	check = func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.t == nil {
			return // stopped
		}
		if m := d.moved.Load(); m != seen {
			seen = m
			d.t = time.AfterFunc(bound, check)
			return
		}
		d.stalled.Store(true)
		d.t = nil
		end()
	}
	d.mu.Lock()
	d.t = time.AfterFunc(bound, check)
	d.mu.Unlock()
	return d
}

// stop ends the watchdog.
func (d *watchdog) stop() {
	d.mu.Lock()
	if d.t != nil {
		d.t.Stop()
		d.t = nil
	}
	d.mu.Unlock()
}

// stop calls w.Stop; a panic is recovered and reported (the watch is over either way).
func (r *reflector[V]) stop(w Watch[V]) {
	defer func() {
		if p := recover(); p != nil {
			r.fail(r.opErr("watch", sourcePanic("Watch.Stop", p)))
		}
	}()
	w.Stop()
}

// --- warm restart (Options.Persist) ---

// resumeFrom makes the next pass of listAndWatch watch from rev, the revision of a state
// the informer restored, instead of listing. If the source says rev expired (a snapshot
// older than the source's history), the reflector relists promptly, as after an expiry
// that followed progress: the restored state counts as progress.
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
	r.progressed = true // an expired snapshot revision is expected: relist promptly
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
