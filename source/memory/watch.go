package memory

import (
	"context"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/eventlog"
)

// ErrWatchStopped is returned by Next once Stop has been called on the watch.
var ErrWatchStopped = eventlog.ErrWatchStopped

// Watch implements informer.ListerWatcher: it streams the changes with a revision after
// opts.Revision, in revision order, read from the shared log (nothing is copied per
// watch). opts.Revision "" means the current revision, so only later changes are sent.
//
// With opts.SendInitialEvents (and Options.StreamingList set) the stream starts with the
// current state as Added events at the current revision, sorted by key, then a Bookmark at
// that revision with EndOfInitialEvents set (whether or not opts.AllowBookmarks is), then
// the changes after it; opts.Revision then only means "at least this fresh". The state is
// copied into the watch when it opens, O(n).
//
// Watch itself fails with ctx.Err() if ctx is done (before or during the delay set with
// SetDelay); with an error injected by FailNext; with an error matching
// informer.ErrNotSupported for SendInitialEvents without Options.StreamingList; with an
// error matching informer.ErrExpired for a Revision older than the compacted revision or
// newer than the current one ("too large"); with a plain error for a malformed Revision.
//
// The returned watch needs no goroutine of its own: Next waits on the watch's channels,
// costs one lock and no allocation when an event is ready, and delivers, in order, the
// initial events, then the log, with events sent by Inject and Bookmark placed where they
// were made, and (with opts.AllowBookmarks and Options.BookmarkInterval > 0) a Bookmark at
// the current revision whenever the bookmark timer fires while the watch is idle; that
// timer restarts each time it fires. The stream ends, and Next returns the same error
// from then on, abandoning any undelivered events, when:
//   - Stop is called (also from another goroutine, unblocking Next): ErrWatchStopped;
//   - ctx is done: ctx.Err();
//   - opts.Timeout (if > 0) has passed on the Options clock: io.EOF;
//   - DropWatches is called: its error, io.EOF for nil;
//   - the next event to deliver was compacted away, or the first change after the
//     initial events was while some of them were still to deliver (a slow reader would
//     otherwise pin the old state): an error matching informer.ErrExpired.
//
// The consumer then watches again from the last revision it received. Stop is idempotent
// and releases the watch's timers; a stream that ended keeps its first error.
func (s *Source[K, V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	if err := s.enter(ctx, Request{Op: OpWatch, Watch: opts}); err != nil {
		return nil, err
	}
	return s.log.Watch(ctx, opts)
}
