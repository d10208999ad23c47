package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/eventlog"
	"github.com/informer-go/informer/internal/wire"
)

// valueFilter is the filter a request asks for: the objects under one value of one of the
// Server's filter indexes (index=<Index>&value=<Value>); the zero valueFilter is none.
type valueFilter struct {
	Index string
	Value string
}

// String returns the filter as its error messages name it: index="value".
func (f valueFilter) String() string { return fmt.Sprintf("%s=%q", f.Index, f.Value) }

// IsZero reports whether f is no filter.
func (f valueFilter) IsZero() bool { return f.Index == "" }

// maxFilterValue bounds the length of a filter's index name and value in a request;
// longer is answered 400.
const maxFilterValue = 1024

// parseFilter reads a filter from a request's query; parseRequest has checked that each
// parameter is given at most once.
func parseFilter(q url.Values) (valueFilter, *wire.Status) {
	idx, hasIdx := q[wire.ParamIndex]
	val, hasVal := q[wire.ParamValue]
	bad := func(format string, args ...any) (valueFilter, *wire.Status) {
		return valueFilter{}, badRequest(format, args...)
	}
	switch {
	case !hasIdx && !hasVal:
		return valueFilter{}, nil
	case !hasIdx:
		return bad("%s=%q needs %s=, the name of the filter index", wire.ParamValue, val[0], wire.ParamIndex)
	case !hasVal:
		return bad("%s=%q needs %s=, the value to filter by", wire.ParamIndex, idx[0], wire.ParamValue)
	case idx[0] == "":
		return bad("%s is empty: name a filter index", wire.ParamIndex)
	case len(idx[0]) > maxFilterValue || len(val[0]) > maxFilterValue:
		return bad("%s or %s is longer than %d bytes", wire.ParamIndex, wire.ParamValue, maxFilterValue)
	}
	return valueFilter{Index: idx[0], Value: val[0]}, nil
}

// checkFilter answers 400 for a filter on an index the server does not have (known:
// the ones it has), naming the ones it has.
func checkFilter(f valueFilter, known []string) *wire.Status {
	if f.Index == "" {
		return nil
	}
	if slices.Contains(known, f.Index) {
		return nil
	}
	msg := fmt.Sprintf("unknown filter index %q: this server has none (a Server serves the informer indexes its ServerOptions.Filters names)", f.Index)
	if len(known) > 0 {
		msg = fmt.Sprintf("unknown filter index %q: this server's filter indexes are %s", f.Index, strings.Join(known, ", "))
	}
	return &wire.Status{Code: http.StatusBadRequest, Reason: "BadRequest", Message: msg}
}

// newFilterHub returns the hub of inf's indexes of the given names (ServerOptions.Filters),
// or nil for none; bookmarks is the interval of a watch's bookmarks (0: none), clk times
// them (nil: clock.Real{}). It is made before the Server's handler is added to inf, so
// that the indexes see every change.
func newFilterHub[K cmp.Ordered, V any](inf *informer.Informer[K, V], names []string, clk clock.Clock, bookmarks time.Duration, stats *counters, rep *reporter) (*filterHub[K, V], error) {
	if len(names) == 0 {
		return nil, nil
	}
	h := &filterHub[K, V]{
		clock:     clk,
		bookmarks: bookmarks,
		rep:       rep,
		stats:     stats,
		revStr:    "0",
	}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	h.indexNames = slices.Clone(names)
	slices.Sort(h.indexNames)
	for i, name := range h.indexNames {
		switch {
		case name == "":
			return nil, errors.New("fanout: NewServer: ServerOptions.Filters has an empty name: name one of the informer's indexes")
		case i > 0 && name == h.indexNames[i-1]:
			return nil, fmt.Errorf("fanout: NewServer: ServerOptions.Filters names %q twice", name)
		case len(name) > maxFilterValue:
			return nil, fmt.Errorf("fanout: NewServer: ServerOptions.Filters has an index name longer than %d bytes", maxFilterValue)
		}
		ix, err := inf.Index(name)
		if err != nil {
			return nil, fmt.Errorf("fanout: NewServer: ServerOptions.Filters of informer %q: %w: declare it in informer.Options.Indexers", inf.Name(), err)
		}
		h.fns = append(h.fns, ix)
		h.indexes = append(h.indexes, filterIndex[K, V]{values: map[string]*filterValue[K, V]{}, of: map[K][]string{}})
	}
	return h, nil
}

// filterHub keeps a Server's filter indexes: for each index, the bucket of every value
// (the objects indexed under it, by key, which a filtered list clones) and the history of
// the value's filtered events (which its watches read). A change computes the object's
// old and new values once, appends one event to the history of each value among them and
// wakes only the watches of those values: its cost grows with the object's values and
// their watchers, never with watchers of other values or the number of objects.
//
// The histories hold the events after the server's compacted revision, as its log does:
// an event leaves them when its revision is compacted from the log.
type filterHub[K cmp.Ordered, V any] struct {
	indexNames []string            // sorted
	fns        []informer.Index[V] // the informer's, by indexNames
	clock      clock.Clock
	bookmarks  time.Duration // 0: none
	rep        *reporter
	stats      *counters

	// Changed under the mirror's lock and mu; read under mu.
	mu        sync.Mutex
	indexes   []filterIndex[K, V]  // by indexNames
	rev       int64                // the log revision of the newest change, whether or not it matched anything
	revStr    string               // rev in decimal, "" until needed
	compacted int64                // the log's compacted revision
	order     []filterQueued[K, V] // every history event in revision order, for compaction
	orderHead int
	batchLen  int    // events appended since beginBatch
	inBatch   bool   // between beginBatch and endBatch
	batches   uint64 // batches ended, to mark the values endBatch has seen
	progress  bool   // a progress broadcast is due (progressDelay after a change)
}

// progressDelay is how soon after its revision moves a Server sends its idle filtered
// watchers that asked for bookmarks one at the newest revision, so that a filtered
// client's WaitForRevision of a write to another value returns within about this, not a
// bookmark interval. It costs at most one bookmark per idle watcher per delay.
const progressDelay = 250 * time.Millisecond

// filterIndex is one filter index.
type filterIndex[K cmp.Ordered, V any] struct {
	values map[string]*filterValue[K, V] // values with objects, history or watches
	of     map[K][]string                // each object's values, for its next change
}

// filterQueued names the value that holds the history event of revision rev.
type filterQueued[K cmp.Ordered, V any] struct {
	rev int64
	fv  *filterValue[K, V]
}

func (h *filterHub[K, V]) Names() []string { return h.indexNames }

// Values computes obj's values in every filter index, outside the mirror's lock. An index
// function that fails or panics is reported and counted (Stats.IndexErrors); the object
// is then in no bucket of that index until a later change indexes it.
func (h *filterHub[K, V]) Values(k K, obj V) [][]string {
	if h == nil {
		return nil
	}
	vals := make([][]string, len(h.fns))
	for i, fn := range h.fns {
		vs, err := fn.Values(obj)
		if err != nil {
			h.stats.IndexError()
			h.rep.FilterIndex(fmt.Errorf("filter index %q of object %v: %w (the object leaves the filters of that index until a change indexes it; fix the index function)", h.indexNames[i], k, err))
			continue
		}
		if len(vs) > 1 {
			vs = slices.Clone(vs)
			slices.Sort(vs)
			vs = slices.Compact(vs)
		}
		vals[i] = vs
	}
	return vals
}

// Put indexes the object r of the change at rev under vals (from values); the mirror's
// lock is held.
func (h *filterHub[K, V]) Put(rev int64, r *record[K], vals [][]string, compacted int64) {
	h.change(rev, r.Key(), r, vals, compacted)
}

// Delete unindexes the object with key k, deleted at rev; the mirror's lock is held.
func (h *filterHub[K, V]) Delete(rev int64, k K, compacted int64) {
	h.change(rev, k, nil, nil, compacted)
}

// change moves key k to the values vals of its object r in every index (out of them all
// when r is nil, a delete).
func (h *filterHub[K, V]) change(rev int64, k K, r *record[K], vals [][]string, compacted int64) {
	if h == nil {
		return
	}
	if !h.inBatch { // in a batch, beginBatch holds mu
		h.mu.Lock()
		defer h.mu.Unlock()
	}
	h.advance(rev)
	for i := range h.indexes {
		var v []string
		if r != nil {
			v = vals[i]
		}
		h.move(i, k, r, v)
	}
	h.compact(compacted)
}

// BeginBatch starts a batch of changes (a Server over an ordered upstream logs the
// changes of one upstream revision as a batch): it holds mu until endBatch, so that no
// list or watch reads the indexes with part of a batch.
func (h *filterHub[K, V]) BeginBatch() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.batchLen, h.inBatch = 0, true
}

// EndBatch ends a batch whose log ends at seq: each value's last event of the batch is
// labelled seq, so that a filtered watch sends it as the batch's last (its other events
// carry the mark of a partial batch), and the watches of the values it touched are woken.
func (h *filterHub[K, V]) EndBatch(seq int64) {
	if h == nil {
		return
	}
	if !h.inBatch {
		return
	}
	defer h.mu.Unlock()
	h.inBatch = false
	h.batches++
	// The batch's events still in the history (compaction drops the oldest first).
	order := h.order[h.orderHead:]
	for j := len(order) - 1; j >= max(len(order)-h.batchLen, 0); j-- {
		fv := order[j].fv
		if !fv.EndBatch(h.batches, seq) {
			continue // a later event of the batch ended it for this value
		}
		order[j].rev = seq
		fv.Wake()
	}
	h.advance(max(h.rev, seq))
}

func (h *filterHub[K, V]) advance(rev int64) {
	h.rev, h.revStr = rev, ""
	if h.bookmarks > 0 && !h.progress {
		h.progress = true
		time.AfterFunc(progressDelay, h.broadcastProgress)
	}
}

// broadcastProgress wakes the idle watches that asked for bookmarks, each to send one at
// the newest revision (filterValue.Progress). It runs under mu, so never inside a batch.
func (h *filterHub[K, V]) broadcastProgress() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.progress = false
	for i := range h.indexes {
		for _, fv := range h.indexes[i].values {
			fv.Progress()
		}
	}
}

// RevString returns the newest revision in decimal; mu is held.
func (h *filterHub[K, V]) RevString() string {
	if h.revStr == "" {
		h.revStr = strconv.FormatInt(h.rev, 10)
	}
	return h.revStr
}

// move moves the object with key k from its old values in index i to vals (r is its new
// record; nil when it is deleted): DELETED for the values it leaves (with the record the
// value served), ADDED for those it enters, MODIFIED for those it stays in.
func (h *filterHub[K, V]) move(i int, k K, r *record[K], vals []string) {
	ix := &h.indexes[i]
	old := ix.of[k]
	for _, v := range old {
		if slices.Contains(vals, v) {
			continue
		}
		fv := ix.values[v]
		if fv == nil {
			continue // cannot happen: a value holds its objects
		}
		if last, ok := fv.Remove(k); ok {
			h.append(fv, informer.Deleted, last)
		}
	}
	for _, v := range vals {
		fv := h.value(i, v)
		typ := informer.Added
		if slices.Contains(old, v) {
			typ = informer.Modified
		}
		fv.Set(k, r)
		h.append(fv, typ, r)
	}
	if len(vals) == 0 {
		delete(ix.of, k)
	} else {
		ix.of[k] = vals
	}
}

// value returns the value v of index i, created if needed.
func (h *filterHub[K, V]) value(i int, v string) *filterValue[K, V] {
	ix := &h.indexes[i]
	fv := ix.values[v]
	if fv == nil {
		fv = newFilterValue[K, V](i, v)
		ix.values[v] = fv
	}
	return fv
}

// append adds an event at the newest revision to fv's history and wakes its watches.
func (h *filterHub[K, V]) append(fv *filterValue[K, V], typ informer.EventType, r *record[K]) {
	fv.Append(h.rev, h.RevString(), typ, r)
	h.order = append(h.order, filterQueued[K, V]{rev: h.rev, fv: fv})
	if h.inBatch {
		h.batchLen++
	} else {
		fv.Wake()
	}
}

// compact drops the history events at or before the log's compacted revision, and the
// values left with no object, history or watch.
func (h *filterHub[K, V]) compact(compacted int64) {
	h.compacted = max(h.compacted, compacted)
	for h.orderHead < len(h.order) && h.order[h.orderHead].rev <= h.compacted {
		fv := h.order[h.orderHead].fv
		h.order[h.orderHead] = filterQueued[K, V]{}
		h.orderHead++
		fv.DropOldest()
		h.Forget(fv)
	}
	if h.orderHead > 1024 && h.orderHead > len(h.order)/2 {
		h.order = h.order[:copy(h.order, h.order[h.orderHead:])]
		clear(h.order[len(h.order):cap(h.order)])
		h.orderHead = 0
	}
}

// DropWatches ends every open filtered watch with err, as the log's DropWatches ends the
// others, and drops the history of every value: the server's history is another one now
// (its upstream restored from a backup), and a watch of the old one must not go on.
func (h *filterHub[K, V]) DropWatches(err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.order)
	h.order, h.orderHead = h.order[:0], 0
	for i := range h.indexes {
		for _, fv := range h.indexes[i].values {
			fv.EndWatches(err)
			fv.DropHistory()
			h.Forget(fv)
		}
	}
}

// Forget forgets fv if it holds nothing; mu is held.
func (h *filterHub[K, V]) Forget(fv *filterValue[K, V]) {
	if fv.Empty() {
		i, v := fv.Name()
		delete(h.indexes[i].values, v)
	}
}

// Snapshot returns a copy-on-write clone of the bucket of f's value and the revision it
// reflects.
func (h *filterHub[K, V]) Snapshot(f valueFilter) (*btree.Tree[K, *record[K]], int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, ok := slices.BinarySearch(h.indexNames, f.Index); ok {
		if fv := h.indexes[i].values[f.Value]; fv != nil {
			if tree := fv.Snapshot(); tree != nil {
				return tree, h.rev
			}
		}
	}
	return newRecords[K](2), h.rev
}

// Watch opens a watch of f's value. It behaves as the log's watches do (see
// eventlog.Log.Watch), with their blocking loop (eventlog.Loop), on the value's filtered
// stream: from opts.Revision (an error matching informer.ErrExpired if its events are
// compacted, or if it is newer than the newest), or with SendInitialEvents the value's
// bucket as ADDED events, then the EndOfInitialEvents bookmark, then the changes;
// bookmarks at the newest revision when idle (with AllowBookmarks); io.EOF at
// opts.Timeout; ctx.Err() when ctx is done.
func (h *filterHub[K, V]) Watch(ctx context.Context, f valueFilter, opts informer.WatchOptions) (informer.Watch[*record[K]], error) {
	i, ok := slices.BinarySearch(h.indexNames, f.Index)
	if !ok {
		return nil, fmt.Errorf("fanout: unknown filter index %q", f.Index)
	}
	from := int64(-1)
	if opts.Revision != "" {
		n, err := strconv.ParseInt(opts.Revision, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("fanout: filtered watch: revision %q is not a log revision", opts.Revision)
		}
		from = n
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case from > h.rev:
		return nil, fmt.Errorf("fanout: filtered watch of %s: the revision is newer than the server's newest: %w", f, informer.ErrExpired)
	case from >= 0 && from < h.compacted && !opts.SendInitialEvents:
		return nil, fmt.Errorf("fanout: filtered watch of %s: the revision has left the server's history: %w", f, informer.ErrExpired)
	}
	var bookmarks time.Duration
	if opts.AllowBookmarks {
		bookmarks = h.bookmarks
	}
	loop := eventlog.NewLoop(&h.mu, ctx, h.clock, opts.Timeout, bookmarks)
	return h.value(i, f.Value).Watch(h, loop, f, bookmarks > 0, opts.SendInitialEvents, from), nil
}
