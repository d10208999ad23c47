package fanout

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/crc64"
	"sync"
	"sync/atomic"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/eventlog"
	"github.com/informer-go/informer/internal/wire"
)

// record is what the server's log holds for an object: its key and its encoded form.
type record[K any] struct {
	key  K
	json []byte
}

// Key returns the object's key.
func (r *record[K]) Key() K { return r.key }

// JSON returns the object's encoded form.
func (r *record[K]) JSON() []byte { return r.json }

// newRecords returns an empty tree of records by key, of the given degree.
func newRecords[K cmp.Ordered](degree int) *btree.Tree[K, *record[K]] {
	return btree.New[K, *record[K]](degree, btree.Natural[K](), nil)
}

// mirror is the informer handler that copies changes into the server's log and its
// state tree (which lists read from). With an ordered upstream (up set) it holds the
// changes back until the informer says which revision they add up to (OnRevision), and
// then logs them as one batch: the tree and the log are always exactly the upstream's
// state at a revision, whose fingerprint (state) tags the revision's history.
//
// Lock order: the mirror's lock, then one of the log's, the filter hub's or the
// revisions' (upstreamRevisions), each taken alone and let go before the next.
type mirror[K cmp.Ordered, V any] struct {
	src          *eventlog.Log[K, *record[K]]
	key          informer.KeyFunc[K, V]
	encode       func(V) ([]byte, error)
	head         *atomic.Int64 // the log revision of the newest change
	up           *upstreamRevisions
	maxObject    int
	historyBytes int64
	rep          *reporter
	stats        *counters
	filters      *filterHub[K, V] // nil without ServerOptions.Filters

	mu        sync.Mutex                 // the tree and head change together; lists clone both
	tree      *btree.Tree[K, *record[K]] // the served state, by key
	log       []logged                   // size of each change in the history, oldest first from first
	first     int                        // log[:first] is dropped
	held      int64                      // sum of the sizes kept
	pending   []pendingChange[K]         // changes held back until the next revision (up set), one per key
	ops       []logOp[K]                 // OnRevision's buffer
	pendingAt map[K]int                  // the index of a key's change in pending
	state     uint64                     // the fingerprint of tree (up set): stateHash of its records, summed
}

// stateTable is the CRC-64 table of stateHash.
var stateTable = crc64.MakeTable(crc64.ECMA)

// stateHash is a record's share of the fingerprint of a state: the fingerprint is the sum
// of its records', so that a change updates it in O(1), and every replica that serves
// the same objects, encoded the same, has the same.
func stateHash(json []byte) uint64 {
	h := crc64.Checksum(json, stateTable)
	// Mixed (SplitMix64's finalizer), so that sums of similar encodings spread.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// newMirror returns the mirror that logs the changes of an informer keyed by key, each
// encoded once (encode) and refused beyond maxObject bytes, into log, the history kept
// within historyBytes (negative: no bound); head follows the log's newest revision. With
// up set (an ordered upstream) changes are held until their revision; filters (nil:
// none) index them.
func newMirror[K cmp.Ordered, V any](log *eventlog.Log[K, *record[K]], key informer.KeyFunc[K, V], encode func(V) ([]byte, error), maxObject int, historyBytes int64,
	head *atomic.Int64, up *upstreamRevisions, filters *filterHub[K, V], stats *counters, rep *reporter) *mirror[K, V] {
	return &mirror[K, V]{
		src: log, key: key, encode: encode, maxObject: maxObject, historyBytes: historyBytes,
		head: head, up: up, filters: filters, stats: stats, rep: rep,
		tree: newRecords[K](32),
	}
}

// Head returns the log revision of the newest change.
func (m *mirror[K, V]) Head() int64 { return m.head.Load() }

// Lock holds the tree and the log still: no change is logged until Unlock.
func (m *mirror[K, V]) Lock() { m.mu.Lock() }

// Unlock lets changes be logged again.
func (m *mirror[K, V]) Unlock() { m.mu.Unlock() }

// logOp is one change OnRevision logs.
type logOp[K any] struct {
	r      *record[K]
	vals   [][]string // r's values in the filter indexes, when not a delete
	delete bool
}

// pendingChange is a change held back until the informer reaches a revision.
type pendingChange[K any] struct {
	key     K
	json    []byte     // the new state; for a delete, the state put earlier in the batch, if any
	vals    [][]string // json's values in the filter indexes
	deleted bool
}

// logged is the size of one change kept in the history.
type logged struct {
	rev  int64
	size int64
}

// recordOverhead is what a change costs in the history besides its encoding.
const recordOverhead = 128

func (m *mirror[K, V]) OnAdd(obj V, _ bool) { m.put(obj) }

func (m *mirror[K, V]) OnUpdate(_, obj V) { m.put(obj) }

func (m *mirror[K, V]) OnDelete(obj V, _ bool) { m.delete(obj) }

// OnRevision implements informer.RevisionHandler: the changes held back make the
// upstream's state at rev; they are logged as one batch whose bound is rev.
func (m *mirror[K, V]) OnRevision(rev string) {
	if m.up == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ops := m.ops[:0]
	state := m.state
	for _, c := range m.pending {
		old, present := m.tree.Get(c.key)
		switch {
		case !c.deleted && present && bytes.Equal(old.json, c.json):
		case !c.deleted:
			if present {
				state -= stateHash(old.json)
			}
			state += stateHash(c.json)
			ops = append(ops, logOp[K]{r: &record[K]{key: c.key, json: c.json}, vals: c.vals})
		case present:
			state -= stateHash(old.json)
			ops = append(ops, logOp[K]{r: old, delete: true})
		case c.json != nil:
			// Created and deleted within the batch: a client at a revision inside it
			// may hold the object, so the batch says it went away.
			ops = append(ops, logOp[K]{r: &record[K]{key: c.key, json: c.json}, vals: c.vals}, logOp[K]{r: &record[K]{key: c.key, json: c.json}, delete: true})
		}
	}
	clear(m.pending)
	m.pending = m.pending[:0]
	clear(m.pendingAt)
	defer func() { clear(ops); m.ops = ops[:0] }()
	// The bound goes first, so that a watcher that reads the batch's changes finds it.
	seq := m.src.Revision() + int64(len(ops))
	moved, other := m.up.Reached(seq, rev, state)
	m.state = state
	if other {
		m.endHistory(rev)
	}
	// The filter indexes take the batch as one too: each value's last event of it is
	// labelled with the batch's end, before the log's head reaches it.
	if len(ops) > 0 {
		m.filters.BeginBatch()
	}
	for i, o := range ops {
		r, ok := m.apply(o)
		if i == len(ops)-1 {
			m.filters.EndBatch(seq)
		}
		if ok {
			m.logged(r, int64(len(o.r.json)))
		}
	}
	if other {
		m.src.Compact(m.src.Revision()) // nothing before the new history's first state
	}
	m.up.Trim(m.src.CompactedRevision())
	m.up.Settled()
	if moved && len(ops) == 0 {
		m.src.Bookmark() // the upstream moved on with no change here: tell the watchers
	}
}

// endHistory ends every watch, filtered or not, with an error matching
// informer.ErrOtherHistory (answered 410) before anything of the history that starts at
// rev is logged: the informer listed another history of its source, and a client must
// list again rather than hold a state of the new history under a revision of the old.
func (m *mirror[K, V]) endHistory(rev string) {
	err := fmt.Errorf("the informer this server serves listed another history of its source (restored from a backup, or replaced), at revision %s: list again: %w", rev, informer.ErrOtherHistory)
	m.src.DropWatches(err)
	m.filters.DropWatches(err)
}

// apply writes one change of a batch to the tree, the log and the filter indexes, and
// returns its log revision; false if it changed nothing (a delete of a key not served).
func (m *mirror[K, V]) apply(o logOp[K]) (int64, bool) {
	if o.delete {
		m.tree.Delete(o.r.key)
		r, ok := m.src.Delete(o.r.key)
		if ok {
			m.filters.Delete(r, o.r.key, m.src.CompactedRevision())
		}
		return r, ok
	}
	m.tree.Set(o.r.key, o.r)
	r := m.src.Put(o.r.key, o.r)
	m.filters.Put(r, o.r, o.vals, m.src.CompactedRevision())
	return r, true
}

// hold records a change until the next revision (ordered upstream), under mu.
func (m *mirror[K, V]) hold(k K, b []byte, vals [][]string, deleted bool) {
	if m.pendingAt == nil {
		m.pendingAt = make(map[K]int)
	}
	i, ok := m.pendingAt[k]
	if !ok {
		m.pendingAt[k] = len(m.pending)
		m.pending = append(m.pending, pendingChange[K]{key: k, json: b, vals: vals, deleted: deleted})
		return
	}
	c := &m.pending[i]
	if deleted {
		c.deleted = true // json keeps the state put earlier in the batch
		return
	}
	c.json, c.vals, c.deleted = b, vals, false
}

// put logs obj unless its encoding is the one already served (a relist of the informer
// re-delivers unchanged objects as updates; they are not passed on).
func (m *mirror[K, V]) put(obj V) {
	k, ok := m.keyOf(obj, "object")
	if !ok {
		return
	}
	b, err := m.encode(obj)
	if err == nil {
		b, err = wire.CompactJSON(b)
	}
	if err != nil {
		m.stats.EncodeError()
		m.rep.Encode(fmt.Errorf("encoding object %v: %w (not served: clients keep its previous state; fix the object or ServerOptions.Encode)", k, err))
		return
	}
	if len(b) > m.maxObject {
		m.stats.TooLarge()
		m.rep.TooLarge(fmt.Errorf("object %v is %d bytes encoded, more than MaxObjectSize (%d): not served, clients keep its previous state (shrink the object, or raise MaxObjectSize and the clients' MaxFrameSize)", k, len(b), m.maxObject))
		return
	}
	vals := m.filters.Values(k, obj)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.up != nil {
		m.hold(k, b, vals, false)
		return
	}
	if old, ok := m.tree.Get(k); ok && bytes.Equal(old.json, b) {
		return
	}
	r := &record[K]{key: k, json: b}
	rev := m.src.Put(r.key, r)
	m.tree.Set(k, r)
	m.logged(rev, int64(len(b)))
	m.filters.Put(rev, r, vals, m.src.CompactedRevision())
}

func (m *mirror[K, V]) delete(obj V) {
	k, ok := m.keyOf(obj, "deleted object")
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.up != nil {
		m.hold(k, nil, nil, true)
		return
	}
	old, ok := m.tree.Delete(k)
	if !ok {
		return
	}
	if rev, ok := m.src.Delete(k); ok {
		m.logged(rev, int64(len(old.json)))
		m.filters.Delete(rev, k, m.src.CompactedRevision())
	}
}

// keyOf returns obj's key; a key function's error is counted (Stats.EncodeErrors) and
// reported as the key of what ("object", "deleted object"), and ok is false. The informer
// keyed obj before it passed it on: only a key function that answers differently for the
// same object fails here.
func (m *mirror[K, V]) keyOf(obj V, what string) (k K, ok bool) {
	k, err := m.key(obj)
	if err == nil {
		return k, true
	}
	m.stats.EncodeError()
	if oe := (*informer.ObjectError)(nil); errors.As(err, &oe) {
		err = oe.Err // the informer's own words name it and the object; said once below
	}
	shown := fmt.Sprintf("%+v", obj)
	if len(shown) > 200 {
		shown = shown[:200] + "…"
	}
	m.rep.Key(fmt.Errorf("key of %s %s: %w (not served; the informer keyed it before: a key function must answer the same for the same object)", what, shown, err))
	return k, false
}

// logged accounts for the change at rev and compacts the history down to historyBytes.
func (m *mirror[K, V]) logged(rev, size int64) {
	m.head.Store(rev)
	if m.historyBytes < 0 {
		return
	}
	compacted := m.src.CompactedRevision() // HistoryLimit's compaction
	for m.first < len(m.log) && m.log[m.first].rev <= compacted {
		m.held -= m.log[m.first].size
		m.first++
	}
	m.log = append(m.log, logged{rev: rev, size: size + recordOverhead})
	m.held += size + recordOverhead
	last := int64(-1)
	for m.held > m.historyBytes && len(m.log)-m.first > 1 {
		m.held -= m.log[m.first].size
		last = m.log[m.first].rev
		m.first++
	}
	if last > compacted {
		m.src.Compact(last)
	}
	if m.first > 1024 && m.first > len(m.log)/2 {
		m.log = m.log[:copy(m.log, m.log[m.first:])]
		m.first = 0
	}
}

// Snapshot returns the state a list with filter f reads, and its log revision: the
// whole state, or the bucket of f's value; either is an O(1) copy-on-write clone.
func (m *mirror[K, V]) Snapshot(f valueFilter) (*btree.Tree[K, *record[K]], int64) {
	if !f.IsZero() && m.filters != nil {
		return m.filters.Snapshot(f)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tree.Clone(), m.head.Load()
}
