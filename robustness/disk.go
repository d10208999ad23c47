package robustness

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"
)

// The slow disk's pace and stalls, for snapshot files of a few KiB.
const (
	diskChunk     = 64                     // bytes written at a time
	diskChunkTime = time.Millisecond       // the time each chunk takes
	diskReach     = 1024                   // faults are drawn at offsets below this (files are 1–2 KiB)
	stallMin      = 300 * time.Millisecond // a stall lasts from stallMin
	stallSpread   = 1200 * time.Millisecond
)

// faultyDisk returns the persist File's Options.WrapWriter of a disk that is slow
// (kind FailSlowDisk: every write throttled, about one save in two stalled mid-file,
// calling stalled as it stalls) or full (FailDiskFull: about one save in two fails at a
// random byte, as a full disk does), its faults drawn from seed; nil for any other kind:
// a healthy disk.
func faultyDisk(kind string, seed uint64, stalled func()) func(io.Writer) io.Writer {
	if kind != FailSlowDisk && kind != FailDiskFull {
		return nil
	}
	d := &disk{kind: kind, stalled: stalled, rng: rand.New(rand.NewPCG(seed, 0x6469736b))}
	return d.wrap
}

// disk is a faulty disk (faultyDisk). Saves run one at a time.
type disk struct {
	kind    string
	stalled func() // called as a write stalls, before it waits

	mu  sync.Mutex
	rng *rand.Rand
}

// wrap returns the writer of one save: on a slow disk, throttled and perhaps stalled at
// a random offset; on a full one, perhaps failing at a random offset.
func (d *disk) wrap(w io.Writer) io.Writer {
	d.mu.Lock()
	defer d.mu.Unlock()
	fw := &faultyWriter{w: w, stallAt: -1, failAt: -1, stalled: d.stalled}
	switch d.kind {
	case FailSlowDisk:
		fw.slow = true
		if d.rng.IntN(2) == 0 {
			fw.stallAt = d.rng.Int64N(diskReach)
			fw.stall = stallMin + time.Duration(d.rng.Int64N(int64(stallSpread)))
		}
	case FailDiskFull:
		if d.rng.IntN(2) == 0 {
			fw.failAt = d.rng.Int64N(diskReach)
		}
	}
	return fw
}

// faultyWriter is one save's writer on a faulty disk.
type faultyWriter struct {
	w       io.Writer
	slow    bool
	stallAt int64 // the offset where the write stalls, -1 for none
	stall   time.Duration
	failAt  int64 // the offset where the disk is full, -1 for never
	stalled func()
	written int64
}

// Write writes p in chunks: at failAt it writes what fits and fails with ENOSPC; at
// stallAt it stalls; a slow disk takes diskChunkTime per chunk.
func (fw *faultyWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		chunk := min(len(p)-n, diskChunk)
		end := fw.written + int64(chunk)
		if fw.failAt >= fw.written && fw.failAt < end {
			m, err := fw.w.Write(p[n : n+int(fw.failAt-fw.written)])
			fw.written += int64(m)
			if err != nil {
				return n + m, err
			}
			return n + m, fmt.Errorf("robustness: the disk is full at byte %d: %w", fw.failAt, syscall.ENOSPC)
		}
		if fw.stallAt >= fw.written && fw.stallAt < end {
			m, err := fw.w.Write(p[n : n+int(fw.stallAt-fw.written)])
			n += m
			fw.written += int64(m)
			if err != nil {
				return n, err
			}
			fw.stallAt = -1
			fw.stalled()
			time.Sleep(fw.stall) // the stalled disk, mid-file: a kill -9 lands now
			continue
		}
		if fw.slow {
			time.Sleep(diskChunkTime) // the slow disk's pace
		}
		m, err := fw.w.Write(p[n : n+chunk])
		n += m
		fw.written += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
