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

// reflectorSink is where the reflector writes: the informer's queue.
type reflectorSink[V any] interface {
	Replace(items []V, rev string) error
	// ListPage sees each page of a paged list but the last as it is read, which then
	// comes with the whole list in Replace; ListAborted says that the list failed, and
	// the revision its pages were at ("" if none was read).
	ListPage(items []V)
	ListAborted(rev string)
	Event(ev Event[V], more bool) error // Added, Modified, Deleted; more: see BatchedWatch
	Bookmark(rev string)
	Resync() error
	ResyncPeriod() time.Duration
	ShouldResync() bool
	// Transform applies Options.Transform; false means the object failed and was
	// reported.
	Transform(obj V) (V, bool)
}

// reflectorConfig holds what the informer passes to its reflector.
type reflectorConfig struct {
	name            string
	pageSize        int64 // Options.PageSize
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
	cfg      *reflectorConfig
	lw       ListerWatcher[V]
	compare  RevisionComparer // nil when revisions are opaque
	sink     reflectorSink[V]
	backoff  *backoff
	src      *sourceState                    // the last revision, the last failure
	pages    *lister[V]                      // reads one list
	noStream bool                            // the source said ErrNotSupported to a streaming list
	confirm  func(ctx context.Context) error // checks a restored state before its watch
	leave    func()                          // called when the source is found on another history

	// Used by the reflector's goroutine only.
	unservable string // a revision the source answered expired to a list at
	progressed bool   // a watch delivered an event since the last list
	expired    bool   // the pass ended because the watch expired with no progress
}

var (
	// errVeryShortWatch: a watch ended within a second with no event; the source is
	// probably failing fast, so the reflector relists after a backoff. Its log kind is
	// "watch: very short".
	errVeryShortWatch error = kindError{kind: "very short", msg: "very short watch: the watch ended within a second and delivered nothing; listing again after the backoff (see SOURCES.md)"}
	// errRelistPromptly ends a pass whose watch expired after progress: relist after a
	// small jitter, not a backoff.
	errRelistPromptly = errors.New("relist promptly")
	// errNoWatch is what a Watch that returned neither a watch nor an error becomes.
	errNoWatch = fmt.Errorf("%w: Watch returned neither a watch nor an error", ErrBadInput)
)

// kindError is an error with a class of its own in the log's kind (see failureKind).
type kindError struct{ kind, msg string }

func (e kindError) Error() string { return e.msg }

// FailureKind is the error's class in the log's kind, after the operation.
func (e kindError) FailureKind() string { return e.kind }

// RequestProgress asks the source for progress (Informer.RequestProgress).
func (r *reflector[V]) RequestProgress(ctx context.Context) error {
	p, ok := r.lw.(ProgressRequester)
	if !ok {
		return fmt.Errorf("informer %q: requesting progress: %w", r.cfg.name, ErrNotSupported)
	}
	if err := p.RequestProgress(ctx); err != nil {
		return fmt.Errorf("informer %q: requesting progress: %w", r.cfg.name, err)
	}
	return nil
}

// newReflector returns the reflector of lw into sink, configured by opts (with New's
// defaults applied).
func newReflector[K comparable, V any](lw ListerWatcher[V], sink reflectorSink[V], opts Options[K, V], logger *slog.Logger, report func(error), stats *counters) *reflector[V] {
	r := newReflectorOf(lw, sink, reflectorConfig{
		name:            opts.Name,
		pageSize:        opts.PageSize,
		minWatchTimeout: opts.MinWatchTimeout,
		progressTimeout: max(opts.ProgressTimeout, 0),
		backoff:         opts.Backoff,
		clock:           opts.Clock,
		logger:          logger,
		report:          report,
		stats:           stats,
	})
	if opts.Transform != nil {
		r.pages.SetTransform(sink.Transform)
	}
	return r
}

func newReflectorOf[V any](lw ListerWatcher[V], sink reflectorSink[V], cfg reflectorConfig) *reflector[V] {
	r := &reflector[V]{cfg: &cfg, lw: lw, sink: sink}
	r.compare, _ = lw.(RevisionComparer)
	r.backoff = newBackoff(cfg.backoff, cfg.clock)
	r.src = newSourceState(cfg.clock, cfg.logger, cfg.report, r.backoff.Step)
	r.pages = newLister(lw, cfg.name, cfg.pageSize, cfg.progressTimeout, cfg.clock, cfg.logger, cfg.stats, r.src.Fail, sink)
	if s, ok := lw.(StreamingLister); !ok || !s.StreamingList() {
		r.noStream = true
	}
	return r
}

// OnOtherHistory sets what the reflector calls when it finds the source on another
// history (a watch ends with ErrOtherHistory, or a list is older than the revision already
// reached), before it lists again.
func (r *reflector[V]) OnOtherHistory(leave func()) { r.leave = leave }

func (r *reflector[V]) leftHistory() {
	if r.leave != nil {
		r.leave()
	}
}

// run lists and watches until ctx is done: every return of listAndWatch is followed by a
// wait (a backoff, or a small jitter after progress) and a fresh list.
func (r *reflector[V]) Run(ctx context.Context) {
	r.cfg.logger.Debug("starting reflector")
	defer r.cfg.logger.Debug("stopping reflector")
	for ctx.Err() == nil {
		err := r.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		var d time.Duration
		if errors.Is(err, errRelistPromptly) {
			d = r.backoff.Prompt()
		} else {
			if err != nil {
				r.fail(err)
			}
			d = r.backoff.Next()
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
	if r.src.TakeResume() {
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
	defer r.startResync(ctx)()
	return r.watchLoop(ctx, w)
}

// startResync runs the resync timer, if the informer has a resync period, until the
// returned stop is called; stop waits for the timer's goroutine to end.
func (r *reflector[V]) startResync(ctx context.Context) (stop func()) {
	passCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if period := r.sink.ResyncPeriod(); period > 0 {
		wg.Go(func() { r.resyncLoop(passCtx, period) })
	}
	return func() { cancel(); wg.Wait() }
}

func (r *reflector[V]) resyncLoop(ctx context.Context, period time.Duration) {
	every(ctx, r.cfg.clock, period, func() bool {
		return !r.sink.ShouldResync() || r.sink.Resync() == nil
	})
}

// list reads every page of one list and replaces the queue's contents. It asks for the
// cheapest list that is correct; see the rules at the top of this file.
func (r *reflector[V]) list(ctx context.Context) error {
	start := r.cfg.clock.Now()
	r.cfg.stats.ListBegan(start)
	opts := ListOptions{Revision: r.LastSyncRevision()}
	if opts.Revision != "" && opts.Revision == r.unservable {
		opts = ListOptions{Consistent: true}
	}
	items, rev, err := r.pages.List(ctx, opts)
	if !opts.Consistent && (errors.Is(err, ErrExpired) || errors.Is(err, errStaleList)) {
		// The source cannot serve a list at least as new as the revision already seen.
		if errors.Is(err, errStaleList) {
			// The source went back: another history, until a list of it is in.
			r.leftHistory()
			r.fail(r.opErr("list", err))
		} else {
			r.cfg.stats.Expired()
			r.cfg.logger.Debug("list at the last revision expired; listing consistently", "revision", opts.Revision, "err", err)
		}
		r.unservable = opts.Revision
		items, rev, err = r.pages.List(ctx, ListOptions{Consistent: true})
	}
	r.cfg.stats.ListEnded() // read: no longer in progress
	r.cfg.stats.Listed()
	r.cfg.stats.ListTook(r.cfg.clock.Since(start))
	if err != nil {
		r.cfg.stats.ListFailed()
		if ctx.Err() != nil {
			return nil // a stop during a list is not an error
		}
		if errors.Is(err, ErrExpired) {
			r.cfg.stats.Expired()
		}
		return r.opErr("list", err)
	}
	r.cfg.stats.ListHeld(len(items))
	r.pages.Listed(len(items))
	r.src.Recovered() // before the replace, so that a caller who sees the sync sees it too
	if r.expired {
		// The source served a list after an expiry: it compacted, it did not fail.
		r.backoff.Reset()
	}
	r.expired = false
	r.src.Received(rev)
	if err := r.sink.Replace(items, rev); err != nil {
		return r.opErr("unable to sync list result", err)
	}
	return nil
}

// streamList starts a watch that begins with the current state (a streaming list) and
// replaces the queue's contents once the end-of-initial-events bookmark arrives. It returns
// the watch, which goes on with changes.
func (r *reflector[V]) streamList(ctx context.Context) (Watch[V], error) {
	start := r.cfg.clock.Now()
	r.cfg.stats.ListBegan(start)
	defer r.cfg.stats.ListEnded()
	opts := WatchOptions{SendInitialEvents: true, AllowBookmarks: true, Timeout: r.watchTimeout()}
	r.pages.Began()
	answered := r.pages.AwaitAnswer("streaming list")
	w, err := r.callWatch(ctx, opts)
	answered()
	r.cfg.stats.Listed()
	if err != nil {
		r.cfg.stats.ListTook(r.cfg.clock.Since(start))
		r.cfg.stats.ListFailed()
		if ctx.Err() != nil {
			return nil, nil
		}
		if errors.Is(err, ErrNotSupported) {
			return nil, err
		}
		return nil, r.opErr("streaming list", err)
	}
	var items []V
	dog := watchdogOf(w, r.cfg.progressTimeout)
	defer dog.Stop()
	fail := func(err error) (Watch[V], error) {
		if dog.Stalled() {
			err = fmt.Errorf("%w: no initial event of the streaming list within %v (Options.ProgressTimeout): %v", ErrNoProgress, r.cfg.progressTimeout, err)
		}
		r.stop(w)
		r.cfg.stats.ListTook(r.cfg.clock.Since(start))
		r.cfg.stats.ListFailed()
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, r.opErr("streaming list", err)
	}
	for {
		ev, err := r.next(w)
		dog.Moved()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: stream ended before the end of the initial events", io.ErrUnexpectedEOF)
			}
			return fail(err)
		}
		switch {
		case ev.Type == Added:
			items = append(items, ev.Object)
			r.pages.Received(1, 0, false)
		case ev.Type == Bookmark && ev.EndOfInitialEvents:
			if err := r.pages.CheckRevision(ev.Revision, ""); err != nil {
				return fail(err)
			}
			items = r.pages.Keep(items, "streaming list", -1)
			r.cfg.stats.ListTook(r.cfg.clock.Since(start))
			r.cfg.stats.ListHeld(len(items))
			r.pages.Listed(len(items))
			r.src.Recovered()
			r.src.Received(ev.Revision)
			r.cfg.stats.ListEnded()
			if err := r.sink.Replace(items, ev.Revision); err != nil {
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
				Revision:       r.LastSyncRevision(),
				Timeout:        r.watchTimeout(),
				AllowBookmarks: true,
			})
			r.cfg.stats.WatchOpened()
			if err != nil {
				r.cfg.stats.WatchFailed()
				if retry, err := r.afterWatchError(ctx, err); !retry {
					return err
				}
				continue
			}
		}
		err := r.handleWatch(ctx, w)
		r.stop(w)
		w = nil
		r.cfg.stats.WatchTook(r.cfg.clock.Since(start))
		if err == nil {
			continue
		}
		r.cfg.stats.WatchFailed()
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
		r.cfg.stats.Expired()
		if errors.Is(err, ErrOtherHistory) { // unlike a compaction, worth telling
			r.leftHistory()
			r.cfg.report(r.opErr("watch", err))
			// The revision reached is of the history left: the source cannot serve a list
			// at least as new as it, and the next list is a consistent one.
			r.unservable = r.LastSyncRevision()
		}
		if r.progressed {
			r.cfg.logger.Debug("watch revision expired after progress; relisting promptly", "err", err)
			return false, errRelistPromptly
		}
		r.cfg.logger.Debug("watch revision expired with no progress since the list; relisting after a backoff", "err", err)
		r.expired = true
		return false, nil
	case errors.Is(err, ErrRetryable):
		d := r.backoff.Next()
		if ra, ok := RetryAfterOf(err); ok && ra > d {
			d = ra
		}
		r.fail(newOpError(r.cfg.name, "watch", err, d.Round(time.Millisecond)))
		return r.sleep(ctx, d), nil
	}
	return false, r.opErr("watch", err)
}

// handleWatch reads one watch until it ends. It returns nil when the stream ended
// normally.
func (r *reflector[V]) handleWatch(ctx context.Context, w Watch[V]) error {
	start := r.cfg.clock.Now()
	count := 0
	rev := r.LastSyncRevision()
	batched, _ := w.(BatchedWatch)
	var bound time.Duration
	if r.cfg.progressTimeout > 0 {
		bound = 2*r.cfg.minWatchTimeout + r.cfg.progressTimeout
	}
	dog := watchdogOf(w, bound)
	defer dog.Stop()
	for {
		ev, err := r.next(w)
		dog.Moved()
		if err != nil {
			if ctx.Err() != nil {
				return nil // a stop is not an error
			}
			if dog.Stalled() {
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
			if r.pages.IsNil(ev.Object) {
				return fmt.Errorf("%w: %v event at revision %q with a nil object", ErrBadInput, ev.Type, ev.Revision)
			}
			r.cfg.stats.Event(ev.Type)
			r.src.Received(ev.Revision)
			more := batched != nil && batched.MoreAtRevision()
			obj, ok := r.pages.Transformed(ev.Object)
			if ok {
				ev.Object = obj
				err := r.sink.Event(ev, more)
				if errors.Is(err, ErrStopped) { // the queue closed
					return nil
				}
				if ok = err == nil; !ok {
					// An object the informer cannot take is reported, not fatal.
					r.cfg.report(err)
				}
			}
			if !ok && !more && ev.Revision != "" {
				// The last change of its revision was left out: the revision is reached
				// all the same (a transaction the queue holds open ends here).
				r.sink.Bookmark(ev.Revision)
			}
		case Bookmark:
			r.cfg.stats.Bookmark()
			r.src.Received(ev.Revision)
			if ev.Revision != "" {
				r.sink.Bookmark(ev.Revision)
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
			r.backoff.Reset()
			r.src.Recovered()
		}
		count++
	}
}

// callWatch calls the source's Watch, recovering a panic. It returns a watch or an error,
// never both nor neither: a nil watch with no error is errNoWatch, and a watch returned
// beside an error is stopped.
func (r *reflector[V]) callWatch(ctx context.Context, opts WatchOptions) (w Watch[V], err error) {
	defer func() {
		if p := recover(); p != nil {
			w, err = nil, sourcePanic("Watch", p)
		}
	}()
	w, err = r.lw.Watch(ctx, opts)
	switch {
	case err != nil && w != nil:
		r.stop(w)
		return nil, err
	case err == nil && w == nil:
		return nil, errNoWatch
	}
	return w, err
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

// stop calls w.Stop; a panic is recovered and reported (the watch is over either way).
func (r *reflector[V]) stop(w Watch[V]) {
	defer func() {
		if p := recover(); p != nil {
			r.fail(r.opErr("watch", sourcePanic("Watch.Stop", p)))
		}
	}()
	w.Stop()
}

// resumeWatch is the pass of listAndWatch that resumes a restored state: the resync timer
// and the watch, without a list.
func (r *reflector[V]) resumeWatch(ctx context.Context) error {
	r.progressed = true // an expired snapshot revision is expected: relist promptly
	if r.confirm != nil && r.confirm(ctx) != nil {
		return errRelistPromptly // refused, and reported, by confirm
	}
	defer r.startResync(ctx)()
	return r.watchLoop(ctx, nil)
}

// fail reports a source failure (see sourceState.Fail).
func (r *reflector[V]) fail(err error) { r.src.Fail(err) }

// OpErr is a failed operation of the informer's source, named.
func (c *reflectorConfig) OpErr(op string, err error) error {
	return newOpError(c.name, op, err, 0)
}

func (r *reflector[V]) opErr(op string, err error) error { return r.cfg.OpErr(op, err) }

// LastSyncRevision returns the revision of the last list or watch event received.
func (r *reflector[V]) LastSyncRevision() string { return r.src.LastSyncRevision() }

// LastError returns the last source error and when it was reported (see Informer.LastError).
func (r *reflector[V]) LastError() (time.Time, error) { return r.src.LastError() }

// ResumeFrom makes the next pass of listAndWatch watch from rev, the revision of a state
// the informer restored, instead of listing. If the source says rev expired (a snapshot
// older than the source's history), the reflector relists promptly, as after an expiry
// that followed progress: the restored state counts as progress.
func (r *reflector[V]) ResumeFrom(rev string) { r.src.ResumeFrom(rev) }

// ConfirmWith makes a resumed watch wait for confirm, which checks the restored state
// (see warm.Confirm); an error makes the reflector list instead.
func (r *reflector[V]) ConfirmWith(confirm func(ctx context.Context) error) { r.confirm = confirm }
