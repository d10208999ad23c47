package workqueue

// table maps items to values of type V: a Queue's items to their state, and the items
// waiting for AddAfter to their ready time. It is an open-addressing hash
// table with linear probing, a power-of-two number of slots, at most half full, and
// backward-shift deletion (no tombstones, so lookups never slow down as items come and
// go). Unlike a Go map it takes the hash from the caller: Queue computes it with
// hash/maphash before taking its lock and keeps it beside the item in the FIFO, so the
// critical sections do no hashing at all and Get does not even compare keys twice.
// It is not safe for concurrent use.
type table[T comparable, V any] struct {
	slots []slot[T, V]
	n     int // occupied slots
	quiet int // removes in a row at under 1/8 load; see remove
}

type slot[T, V any] struct {
	hash uint64 // 0 means empty; real hashes have the top bit set (see hashOf)
	val  V
	item T
}

const (
	tableMinSize = 16
	hashTopBit   = 1 << 63
)

// find returns the index of item's slot, or -1.
func (t *table[T, V]) find(h uint64, item T) int {
	if t.n == 0 {
		return -1
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hash == h && s.item == item {
			return int(i)
		}
		if s.hash == 0 {
			return -1
		}
	}
}

// insert returns the index of item's slot, adding a slot with the zero V for it if it had
// none (added reports which). The index is valid until the next insert or remove.
func (t *table[T, V]) insert(h uint64, item T) (i int, added bool) {
	if 2*(t.n+1) > len(t.slots) {
		t.resize(max(tableMinSize, 2*len(t.slots)))
	}
	mask := uint64(len(t.slots) - 1)
	j := h & mask
	for ; ; j = (j + 1) & mask {
		s := &t.slots[j]
		if s.hash == 0 {
			break
		}
		if s.hash == h && s.item == item {
			return int(j), false
		}
	}
	t.slots[j] = slot[T, V]{hash: h, item: item}
	t.n++
	if 4*t.n >= len(t.slots) {
		t.quiet = 0
	}
	return int(j), true
}

// remove empties slot i, shifting back the entries of the probe run behind it so that
// every entry stays reachable from its home slot.
func (t *table[T, V]) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].hash != 0; j = (j + 1) & mask {
		home := int(t.slots[j].hash) & mask
		// The entry at j may fill the hole at i unless its home lies cyclically in
		// (i, j], in which case moving it to i would put it before its home.
		var stays bool
		if i <= j {
			stays = i < home && home <= j
		} else {
			stays = i < home || home <= j
		}
		if !stays {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot[T, V]{}
	t.n--
	// Shrink only after as many removes at low load as there are slots, and only if
	// the table has not been a quarter full meanwhile: a queue that fills and drains in
	// bursts keeps its table, one that has settled below its peak gives memory back, and
	// the cost of each resize is paid for by the removes before it.
	if len(t.slots) > tableMinSize && 8*t.n < len(t.slots) {
		if t.quiet++; t.quiet >= len(t.slots) {
			t.quiet = 0
			t.resize(len(t.slots) / 2)
		}
	}
}

// resize rehashes every entry into size slots, from the stored hashes.
func (t *table[T, V]) resize(size int) {
	old := t.slots
	t.slots = make([]slot[T, V], size)
	mask := uint64(size - 1)
	for k := range old {
		s := &old[k]
		if s.hash == 0 {
			continue
		}
		j := s.hash & mask
		for t.slots[j].hash != 0 {
			j = (j + 1) & mask
		}
		t.slots[j] = *s
	}
}
