package fanout

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// DefaultCatchUpWait is how long a Server waits, when ServerOptions.CatchUpWait is 0, for
// its informer to reach a revision a request asks for that it has not reached yet (a
// client that comes from a replica further ahead) before it answers 410.
const DefaultCatchUpWait = 5 * time.Second

// revisionMap translates revisions and continue tokens between the wire and the
// server's log: the upstream's revisions, or the server's own numbering.
type revisionMap interface {
	// WatchRevision translates the resourceVersion of a watch request (never "" or "0").
	// An error matching informer.ErrExpired is answered 410; any other error 400.
	WatchRevision(onWire string) (string, error)
	// ListRevision translates the resourceVersion of a list request (never "" or "0");
	// "" means any state will do. Errors as for WatchRevision.
	ListRevision(onWire string) (string, error)
	// AppendWire appends the wire form of a log revision, unquoted, and reports whether
	// it is the newest revision the log has (so that buffered frames should be sent).
	AppendWire(dst []byte, rev string) ([]byte, bool)
	// ContinueToken translates a continue token of a request; errors as for WatchRevision.
	ContinueToken(onWire string) (string, error)
	// AppendContinue appends the wire form of a continue token, unquoted.
	AppendContinue(dst []byte, tok string) []byte
	// Await waits, bounded, until the server has reached the revision of a request (not
	// "" or "0"): a replica behind its client. Its error is answered as WatchRevision's.
	Await(ctx context.Context, onWire string) error
}

// bound says that the server's log up to seq is exactly the upstream's state at every
// revision from first to last (without history tags), a state whose history tag is tag,
// the upstream's, or else state in base 36 (its fingerprint).
type bound struct {
	seq         int64
	first, last string
	tag         string
	state       uint64
}

// appendTag appends the bound's history tag.
func (b bound) appendTag(dst []byte) []byte {
	if b.tag != "" {
		return append(dst, b.tag...)
	}
	return strconv.AppendUint(dst, b.state, 36)
}

// upstreamRevisions serves the upstream's own revisions (a Server whose informer's source
// is ordered). The log holds changes in batches, each ending at a bound; an event is
// labelled with the revision of its batch's bound, and every event of a batch but its
// last carries wire.PartialMark.
// Every revision sent carries the tag of its history, the upstream's or the fingerprint
// of the state (mirror.OnRevision), which a resume from a state the server held must
// match (sameHistoryLocked).
type upstreamRevisions struct {
	cmp  informer.RevisionComparer
	tag  string        // the prefix of continue tokens
	head *atomic.Int64 // the log revision of the newest change
	wait time.Duration // how long Await waits for a revision (CatchUpWait)

	trimmed int64 // the history's start at the last trim; the mirror's, under its lock

	mu     sync.RWMutex
	bounds []bound       // oldest first; the first is at or after the history's start
	moved  chan struct{} // closed when the newest bound moves; nil while no request waits
	ready  chan struct{} // closed at the first bound
	left   string        // the newest revision of the last history left (reached); "": none
	once   sync.Once
}

// newUpstreamRevisions returns the revisions of an upstream ordered by cmp; tag starts
// continue tokens, head is the log's newest revision, and wait bounds Await
// (CatchUpWait; negative: no wait).
func newUpstreamRevisions(cmp informer.RevisionComparer, tag string, head *atomic.Int64, wait time.Duration) *upstreamRevisions {
	return &upstreamRevisions{cmp: cmp, tag: tag, head: head, wait: wait, ready: make(chan struct{})}
}

// Ready returns a channel closed once the first revision is reached.
func (u *upstreamRevisions) Ready() <-chan struct{} { return u.ready }

// IsReady reports whether the first revision is reached.
func (u *upstreamRevisions) IsReady() bool {
	select {
	case <-u.ready:
		return true
	default:
		return false
	}
}

// Reached records that the log up to seq is the upstream's state at rev, whose
// fingerprint is state; moved reports whether the revision moved (not for one no newer
// than the newest bound's). Requests see the bound once head reaches seq; then call
// Settled. A rev older than the newest bound's, or as old with another state, is of
// another history (a restore from a backup): the old bounds are forgotten, so that no
// request resumes from one, and other reports it, for the caller to end the old
// history's watches before it logs anything of the new. It takes no other lock.
func (u *upstreamRevisions) Reached(seq int64, rev string, state uint64) (moved, other bool) {
	rev, tag := wire.CutHistory(rev)
	b := bound{seq: seq, first: rev, last: rev, tag: tag, state: state}
	u.mu.Lock()
	defer u.mu.Unlock()
	n := len(u.bounds)
	if n > 0 {
		var x, y [16]byte
		c, err := u.cmp.CompareRevisions(rev, u.bounds[n-1].last)
		if err == nil && (c < 0 || c == 0 && string(b.appendTag(x[:0])) != string(u.bounds[n-1].appendTag(y[:0]))) {
			other = true
			u.left = u.bounds[n-1].last
			u.bounds, n = u.bounds[:0], 0
		}
	}
	switch {
	case n == 0:
		u.bounds = append(u.bounds, b)
		u.once.Do(func() { close(u.ready) })
	case u.bounds[n-1].seq == seq:
		if c, err := u.cmp.CompareRevisions(rev, u.bounds[n-1].last); err != nil || c <= 0 {
			return false, other
		}
		// The same state at a newer revision: the same fingerprint; the upstream's tag
		// of the newer one (a filtered chain may see its upstream's state change).
		u.bounds[n-1].last, u.bounds[n-1].tag, u.bounds[n-1].state = rev, tag, state
	default:
		if c, err := u.cmp.CompareRevisions(rev, u.bounds[n-1].last); err != nil || c <= 0 {
			// Changes at a revision already announced that leave the state as it was (an
			// object created and deleted again): they join the newest batch.
			u.bounds[n-1].seq = seq
			break
		}
		u.bounds = append(u.bounds, b)
	}
	return true, other
}

// settled wakes the requests waiting for a revision: the newest bound is complete.
func (u *upstreamRevisions) Settled() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.moved != nil {
		close(u.moved)
		u.moved = nil
	}
}

// completeLocked returns the bounds whose changes the log holds: all but a newest one
// still being written.
func (u *upstreamRevisions) completeLocked() []bound {
	if n := len(u.bounds); n > 0 && u.bounds[n-1].seq > u.head.Load() {
		return u.bounds[:n-1]
	}
	return u.bounds
}

// trim drops the bounds before the history's start (compacted): no watch can start there.
func (u *upstreamRevisions) Trim(compacted int64) {
	if compacted <= u.trimmed {
		return
	}
	u.trimmed = compacted
	u.mu.Lock()
	defer u.mu.Unlock()
	i := 0
	for i < len(u.bounds)-1 && u.bounds[i].seq < compacted {
		i++
	}
	if i > 0 {
		u.bounds = u.bounds[:copy(u.bounds, u.bounds[i:])]
	}
}

// newest returns the newest revision reached, "" before the first.
func (u *upstreamRevisions) Newest() string {
	u.mu.RLock()
	defer u.mu.RUnlock()
	bounds := u.completeLocked()
	if len(bounds) == 0 {
		return ""
	}
	return bounds[len(bounds)-1].last
}

// parse checks a revision of a request: the upstream's, or one that ends a partial batch,
// with the tag of its history or without (a client that did not ask for tags).
func (u *upstreamRevisions) parse(onWire string) (rev, tag string, partial bool, err error) {
	rev, partial = strings.CutSuffix(onWire, string(wire.PartialMark))
	rev, tag = wire.CutHistory(rev)
	if wire.IsOwnRevision(rev) {
		return "", "", false, fmt.Errorf("resourceVersion %q is a revision of a server that numbers its changes itself, not of this server's upstream: %w", onWire, informer.ErrExpired)
	}
	if _, err := u.cmp.CompareRevisions(rev, rev); err != nil {
		return "", "", false, fmt.Errorf("resourceVersion %q is not a revision of this server's upstream: %v", onWire, err)
	}
	return rev, tag, partial, nil
}

// behind reports whether rev is newer than every revision reached, and returns the
// channel closed when that changes.
func (u *upstreamRevisions) behind(rev string) (bool, <-chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	bounds := u.completeLocked()
	if len(bounds) > 0 {
		if c, err := u.cmp.CompareRevisions(rev, bounds[len(bounds)-1].last); err != nil || c <= 0 {
			return false, nil
		}
	}
	if u.moved == nil {
		u.moved = make(chan struct{})
	}
	return true, u.moved
}

// leftHistory returns the newest revision of the history the upstream left if rev is at or
// before it (a client that held a state of the old history), else "".
func (u *upstreamRevisions) leftHistory(rev string) string {
	u.mu.RLock()
	defer u.mu.RUnlock()
	if !u.leftAtOrAfterLocked(rev) {
		return ""
	}
	return u.left
}

// leftAtOrAfterLocked reports whether the upstream left a history at or after rev.
func (u *upstreamRevisions) leftAtOrAfterLocked(rev string) bool {
	if u.left == "" {
		return false
	}
	c, err := u.cmp.CompareRevisions(rev, u.left)
	return err == nil && c <= 0
}

// Await waits, at most CatchUpWait, until the revision of a request is reached. It returns an
// error matching informer.ErrExpired if it is not (a client ahead of this replica, or of
// another upstream), which is answered 410.
func (u *upstreamRevisions) Await(ctx context.Context, onWire string) error {
	wait := u.wait
	rev, _, _, err := u.parse(onWire)
	if err != nil {
		return nil // answered by WatchRevision or ListRevision
	}
	var timer *time.Timer
	for {
		behind, moved := u.behind(rev)
		if !behind {
			return nil
		}
		if left := u.leftHistory(rev); left != "" {
			return fmt.Errorf("resourceVersion %s is a revision of the history this server's upstream left (its revisions went back from %s to %s: restored from a backup, or replaced): list again: %w", onWire, left, u.Newest(), informer.ErrOtherHistory)
		}
		if wait <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-moved:
			continue
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		break
	}
	// Past the wait, the revision may never come here (another upstream's, or one of
	// before a restore): the client lists again rather than retry it for good.
	return fmt.Errorf("this replica has not reached resourceVersion %s (its newest is %q; waited %v): list again: %w", onWire, u.Newest(), max(wait, 0), informer.ErrExpired)
}

func (u *upstreamRevisions) WatchRevision(onWire string) (string, error) {
	rev, tag, partial, err := u.parse(onWire)
	if err != nil {
		return "", err
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	bounds := u.completeLocked()
	// i: the newest bound whose first revision is at or before rev.
	i := countBefore(bounds, func(b bound) bool {
		c, _ := u.cmp.CompareRevisions(b.first, rev)
		return c <= 0
	}) - 1
	older := func() error {
		oldest := ""
		if len(bounds) > 0 {
			oldest = bounds[0].first
		}
		return fmt.Errorf("resourceVersion %s is older than this server's history (its oldest revision is %q): %w", onWire, oldest, informer.ErrExpired)
	}
	if i < 0 {
		return "", older()
	}
	held := true // the server held the state at rev: bound i's
	if c, _ := u.cmp.CompareRevisions(rev, bounds[i].last); c > 0 {
		if i == len(bounds)-1 {
			return "", fmt.Errorf("this replica has not reached resourceVersion %s yet (its newest is %q): retry, here or at another replica: %w", onWire, bounds[i].last, informer.ErrUnavailable)
		}
		held = false // rev is inside the batch after bound i
	}
	if err := u.sameHistoryLocked(onWire, rev, tag, bounds[i], held); err != nil {
		return "", err
	}
	// A client that holds part of the batch that ends at rev (one that does not apply
	// batches whole) starts before that batch.
	if c, _ := u.cmp.CompareRevisions(bounds[i].first, rev); partial && c == 0 {
		if i--; i < 0 {
			return "", older()
		}
	}
	// Between bounds i and i+1 the client's state is the upstream's at rev: the batch
	// after bound i brings each of its keys to a state at least as new as the client's.
	return strconv.FormatInt(bounds[i].seq, 10), nil
}

// sameHistoryLocked checks that the state a client resumes from, rev with tag ("": none),
// is of this server's history; b is the newest bound at or before rev, held whether its
// state is rev's (rev is not inside a batch). Where held, the tag is checked; otherwise,
// or without a tag, a rev at or before the newest revision of a history left is refused.
func (u *upstreamRevisions) sameHistoryLocked(onWire, rev, tag string, b bound, held bool) error {
	switch {
	case tag != "" && held && string(b.appendTag(nil)) != tag:
		return fmt.Errorf("resourceVersion %s names a state of another history of the upstream than this server's state at %s (restored from a backup, seen by one of the client and this server and not yet by the other): list again: %w", onWire, rev, informer.ErrOtherHistory)
	case tag != "" && held, !u.leftAtOrAfterLocked(rev):
		return nil
	}
	why := "it carries no history tag"
	if tag != "" {
		why = "this server's changes around it were one batch"
	}
	return fmt.Errorf("resourceVersion %s may be of the history this server's upstream left at revision %s (restored from a backup, or replaced), and this server cannot tell (%s): list again: %w", onWire, u.left, why, informer.ErrOtherHistory)
}

func (u *upstreamRevisions) ListRevision(onWire string) (string, error) {
	rev, _, _, err := u.parse(onWire)
	if err != nil {
		return "", err
	}
	if behind, _ := u.behind(rev); behind {
		return "", fmt.Errorf("this replica has not reached resourceVersion %s yet (its newest is %q): retry, here or at another replica: %w", onWire, u.Newest(), informer.ErrUnavailable)
	}
	return "", nil // every state served is at least as new
}

func (u *upstreamRevisions) AppendWire(dst []byte, local string) ([]byte, bool) {
	n, err := strconv.ParseInt(local, 10, 64)
	if err != nil {
		return append(dst, local...), true // not a log revision; cannot happen
	}
	u.mu.RLock()
	i := len(u.bounds) - 1 // a watcher that keeps up reads the newest batch
	if i < 0 || u.bounds[i].seq < n || (i > 0 && u.bounds[i-1].seq >= n) {
		i = countBefore(u.bounds, func(b bound) bool { return b.seq < n })
	}
	var b bound
	ok := i < len(u.bounds)
	if ok {
		b = u.bounds[i]
	} else if len(u.bounds) > 0 {
		b = u.bounds[len(u.bounds)-1] // cannot happen: a batch's bound is set before its changes
	}
	u.mu.RUnlock()
	dst = append(dst, b.last...)
	dst = append(dst, wire.HistoryMark)
	dst = b.appendTag(dst)
	if n < b.seq || !ok {
		dst = append(dst, wire.PartialMark)
	}
	return dst, n >= u.head.Load()
}

func (u *upstreamRevisions) ContinueToken(onWire string) (string, error) {
	return continueToken(u.tag, onWire)
}

func (u *upstreamRevisions) AppendContinue(dst []byte, tok string) []byte {
	return appendContinue(dst, u.tag, tok)
}

// countBefore returns the number of leading bounds for which before holds (a binary search over
// a predicate that holds for a prefix).
func countBefore(bounds []bound, before func(bound) bool) int {
	i, _ := slices.BinarySearchFunc(bounds, true, func(b bound, _ bool) int {
		if before(b) {
			return -1
		}
		return 1
	})
	return i
}

// continueToken checks that a continue token carries tag and returns the rest.
func continueToken(tag, onWire string) (string, error) {
	t, tok, ok := strings.Cut(onWire, ".")
	if !ok || tok == "" {
		return "", fmt.Errorf("malformed continue token %q", onWire)
	}
	if t != tag {
		return "", fmt.Errorf("continue token %q is from another instance of this server: %w", onWire, informer.ErrExpired)
	}
	return tok, nil
}

func appendContinue(dst []byte, tag, tok string) []byte {
	dst = append(dst, tag...)
	dst = append(dst, '.')
	return append(dst, tok...)
}

// offsetRevisions is a Server's own numbering, for an upstream whose revisions are not
// ordered: the log's revisions (0, 1, 2, …) are sent as <tag>.<n>, tag the server's start
// time in base 36, so that a revision of another numbering — another instance's, or an
// upstream's — is never taken for one of this server's.
type offsetRevisions struct {
	tag  string        // the server's start time in base 36
	head *atomic.Int64 // the log revision of the newest change
}

// newOffsetRevisions returns the numbering of tag; head is the log's newest revision.
func newOffsetRevisions(tag string, head *atomic.Int64) *offsetRevisions {
	return &offsetRevisions{tag: tag, head: head}
}

// Await has nothing to wait for: a revision of this numbering is one the server made.
func (o *offsetRevisions) Await(context.Context, string) error { return nil }

// parse returns the log revision of a wire revision; foreign reports a revision of
// another numbering.
func (o *offsetRevisions) parse(onWire string) (n int64, foreign bool, err error) {
	tag, num, ok := strings.Cut(onWire, ".")
	switch {
	case ok && tag == o.tag && wire.IsCanonicalInteger(num):
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("resourceVersion %q is not a revision of this server (%s.<n>)", onWire, o.tag)
		}
		return n, false, nil
	case wire.IsOwnRevision(onWire) || wire.IsCanonicalInteger(onWire):
		return 0, true, nil
	}
	return 0, false, fmt.Errorf("resourceVersion %q is not a revision of this server (%s.<n>)", onWire, o.tag)
}

func (o *offsetRevisions) WatchRevision(onWire string) (string, error) {
	n, foreign, err := o.parse(onWire)
	if err != nil {
		return "", err
	}
	if foreign {
		return "", fmt.Errorf("resourceVersion %s is of another numbering than this server's (another instance, or the upstream's; this server's revisions are %s.<n>): %w", onWire, o.tag, informer.ErrExpired)
	}
	return strconv.FormatInt(n, 10), nil
}

func (o *offsetRevisions) ListRevision(onWire string) (string, error) {
	n, foreign, err := o.parse(onWire)
	if err != nil || foreign {
		return "", err // another numbering: any state of this instance will do
	}
	return strconv.FormatInt(n, 10), nil
}

func (o *offsetRevisions) AppendWire(dst []byte, rev string) ([]byte, bool) {
	var n int64
	for i := 0; i < len(rev); i++ {
		c := rev[i]
		if c < '0' || c > '9' || i > 18 {
			return append(dst, rev...), true // not a log revision; cannot happen
		}
		n = n*10 + int64(c-'0')
	}
	dst = append(dst, o.tag...)
	dst = append(dst, '.')
	return strconv.AppendInt(dst, n, 10), n >= o.head.Load()
}

func (o *offsetRevisions) ContinueToken(onWire string) (string, error) {
	return continueToken(o.tag, onWire)
}

func (o *offsetRevisions) AppendContinue(dst []byte, tok string) []byte {
	return appendContinue(dst, o.tag, tok)
}
