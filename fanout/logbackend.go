package fanout

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/eventlog"
)

// logBackend serves a Server's log to its handler: lists from copy-on-write snapshots
// of the mirrored state (a paged list keeps its snapshot for its later pages), watches of
// the log or of a filter value's stream, in the server's revisions (revs: the upstream's,
// up set, or its own numbering).
type logBackend[K cmp.Ordered, V any] struct {
	log     *eventlog.Log[K, *record[K]]
	mirror  *mirror[K, V]
	filters *filterHub[K, V] // nil: none
	revs    revisionMap
	up      *upstreamRevisions // the upstream's revisions; nil for the server's own numbering
	pins    pinTable[K]
	ready   func() bool
	policy  policy
}

// newLogBackend returns the backend of a Server's log, mirror and filters, paged lists
// bounded by opts; ready reports whether the Server has synced.
func newLogBackend[K cmp.Ordered, V any](log *eventlog.Log[K, *record[K]], m *mirror[K, V], filters *filterHub[K, V], revs revisionMap, up *upstreamRevisions,
	opts ServerOptions[V], pol policy, ready func() bool) *logBackend[K, V] {
	return &logBackend[K, V]{
		log: log, mirror: m, filters: filters, revs: revs, up: up, ready: ready, policy: pol,
		pins: pinTable[K]{
			limit:     cmp.Or(max(opts.PagedLists, 0), DefaultPagedLists),
			perClient: cmp.Or(max(opts.PagedListsPerClient, 0), DefaultPagedListsPerClient),
			byID:      make(map[uint64]*pin[K]),
			byClient:  make(map[string][]*pin[K]),
		},
	}
}

// Watch opens a watch of the log or, with f, of f's value. Over an ordered upstream a
// watch with initial events (a streaming list) opens under the mirror's lock, so that its
// initial state is one the log has a revision for, never one in the middle of a batch
// being logged.
func (b *logBackend[K, V]) Watch(ctx context.Context, f valueFilter, rev string, opts informer.WatchOptions) (informer.Watch[*record[K]], error) {
	if rev != "" {
		if err := b.revs.Await(ctx, rev); err != nil {
			return nil, &requestError{err}
		}
		var err error
		if opts.Revision, err = b.revs.WatchRevision(rev); err != nil {
			return nil, &requestError{err}
		}
	}
	if !f.IsZero() && b.filters != nil {
		return b.filters.Watch(ctx, f, opts)
	}
	if opts.SendInitialEvents && b.up != nil {
		b.mirror.Lock()
		defer b.mirror.Unlock()
	}
	return b.log.Watch(ctx, opts)
}

// Ready reports whether the Server has synced.
func (b *logBackend[K, V]) Ready() bool { return b.ready() }

// AppendObject appends the record's encoding, made once when it was logged.
func (b *logBackend[K, V]) AppendObject(dst []byte, r *record[K]) ([]byte, error) {
	return append(dst, r.JSON()...), nil
}

// AppendRevision appends the wire form of a log revision.
func (b *logBackend[K, V]) AppendRevision(dst []byte, rev string) ([]byte, bool) {
	return b.revs.AppendWire(dst, rev)
}

// StaleState returns a check that the state now served has left the history: a
// streaming list's state is at this revision or before.
func (b *logBackend[K, V]) StaleState() (func() bool, string) {
	rev := b.mirror.Head()
	return b.staleAt(rev), b.onWire(rev)
}

// Revision returns the wire revision of the state served: the upstream's newest, or the
// server's own revision of its newest change.
func (b *logBackend[K, V]) Revision() string {
	if b.up != nil {
		return b.up.Newest()
	}
	return b.onWire(b.mirror.Head())
}

// Filters returns the names of the filter indexes, sorted.
func (b *logBackend[K, V]) Filters() []string {
	if b.filters == nil {
		return nil
	}
	return b.filters.Names()
}

// Policy returns the Server's: replays on empty revisions, batched over an ordered
// upstream, its bookmark interval and instance tag.
func (b *logBackend[K, V]) Policy() policy { return b.policy }

// List answers a list request from a snapshot of the state: a first page clones the
// state tree (O(1)); a paged list keeps its clone, under the client's name, for its later
// pages.
func (b *logBackend[K, V]) List(ctx context.Context, client string, f valueFilter, rv, cont string, limit int64) (page[*record[K]], error) {
	if cont != "" {
		return b.nextPage(client, f, cont, limit)
	}
	if rv != "" && rv != "0" {
		if err := b.revs.Await(ctx, rv); err != nil {
			return page[*record[K]]{}, &requestError{err}
		}
	}
	tree, rev := b.mirror.Snapshot(f)
	if rv != "" && rv != "0" {
		at, err := b.revs.ListRevision(rv)
		if err != nil {
			return page[*record[K]]{}, &requestError{err}
		}
		if n, _ := strconv.ParseInt(at, 10, 64); at != "" && n > rev {
			return page[*record[K]]{}, &requestError{fmt.Errorf("resourceVersion %s is newer than the server's newest revision %s: %w", rv, b.onWire(rev), informer.ErrExpired)}
		}
	}
	if limit <= 0 || int64(tree.Len()) <= limit {
		items := func(yield func(*record[K]) bool) { tree.Ascend(func(_ K, r *record[K]) bool { return yield(r) }) }
		return newPage[*record[K]](b.onWire(rev), "", items, b.staleAt(rev)), nil
	}
	p := &pin[K]{tree: tree, rev: rev, client: client}
	items := p.take(limit)
	b.pins.add(p)
	return newPage[*record[K]](b.onWire(rev), b.token(p), slices.Values(items), b.staleAt(rev)), nil
}

// nextPage serves a later page of a paged list from its snapshot; a token of another
// replica, or of a snapshot this one dropped, is served from the state if it is at the
// token's upstream revision (portablePage).
func (b *logBackend[K, V]) nextPage(client string, f valueFilter, cont string, limit int64) (page[*record[K]], error) {
	tok, err := b.revs.ContinueToken(cont)
	if err != nil {
		if pg, ok := b.portablePage(client, f, cont, limit); ok {
			return pg, nil
		}
		return page[*record[K]]{}, &requestError{err}
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 2 && len(parts) != 4 {
		return page[*record[K]]{}, &requestError{fmt.Errorf("malformed continue token %q", cont)}
	}
	id, err1 := strconv.ParseUint(parts[0], 36, 64)
	seq, err2 := strconv.ParseInt(parts[1], 36, 64)
	if err1 != nil || err2 != nil || seq < 1 {
		return page[*record[K]]{}, &requestError{fmt.Errorf("malformed continue token %q", cont)}
	}
	p, err := b.pins.get(id, b.log.CompactedRevision())
	if err != nil {
		if pg, ok := b.portablePage(client, f, cont, limit); ok {
			return pg, nil
		}
		return page[*record[K]]{}, &requestError{fmt.Errorf("continue token %q: %w", cont, err)}
	}
	if limit <= 0 {
		limit = math.MaxInt64
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch seq {
	case p.seq: // the next page
	case p.seq - 1: // the last page again (the client retries it)
		p.after, p.started, p.seq = p.prevAfter, p.prevStarted, p.seq-1
	default:
		return page[*record[K]]{}, &requestError{fmt.Errorf("continue token %q is not the next page of its list: %w", cont, informer.ErrExpired)}
	}
	items := p.take(limit)
	next := ""
	if p.more {
		next = b.token(p)
	} else {
		b.pins.remove(p)
	}
	return newPage[*record[K]](b.onWire(p.rev), next, slices.Values(items), b.staleAt(p.rev)), nil
}

// staleAt returns a check that the log revision rev has left the history.
func (b *logBackend[K, V]) staleAt(rev int64) func() bool {
	return func() bool { return rev < b.log.CompactedRevision() }
}

// onWire returns the wire form of the log revision rev.
func (b *logBackend[K, V]) onWire(rev int64) string {
	w, _ := b.revs.AppendWire(nil, strconv.FormatInt(rev, 10))
	return string(w)
}

// token is the continue token of p's next page: the server's tag, the list's id and the
// page's number; over an ordered upstream also the list's upstream revision and the last
// key served, so that a replica at that revision can serve the next page
// (portablePage).
func (b *logBackend[K, V]) token(p *pin[K]) string {
	t := strconv.AppendUint(nil, p.id, 36)
	t = append(t, '.')
	t = strconv.AppendInt(t, p.seq, 36)
	if key, err := json.Marshal(p.after); b.up != nil && p.started && err == nil {
		t = append(t, '.')
		t = base64.RawURLEncoding.AppendEncode(t, []byte(b.onWire(p.rev)))
		t = append(t, '.')
		t = base64.RawURLEncoding.AppendEncode(t, key)
	}
	return string(b.revs.AppendContinue(nil, string(t)))
}

// portablePage serves the next page of a list another replica began (behind a
// round-robin balancer), or whose snapshot this one dropped: when the server's state is at
// the token's upstream revision, the page continues after the token's last key.
func (b *logBackend[K, V]) portablePage(client string, f valueFilter, cont string, limit int64) (page[*record[K]], bool) {
	parts := strings.Split(cont, ".")
	if b.up == nil || len(parts) != 5 {
		return page[*record[K]]{}, false
	}
	onWire, err1 := base64.RawURLEncoding.DecodeString(parts[3])
	rawKey, err2 := base64.RawURLEncoding.DecodeString(parts[4])
	var after K
	if err1 != nil || err2 != nil || json.Unmarshal(rawKey, &after) != nil {
		return page[*record[K]]{}, false
	}
	tree, rev := b.mirror.Snapshot(f)
	if b.onWire(rev) != string(onWire) {
		return page[*record[K]]{}, false
	}
	p := &pin[K]{tree: tree, rev: rev, client: client, after: after, started: true, seq: 1}
	if limit <= 0 {
		limit = math.MaxInt64
	}
	items := p.take(limit)
	next := ""
	if p.more {
		b.pins.add(p)
		next = b.token(p)
	}
	return newPage[*record[K]](string(onWire), next, slices.Values(items), b.staleAt(rev)), true
}

// pin is the snapshot a paged list reads its later pages from.
type pin[K cmp.Ordered] struct {
	id     uint64
	client string
	tree   *btree.Tree[K, *record[K]]
	rev    int64

	mu          sync.Mutex
	seq         int64 // the number of the next page
	after       K     // the last key served
	started     bool  // a page was served (after is set)
	prevAfter   K     // after and started before the last page, to serve it again
	prevStarted bool
	more        bool // keys remain after after
}

// take returns the next limit records of the list and advances it.
func (p *pin[K]) take(limit int64) []*record[K] {
	items := make([]*record[K], 0, min(limit, int64(p.tree.Len()), 4096))
	p.more = false
	visit := func(_ K, r *record[K]) bool {
		if int64(len(items)) == limit {
			p.more = true
			return false
		}
		items = append(items, r)
		return true
	}
	if p.started {
		p.tree.AscendAfter(p.after, visit)
	} else {
		p.tree.Ascend(visit)
	}
	p.prevAfter, p.prevStarted = p.after, p.started
	if len(items) > 0 {
		p.after, p.started = items[len(items)-1].Key(), true
	}
	p.seq++
	return items
}

// pinTable holds the snapshots of paged lists, per client.
type pinTable[K cmp.Ordered] struct {
	limit, perClient int

	mu       sync.Mutex
	lastID   uint64
	byID     map[uint64]*pin[K]
	byClient map[string][]*pin[K] // oldest first
}

// add keeps p; the client's own oldest goes if it holds perClient, else the oldest of the
// client holding the most if the table holds limit.
func (t *pinTable[K]) add(p *pin[K]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastID++
	p.id = t.lastID
	if own := t.byClient[p.client]; len(own) >= t.perClient {
		t.removeLocked(own[0])
	}
	if len(t.byID) >= t.limit {
		var most []*pin[K]
		for _, ps := range t.byClient {
			if len(ps) > len(most) || (len(ps) == len(most) && ps[0].id < most[0].id) {
				most = ps
			}
		}
		t.removeLocked(most[0])
	}
	t.byID[p.id] = p
	t.byClient[p.client] = append(t.byClient[p.client], p)
}

// get returns the snapshot of list id, unless it is gone or its revision has left the
// history (then the error matches informer.ErrExpired).
func (t *pinTable[K]) get(id uint64, compacted int64) (*pin[K], error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.byID[id]
	switch {
	case p == nil:
		return nil, fmt.Errorf("the list is finished, or its snapshot was dropped (too many paged lists in progress): %w", informer.ErrExpired)
	case p.rev < compacted:
		t.removeLocked(p)
		return nil, fmt.Errorf("the list's revision has left the server's history: %w", informer.ErrExpired)
	}
	return p, nil
}

func (t *pinTable[K]) remove(p *pin[K]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(p)
}

func (t *pinTable[K]) removeLocked(p *pin[K]) {
	if t.byID[p.id] != p {
		return
	}
	delete(t.byID, p.id)
	own := slices.DeleteFunc(t.byClient[p.client], func(q *pin[K]) bool { return q == p })
	if len(own) == 0 {
		delete(t.byClient, p.client)
	} else {
		t.byClient[p.client] = own
	}
}
