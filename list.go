package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"
	"unsafe"
)

// listCounts are the counters a lister moves (the informer's Stats).
type listCounts interface {
	ConsistentList()
	Expired()
	ListReceived(n int)
}

// lister reads one list of the source, page by page: the reflector's list calls, with
// the checks a list's pages must pass and the items it must drop.
type lister[V any] struct {
	lw        ListerWatcher[V]
	compare   RevisionComparer // nil when revisions are opaque
	name      string           // the informer's, for errors
	pageSize  int64            // 0: no paging
	timeout   time.Duration    // a page must come within it (ProgressTimeout); 0: no bound
	logger    *slog.Logger
	stats     listCounts
	fail      func(error) // the source state's Fail: a failure to report
	sink      reflectorSink[V]
	nilable   bool              // V is a pointer, interface, map, channel or function type
	oneWord   bool              // V is a pointer, map, channel or function type: one word, nil or not
	transform func(V) (V, bool) // nil: none; false means the object failed and was reported
}

// newLister returns the lister of lw; pageSize is Options.PageSize (see pageSizeOf).
func newLister[V any](lw ListerWatcher[V], name string, pageSize int64, timeout time.Duration, logger *slog.Logger, stats listCounts, fail func(error), sink reflectorSink[V]) *lister[V] {
	l := &lister[V]{lw: lw, name: name, pageSize: pageSizeOf(lw, pageSize), timeout: timeout, logger: logger, stats: stats, fail: fail, sink: sink}
	l.compare, _ = lw.(RevisionComparer)
	switch reflect.TypeFor[V]().Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		l.nilable, l.oneWord = true, true
	case reflect.Interface:
		l.nilable = true
	}
	return l
}

// errPageTimeout is the cause of a list's context ended by Options.ProgressTimeout.
var errPageTimeout = errors.New("list page timeout")

// errStaleList is a first page older than the revision the list asked for.
var errStaleList = fmt.Errorf("%w: the list is older than the revision it was asked to be at least as new as", ErrBadInput)

// continueExpiredError is a page after the first that answered ErrExpired: the list's
// continue token expired.
type continueExpiredError struct{ err error }

func (e *continueExpiredError) Error() string {
	return fmt.Sprintf("continue token expired: %v", e.err)
}

func (e *continueExpiredError) Unwrap() error { return e.err }

// List reads one list at opts, paged; if its continue token expires, it reads the same
// list again unpaged.
func (ls *lister[V]) List(ctx context.Context, opts ListOptions) ([]V, string, error) {
	if opts.Consistent {
		ls.stats.ConsistentList()
	}
	items, rev, err := ls.listPages(ctx, opts, ls.pageSize)
	var ce *continueExpiredError
	if errors.As(err, &ce) {
		ls.stats.Expired()
		ls.logger.Debug("continue token expired; listing again unpaged", "err", err)
		if opts.Consistent {
			ls.stats.ConsistentList()
		}
		items, rev, err = ls.listPages(ctx, opts, 0)
	}
	return items, rev, err
}

// listPages reads every page of one list with the given page size (0: one request).
func (ls *lister[V]) listPages(ctx context.Context, opts ListOptions, limit int64) (_ []V, _ string, err error) {
	rev := ""
	defer func() {
		if err != nil {
			ls.sink.ListAborted(rev)
		}
	}()
	var items []V
	opts.Limit = limit
	// A page must come within progressTimeout: a watchdog, not a timer per page, which
	// would cost more than a small page.
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	dog := newWatchdog(ls.timeout, func() { cancel(errPageTimeout) })
	defer dog.Stop()
	// Brent's cycle detection over the continue tokens: a token equal to the one saved at
	// the last power of two is a cycle (a repeat is a cycle of length 1).
	saved, power, steps := "", 1, 0
	received := 0
	for page := 0; ; page++ {
		if page == MaxListPages {
			return nil, "", fmt.Errorf("%w: the list did not end after %d pages (MaxListPages)", ErrBadInput, MaxListPages)
		}
		l, err := ls.callList(ctx, opts)
		dog.Moved()
		if err != nil && parent.Err() == nil && context.Cause(ctx) == errPageTimeout {
			err = fmt.Errorf("%w: a list page did not return within %v (Options.ProgressTimeout): %v", ErrNoProgress, ls.timeout, err)
		}
		if err != nil {
			if page > 0 && errors.Is(err, ErrExpired) {
				return nil, "", &continueExpiredError{err: err}
			}
			return nil, "", err
		}
		if page == 0 {
			rev = l.Revision
			if err := ls.CheckRevision(rev, opts.Revision); err != nil {
				return nil, "", err
			}
		} else if l.Revision != rev {
			return nil, "", fmt.Errorf("%w: page %d of a list reports revision %q, the first page %q", ErrBadInput, page, l.Revision, rev)
		}
		received += len(l.Items)
		ls.stats.ListReceived(received)
		l.Items = ls.Keep(l.Items, "list", page)
		if l.Continue != "" {
			ls.sink.ListPage(l.Items)
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

// CheckRevision checks a list's revision when revisions are ordered: present, well
// formed, and not older than asked (atLeast, when set).
func (ls *lister[V]) CheckRevision(rev, atLeast string) error {
	if ls.compare == nil {
		return nil
	}
	if rev == "" {
		return fmt.Errorf("%w: the list reports no revision", ErrBadInput)
	}
	if _, err := ls.compare.CompareRevisions(rev, rev); err != nil {
		return fmt.Errorf("%w: list revision %q: %v", ErrBadInput, rev, err)
	}
	if atLeast == "" {
		return nil
	}
	if c, err := ls.compare.CompareRevisions(rev, atLeast); err == nil && c < 0 {
		return fmt.Errorf("%w: list at revision %s, asked for at least %s", errStaleList, rev, atLeast)
	}
	return nil
}

// Keep drops the nil items of a list (reported as a failure of op) and applies the
// transform. page is the list page, or negative for a streaming list's initial events.
func (ls *lister[V]) Keep(items []V, op string, page int) []V {
	if !ls.nilable && ls.transform == nil {
		return items
	}
	kept, nils, first := items[:0], 0, -1
	for i, obj := range items {
		if ls.IsNil(obj) {
			if nils++; first < 0 {
				first = i
			}
			continue
		}
		if ls.transform != nil {
			var ok bool
			if obj, ok = ls.transform(obj); !ok {
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
		ls.fail(newOpError(ls.name, op, fmt.Errorf("%w: %d nil items skipped in %s (the first at index %d)", ErrBadInput, nils, where, first), 0))
	}
	return kept
}

// The source's calls are a trust boundary: a panic in List (callList), Watch, Watch.Next
// or Watch.Stop (the reflector's callWatch, next and stop) is recovered and becomes an
// error matching ErrBadInput that names the call, reported like any failure of the
// source; the reflector backs off and lists again.

// sourcePanic is the error of a panic p in the source's call.
func sourcePanic(call string, p any) error {
	return fmt.Errorf("%w: the source's %s panicked: %v", ErrBadInput, call, p)
}

// callList calls the source's List, recovering a panic.
func (ls *lister[V]) callList(ctx context.Context, opts ListOptions) (l List[V], err error) {
	defer func() {
		if p := recover(); p != nil {
			l, err = List[V]{}, sourcePanic("List", p)
		}
	}()
	return ls.lw.List(ctx, opts)
}

// IsNil reports whether obj is a nil pointer, interface, map, channel or function (or an
// interface holding one). It is called for every object: a pointer, map, channel or
// function value is one machine word, nil when that word is, so no reflection is needed
// (0.6 ns against 3.4 with reflect). An interface holding a value of a kind that cannot be
// nil (a struct) is not nil: asking reflect whether it is would panic.
func (ls *lister[V]) IsNil(obj V) bool {
	switch {
	case ls.oneWord:
		return *(*unsafe.Pointer)(unsafe.Pointer(&obj)) == nil
	case ls.nilable: // an interface: nil, or holding a nil of a kind that has one
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

// SetTransform makes the lister, and Transformed, apply fn to every object as it arrives;
// false means the object failed (and was reported) and is dropped.
func (ls *lister[V]) SetTransform(fn func(V) (V, bool)) { ls.transform = fn }

// Transformed applies the transform to obj, if there is one; false means the object
// failed (and was reported) and is dropped.
func (ls *lister[V]) Transformed(obj V) (V, bool) {
	if ls.transform == nil {
		return obj, true
	}
	return ls.transform(obj)
}

// MaxListPages bounds the pages of one list. A list that has not ended after this many
// pages (a source whose continue tokens never run out) fails with an error matching
// ErrBadInput, as does a list whose continue token comes back (a repeat or a cycle, found
// in O(1) memory however long the cycle). 100,000 pages of the default 500 objects are
// 50 million objects.
const MaxListPages = 100_000

// pageSizeOf is the list Limit of an informer whose Options.PageSize is requested: 0 for
// no paging when it is negative; when it is 0, the source's page size (PageSizer), else
// 500.
func pageSizeOf[V any](lw ListerWatcher[V], requested int64) int64 {
	if requested != 0 {
		return max(requested, 0)
	}
	if ps, ok := lw.(PageSizer); ok {
		if n := ps.DefaultPageSize(); n != 0 {
			return max(n, 0)
		}
	}
	return 500
}
