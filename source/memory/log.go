package memory

import "github.com/informer-go/informer"

// segmentSize is the number of events per log segment (a power of two).
const segmentSize = 512

// eventLog is the history: the events of revisions compacted+1 … last, stored in
// fixed-size segments so that appending never copies old events and compaction releases
// whole segments. Revision r lives in slot (r-1) % segmentSize of segment
// (r-1)/segmentSize - base/segmentSize. The zero value is an empty log.
type eventLog[V any] struct {
	segs  [][]informer.Event[V]
	base  int64               // revisions at or before base have no segment; a multiple of segmentSize
	spare []informer.Event[V] // a released, cleared segment kept for reuse
}

// at returns the event of revision rev, which must be in the log.
func (l *eventLog[V]) at(rev int64) informer.Event[V] {
	i := rev - 1 - l.base
	return l.segs[i/segmentSize][i%segmentSize]
}

// add stores ev as the event of revision rev, the one after the last.
func (l *eventLog[V]) add(rev int64, ev informer.Event[V]) {
	i := rev - 1 - l.base
	if int(i/segmentSize) == len(l.segs) {
		seg := l.spare
		if seg == nil {
			seg = make([]informer.Event[V], segmentSize)
		}
		l.spare = nil
		l.segs = append(l.segs, seg)
	}
	l.segs[i/segmentSize][i%segmentSize] = ev
}

// drop forgets the events of revisions from+1 … to: it clears them so that their objects
// can be collected, and releases the segments that hold nothing newer.
func (l *eventLog[V]) drop(from, to int64) {
	for r := from + 1; r <= to; {
		i := r - 1 - l.base
		seg, slot := l.segs[i/segmentSize], i%segmentSize
		n := min(segmentSize-slot, to-r+1)
		clear(seg[slot : slot+n])
		r += n
	}
	whole := (to - l.base) / segmentSize
	if whole == 0 {
		return
	}
	l.spare = l.segs[whole-1] // already cleared
	clear(l.segs[:whole])
	l.segs = l.segs[whole:]
	if len(l.segs) == 0 {
		l.segs = nil
	}
	l.base += whole * segmentSize
}
