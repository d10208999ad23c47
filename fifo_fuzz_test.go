package informer

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sortedKnown is a cache for the fuzzed queue whose iteration order is the key order, as
// the informer's B-tree cache iterates, so that the model can predict tombstone order.
type sortedKnown map[string]string

func (k sortedKnown) EachKnown(fn func(string, string)) {
	keys := make([]string, 0, len(k))
	for key := range k {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		fn(key, k[key])
	}
}

// fifoModel is the documented semantics of the delta queue, written as plainly as possible.
type fifoModel struct {
	items        map[string][]delta[string]
	queue        []string
	pending      int
	known        sortedKnown
	populated    bool
	initialCount int
	syncPending  bool
	lastRev      string
	wmDirty      bool
}

func (m *fifoModel) queueDelta(key string, d delta[string]) {
	l, ok := m.items[key]
	if !ok {
		m.queue = append(m.queue, key)
	}
	// Of a trailing pair of deletes keep the real one; of two tombstones, the newer.
	if n := len(l); n > 0 && d.typ == deltaDeleted && l[n-1].typ == deltaDeleted {
		if l[n-1].finalStateUnknown {
			l[n-1] = d
		}
		m.items[key] = l
		return
	}
	m.items[key] = append(l, d)
	m.pending++
}

func (m *fifoModel) add(typ deltaType, key, obj, rev string) {
	m.queueDelta(key, delta[string]{typ: typ, object: obj, revision: rev})
	m.lastRev = rev
}

func (m *fifoModel) replace(keys, objs []string, rev string) {
	listed := map[string]bool{}
	for i, k := range keys {
		listed[k] = true
		// Only the objects of the first list are initial.
		m.queueDelta(k, delta[string]{typ: deltaReplaced, object: objs[i], revision: rev, initial: !m.populated})
	}
	// Every vanished key gets a tombstone with its last known state: queued keys first (in
	// queue order, unless already being deleted), then cached keys with nothing queued.
	for _, k := range slices.Clone(m.queue) {
		l := m.items[k]
		if listed[k] || l[len(l)-1].typ == deltaDeleted {
			continue
		}
		m.queueDelta(k, delta[string]{typ: deltaDeleted, finalStateUnknown: true, object: l[len(l)-1].object, revision: rev})
	}
	m.known.EachKnown(func(k, obj string) {
		if _, queued := m.items[k]; listed[k] || queued {
			return
		}
		m.queueDelta(k, delta[string]{typ: deltaDeleted, finalStateUnknown: true, object: obj, revision: rev})
	})
	m.lastRev = rev
	m.wmDirty = true
	if !m.populated {
		m.populated = true
		m.initialCount = len(m.queue)
		m.syncPending = true
	}
}

func (m *fifoModel) resync() {
	m.known.EachKnown(func(k, obj string) {
		if _, queued := m.items[k]; !queued {
			m.queueDelta(k, delta[string]{typ: deltaSync, object: obj})
		}
	})
}

// canPop reports whether popBatch would return without waiting.
func (m *fifoModel) canPop() bool {
	return len(m.queue) > 0 || m.wmDirty || (m.syncPending && m.initialCount == 0)
}

// pop takes up to max keys and renders them; it also applies them to the cache.
func (m *fifoModel) pop(max, maxDeltas int) ([]string, watermark, bool) {
	m.wmDirty = false
	n := min(len(m.queue), max)
	for i, deltas := 0, 0; i < n; i++ {
		if deltas += len(m.items[m.queue[i]]); deltas > maxDeltas && i > 0 {
			n = i
		}
	}
	var out []string
	for _, k := range m.queue[:n] {
		out = append(out, renderDeltas(k, m.items[k]))
		if m.initialCount > 0 {
			m.initialCount--
		}
		m.pending -= len(m.items[k])
		applyToKnown(m.known, k, m.items[k])
		delete(m.items, k)
	}
	m.queue = m.queue[n:]
	wm := watermark{rev: m.lastRev, inclusive: true}
	if len(m.queue) > 0 {
		wm = watermark{rev: m.items[m.queue[0]][0].revision}
	}
	synced := m.syncPending && m.initialCount == 0
	if synced {
		m.syncPending = false
	}
	return out, wm, synced
}

// applyToKnown applies a popped key to a cache the way the informer does: a delete removes
// it, anything else stores the newest object.
func applyToKnown(known sortedKnown, key string, ds []delta[string]) {
	if last := ds[len(ds)-1]; last.typ == deltaDeleted {
		delete(known, key)
	} else {
		known[key] = last.object
	}
}

func renderDeltas(key string, ds []delta[string]) string {
	var b strings.Builder
	b.WriteString(key)
	b.WriteString(":")
	for i, d := range ds {
		if i > 0 {
			b.WriteString(",")
		}
		if d.initial {
			b.WriteString("*")
		}
		if d.finalStateUnknown {
			fmt.Fprintf(&b, "Tombstone(%s@%s)", d.object, d.revision)
		} else {
			fmt.Fprintf(&b, "%v(%s@%s)", d.typ, d.object, d.revision)
		}
	}
	return b.String()
}

// FuzzDeltaFIFO decodes the input into a sequence of queue operations over four keys
// (2 bytes an operation: the operation and its argument), applies it to the real queue and
// to fifoModel, and compares every pop: keys in first-arrival order with their deltas,
// trailing-delete dedup, Replace tombstones for vanished known or queued keys,
// Resync skipping keys with pending deltas, the initial population and its sync
// , watermarks and the pending count that backpressure relies on.
func FuzzDeltaFIFO(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 1, 0, 5, 0})
	f.Add([]byte{3, 0x0f, 7, 0, 2, 0, 2, 0, 3, 0x01, 7, 0, 4, 0, 7, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			data = data[:512]
		}
		keys := []string{"a", "b", "c", "d"}
		known := sortedKnown{}
		q := newDeltaFIFO[string, string](known, nil, 0, false)
		m := &fifoModel{items: map[string][]delta[string]{}, known: sortedKnown{}}
		rev := 0
		next := func(key string) (string, string) {
			rev++
			return key + "." + strconv.Itoa(rev), strconv.Itoa(rev)
		}
		var trace []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("after %q: %s", trace, fmt.Sprintf(format, args...))
		}
		pop := func(max, maxDeltas int) {
			if !m.canPop() {
				trace = append(trace, "pop(skipped: would block)")
				return
			}
			trace = append(trace, fmt.Sprintf("pop(%d keys, %d deltas)", max, maxDeltas))
			batch, wm, synced, err := q.popBatch(nil, max, maxDeltas)
			if err != nil {
				fail("popBatch: %v", err)
			}
			var got []string
			for _, p := range batch {
				got = append(got, renderDeltas(p.key, p.list.deltas))
				applyToKnown(known, p.key, p.list.deltas)
			}
			q.finishBatch(batch)
			want, wantWM, wantSynced := m.pop(max, maxDeltas)
			if !slices.Equal(got, want) {
				fail("popped\n got  %q\n want %q", got, want)
			}
			if wm != wantWM || synced != wantSynced {
				fail("watermark %+v synced %v, want %+v %v", wm, synced, wantWM, wantSynced)
			}
		}
		for i := 0; i+1 < len(data); i += 2 {
			op, arg := data[i]%8, data[i+1]
			key := keys[int(arg)%len(keys)]
			switch op {
			case 0, 1, 2:
				typ := []deltaType{deltaAdded, deltaUpdated, deltaDeleted}[op]
				obj, r := next(key)
				trace = append(trace, fmt.Sprintf("%v(%s)", typ, obj))
				if err := q.add(typ, key, obj, r); err != nil {
					fail("add: %v", err)
				}
				m.add(typ, key, obj, r)
			case 3:
				// the low four bits choose the listed keys; bit 4 lists the first one twice
				rev++
				r := strconv.Itoa(rev)
				var lk, lo []string
				for j, k := range keys {
					if arg&(1<<j) != 0 {
						lk, lo = append(lk, k), append(lo, k+"."+r)
					}
				}
				if arg&0x10 != 0 && len(lk) > 0 {
					lk, lo = append(lk, lk[0]), append(lo, lk[0]+"."+r+"b")
				}
				trace = append(trace, fmt.Sprintf("replace(%q@%s)", lo, r))
				if err := q.Replace(lk, lo, r); err != nil {
					fail("replace: %v", err)
				}
				m.replace(lk, lo, r)
			case 4:
				trace = append(trace, "resync")
				if err := q.Resync(); err != nil {
					fail("resync: %v", err)
				}
				m.resync()
			case 5:
				pop(1+int(arg)%3, 1+int(arg>>2)%4) // bits 2–3: a limit on deltas too
			case 6:
				rev++
				r := strconv.Itoa(rev)
				trace = append(trace, "bookmark@"+r)
				q.Bookmark(r)
				m.lastRev, m.wmDirty = r, true
			case 7:
				pop(1<<20, math.MaxInt)
			}
			q.mu.Lock()
			pending, populated, initial := q.pending, q.populated, q.initialCount
			q.mu.Unlock()
			if pending != m.pending {
				fail("pending %d, want %d", pending, m.pending)
			}
			if hs := q.HasSynced(); hs != (m.populated && m.initialCount == 0) || populated != m.populated || initial != m.initialCount {
				fail("hasSynced %v populated %v initial %d, want populated %v initial %d", hs, populated, initial, m.populated, m.initialCount)
			}
		}
		for m.canPop() {
			pop(1<<20, math.MaxInt)
		}
		if !maps.Equal(known, m.known) {
			fail("cache %v, model %v", known, m.known)
		}
		q.Close()
	})
}
