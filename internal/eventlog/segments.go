package eventlog

import (
	"strconv"
	"strings"

	"github.com/informer-go/informer"
)

// segmentSize is the number of events per log segment (a power of two).
const segmentSize = 512

// segments are the history: the events of revisions compacted+1 … last, stored in
// fixed-size segments so that appending never copies old events and compaction releases
// whole segments. Revision r lives in slot (r-1) % segmentSize of segment
// (r-1)/segmentSize - base/segmentSize. The zero value is an empty log.
type segments[V any] struct {
	segs  [][]informer.Event[V]
	base  int64               // revisions at or before base have no segment; a multiple of segmentSize
	spare []informer.Event[V] // a released, cleared segment kept for reuse
}

// at returns the event of revision rev, which must be in the log.
func (l *segments[V]) at(rev int64) informer.Event[V] {
	i := rev - 1 - l.base
	return l.segs[i/segmentSize][i%segmentSize]
}

// add stores ev as the event of revision rev, the one after the last.
func (l *segments[V]) add(rev int64, ev informer.Event[V]) {
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
func (l *segments[V]) drop(from, to int64) {
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

// revChunk is how many revision strings share one allocation.
const revChunk = 256

// revStrings hands out the decimal strings of consecutive revisions. They are cut from one
// string per revChunk revisions, so that a Put does not allocate a string of its own; a
// chunk stays alive while any of its revisions does (a few kilobytes at most).
type revStrings struct {
	first int64            // the revision whose string starts chunk
	chunk string           // the strings of revisions first, first+1, …, concatenated
	ends  [revChunk]uint16 // ends[i] is where the string of revision first+i ends
}

func (r *revStrings) get(rev int64) string {
	i := rev - r.first
	if r.chunk == "" || i < 0 || i >= revChunk {
		r.fill(rev)
		i = 0
	}
	var start uint16
	if i > 0 {
		start = r.ends[i-1]
	}
	return r.chunk[start:r.ends[i]]
}

func (r *revStrings) fill(first int64) {
	var buf [20]byte
	digits := len(strconv.AppendInt(buf[:0], first+revChunk-1, 10))
	var b strings.Builder
	b.Grow(revChunk * digits)
	for i := range int64(revChunk) {
		b.Write(strconv.AppendInt(buf[:0], first+i, 10))
		r.ends[i] = uint16(b.Len())
	}
	r.first, r.chunk = first, b.String()
}
