package informer

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer/clock"
)

// This file is how the reflector waits: the backoff between failed attempts, the
// periodic timer, and the watchdog that ends a source call that makes no progress.

// Backoff configures the reflector's jittered exponential backoff between failed attempts.
// The zero value means the defaults client-go uses: 800 ms doubling to 30 s, full jitter,
// Reset after 2 minutes without a failure. The backoff also starts again from Initial as
// soon as a watch delivers an event: it grows only while failures repeat without progress.
type Backoff struct {
	Initial time.Duration // default 800 ms
	Max     time.Duration // default 30 s
	Factor  float64       // default 2
	// Jitter adds up to Jitter×delay at random; default 1.0. A negative value disables it,
	// and with it the jitter before a relist after an expired watch (which then relists at
	// once).
	Jitter float64
	// Reset: a failure this long after the previous one starts again from Initial;
	// default 2 min.
	Reset time.Duration
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 800 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	if b.Factor < 1 {
		b.Factor = 2
	}
	if b.Jitter == 0 {
		b.Jitter = 1
	}
	if b.Jitter < 0 {
		b.Jitter = 0
	}
	if b.Reset <= 0 {
		b.Reset = 2 * time.Minute
	}
	return b
}

// backoff is the sliding exponential backoff between failed attempts: each call to next
// returns the delay to wait before the next attempt. It is used by the reflector's
// goroutine only.
type backoff struct {
	cfg   Backoff
	clock clock.Clock
	delay time.Duration
	last  time.Time
}

// newBackoff returns the backoff of cfg, with its defaults applied, on clk.
func newBackoff(cfg Backoff, clk clock.Clock) *backoff {
	return &backoff{cfg: cfg.withDefaults(), clock: clk}
}

// Next returns the wait before the next attempt, and grows the wait after it.
func (b *backoff) Next() time.Duration {
	now := b.clock.Now()
	if b.delay == 0 || now.Sub(b.last) > b.cfg.Reset {
		b.delay = b.cfg.Initial
	} else {
		b.delay = min(time.Duration(float64(b.delay)*b.cfg.Factor), b.cfg.Max)
	}
	b.last = now
	d := b.delay
	if b.cfg.Jitter > 0 {
		d += time.Duration(rand.Float64() * b.cfg.Jitter * float64(d))
	}
	return d
}

// Reset makes the next delay Initial again: the source made progress.
func (b *backoff) Reset() { b.delay = 0 }

// Step is the current backoff step (at least Initial), the window of the Warn rate limit.
func (b *backoff) Step() time.Duration { return max(b.delay, b.cfg.Initial) }

// Prompt is the wait before a relist that follows progress: uniform in [0, Initial/4), or
// nothing without jitter.
func (b *backoff) Prompt() time.Duration {
	if b.cfg.Jitter <= 0 || b.cfg.Initial < 4 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(b.cfg.Initial / 4)))
}

// every calls fn once per period, on clk, until ctx is done or fn returns false. A period
// starts when the previous call returns.
func every(ctx context.Context, clk clock.Clock, period time.Duration, fn func() bool) {
	t := clk.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if !fn() {
			return
		}
		t.Reset(period)
	}
}

// watchdog ends a call that makes no progress for a whole bound (checked every bound, so
// a stall is found between one and two bounds after the last progress): the reading
// goroutine counts each return of Next, or each page, in moved; stalled says the
// watchdog called its end function. It runs on the wall clock: a fake clock's waiters
// stay the test's.
type watchdog struct {
	moved   atomic.Uint64
	stalled atomic.Bool
	mu      sync.Mutex
	t       *time.Timer // nil: no bound, or stopped
}

// watchdogOf is the watchdog of a watch: it stops w once w makes no progress for bound (a
// panic in Stop is reported by the reader's own stop).
func watchdogOf[V any](w Watch[V], bound time.Duration) *watchdog {
	return newWatchdog(bound, func() {
		defer func() { _ = recover() }()
		w.Stop()
	})
}

func newWatchdog(bound time.Duration, end func()) *watchdog {
	d := &watchdog{}
	if bound <= 0 {
		return d
	}
	seen := uint64(0)
	var check func()
	check = func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.t == nil {
			return // stopped
		}
		if m := d.moved.Load(); m != seen {
			seen = m
			d.t = time.AfterFunc(bound, check)
			return
		}
		d.stalled.Store(true)
		d.t = nil
		end()
	}
	d.mu.Lock()
	d.t = time.AfterFunc(bound, check)
	d.mu.Unlock()
	return d
}

// Stop ends the watchdog.
func (d *watchdog) Stop() {
	d.mu.Lock()
	if d.t != nil {
		d.t.Stop()
		d.t = nil
	}
	d.mu.Unlock()
}

// Moved counts progress: a page read, or a return of Next.
func (d *watchdog) Moved() { d.moved.Add(1) }

// Stalled reports whether the watchdog ended the call.
func (d *watchdog) Stalled() bool { return d.stalled.Load() }
