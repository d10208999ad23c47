package informer

// Methods of the delta queue that only tests use.

// String returns the name of the delta type.
func (t deltaType) String() string {
	switch t {
	case deltaAdded:
		return "Added"
	case deltaUpdated:
		return "Updated"
	case deltaDeleted:
		return "Deleted"
	case deltaReplaced:
		return "Replaced"
	case deltaSync:
		return "Sync"
	}
	return "deltaType(?)"
}

// add queues one watch change. It blocks while the queue is full and returns
// errFIFOClosed once closed.
func (f *deltaFIFO[K, V]) add(typ deltaType, key K, obj V, rev string) error {
	return f.addPrepared(typ, key, obj, rev, false, nil)
}

// HasSynced reports whether the initial population has been popped. The informer
// reports synced only once that batch is also applied.
func (f *deltaFIFO[K, V]) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.populated && f.initialCount == 0 && len(f.bulks) == 0
}

// watermark is what Pop reports, as one value.
type watermark struct {
	rev       string
	inclusive bool
}

// popBatch is Pop into buf, for tests that read the popped entries.
func (f *deltaFIFO[K, V]) popBatch(buf []popped[K, V], maxKeys, maxDeltas int) ([]popped[K, V], watermark, bool, error) {
	b := &batch[K, V]{items: buf}
	rev, inclusive, synced, err := f.Pop(b, maxKeys, maxDeltas)
	return b.items, watermark{rev: rev, inclusive: inclusive}, synced, err
}

// finishBatch is Done for entries popBatch returned.
func (f *deltaFIFO[K, V]) finishBatch(items []popped[K, V]) { f.Done(&batch[K, V]{items: items}) }
