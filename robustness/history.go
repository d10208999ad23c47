package robustness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/v3"
)

// Change is one key's change at one etcd revision: a put of Value, or a delete.
type Change struct {
	// Key is the etcd key the change wrote, with the prefix.
	Key string
	// Value is the value a put wrote ("" for a delete).
	Value string
	// Deleted is true for a delete, false for a put.
	Deleted bool
}

// Epoch is one history of the prefix as etcd had it: from a base state at Base (empty at
// the start, the restored state after a restore) through every change after it, up to
// End, the revision etcd was at when the epoch ended (a restore began) or when the run
// ended. A restore from a backup starts a new epoch whose revisions may repeat those of
// the one before with other contents: that is what makes a restore dangerous to a cache.
type Epoch struct {
	// Base is the revision of the epoch's base state.
	Base int64
	// Initial is the base state: the prefix's keys and values at Base (empty at the start).
	Initial map[string]string
	// End is the revision etcd was at when the epoch ended.
	End int64
	// Shared is the revision up to which this epoch's history is the one before it: the
	// revision of the backup it was restored from (0 for the first epoch).
	Shared int64
	// Revs are the revisions at which the prefix changed, ascending; Changes[i] are the
	// changes of Revs[i] (several for a transaction or a lease expiry).
	Revs []int64
	// Changes[i] are the changes made at Revs[i].
	Changes [][]Change
	// byKey[k] are the revisions at which k changed, ascending, and the values (""
	// deleted) it took: an index of Revs/Changes for StateAt.
	byKey map[string][]version
}

type version struct {
	rev     int64
	value   string
	deleted bool
}

// NewEpoch returns an epoch whose state at base is initial.
func NewEpoch(base int64, initial map[string]string) *Epoch {
	e := &Epoch{Base: base, End: base, Initial: initial, byKey: make(map[string][]version)}
	for k, v := range initial {
		e.byKey[k] = []version{{rev: base, value: v}}
	}
	return e
}

// Add appends the changes of revision rev (greater than every revision added before).
func (e *Epoch) Add(rev int64, changes ...Change) {
	if n := len(e.Revs); n > 0 && e.Revs[n-1] == rev {
		e.Changes[n-1] = append(e.Changes[n-1], changes...)
	} else {
		e.Revs = append(e.Revs, rev)
		e.Changes = append(e.Changes, changes)
	}
	for _, c := range changes {
		e.byKey[c.Key] = append(e.byKey[c.Key], version{rev: rev, value: c.Value, deleted: c.Deleted})
	}
	e.End = max(e.End, rev)
}

// Keys returns every key the epoch ever held, sorted.
func (e *Epoch) Keys() []string {
	keys := make([]string, 0, len(e.byKey))
	for k := range e.byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ValueAt returns k's value at rev (Base ≤ rev), and whether k existed then.
func (e *Epoch) ValueAt(k string, rev int64) (string, bool) {
	vs := e.byKey[k]
	i := sort.Search(len(vs), func(i int) bool { return vs[i].rev > rev }) - 1
	if i < 0 || vs[i].deleted {
		return "", false
	}
	return vs[i].value, true
}

// StateAt returns the prefix's state at rev (Base ≤ rev ≤ End).
func (e *Epoch) StateAt(rev int64) map[string]string {
	state := make(map[string]string)
	for k := range e.byKey {
		if v, ok := e.ValueAt(k, rev); ok {
			state[k] = v
		}
	}
	return state
}

// writtenAt returns the revision at which k took value, and the revision of k's next
// change after that (End+1 if none), or ok false if k never had value in the epoch.
func (e *Epoch) writtenAt(k, value string) (at, next int64, ok bool) {
	vs := e.byKey[k]
	for i, v := range vs {
		if !v.deleted && v.value == value {
			next = e.End + 1
			if i+1 < len(vs) {
				next = vs[i+1].rev
			}
			return v.rev, next, true
		}
	}
	return 0, 0, false
}

// Slice describes the epoch's changes at revisions from..to, one line per revision, for
// a report.
func (e *Epoch) Slice(from, to int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch from revision %d (%d keys then) to %d\n", e.Base, len(e.Initial), e.End)
	for i, rev := range e.Revs {
		if rev < from || rev > to {
			continue
		}
		fmt.Fprintf(&b, "  rev %d:", rev)
		for _, c := range e.Changes[i] {
			if c.Deleted {
				fmt.Fprintf(&b, " del %s", c.Key)
			} else {
				fmt.Fprintf(&b, " put %s=%s", c.Key, c.Value)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// History is etcd's own record of the prefix during a run: one epoch per stretch between
// restores, in order.
type History struct {
	// Prefix is the etcd key prefix the history records.
	Prefix string
	// Epochs are the epochs of the run, in order: one per stretch between restores.
	Epochs []*Epoch
}

// recorder builds a History from a watch of the prefix on the members' own ports, which
// no injected partition touches. Compactions are kept behind what it has seen.
type recorder struct {
	cli    *clientv3.Client
	prefix string

	mu      sync.Mutex
	h       History
	seen    int64 // the newest revision the current epoch has reached
	err     error
	resumed int // watches opened again after etcd ended one
	cancel  context.CancelFunc
	done    chan struct{}
	moved   chan struct{} // signalled when seen advances
}

func newRecorder(cli *clientv3.Client, prefix string) *recorder {
	return &recorder{cli: cli, prefix: prefix, h: History{Prefix: prefix}, moved: make(chan struct{}, 1)}
}

// StartEpoch reads the prefix's state at revision at (0: the current one) and watches
// every change after it, as a new epoch whose history up to shared is the one before.
// The previous epoch must have been stopped. A restored cluster's epoch starts at the
// restored revision exactly: its leases may expire at once, and the state before that is
// one a cache may show.
func (r *recorder) StartEpoch(ctx context.Context, shared, at int64) error {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if at > 0 {
		opts = append(opts, clientv3.WithRev(at))
	}
	resp, err := r.cli.Get(ctx, r.prefix, opts...)
	if err != nil {
		return fmt.Errorf("history: reading the prefix: %w", err)
	}
	if at > 0 {
		resp.Header.Revision = at
	}
	initial := make(map[string]string)
	for _, kv := range resp.Kvs {
		initial[string(kv.Key)] = string(kv.Value)
	}
	e := NewEpoch(resp.Header.Revision, initial)
	e.Shared = shared
	r.mu.Lock()
	r.h.Epochs = append(r.h.Epochs, e)
	r.seen = resp.Header.Revision
	r.mu.Unlock()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	r.cancel, r.done = cancel, make(chan struct{})
	go r.follow(wctx, e)
	return nil
}

// follow records the epoch's changes from a watch of the prefix. A watch that etcd ends
// without a leader (a member cut off from the others, or a quorum down) is opened again
// after the revision seen, which compaction never passes: the recording has no gap. A
// compaction past it, or no watch for a minute, ends the recording with an error.
func (r *recorder) follow(ctx context.Context, e *Epoch) {
	defer close(r.done)
	failing := time.Time{} // since when the watch could not be kept open
	for ctx.Err() == nil {
		err := r.watch(ctx, e)
		if err == nil || ctx.Err() != nil {
			return
		}
		if failing.IsZero() {
			failing = time.Now()
		}
		if errors.Is(err, rpctypes.ErrCompacted) || time.Since(failing) > time.Minute {
			r.mu.Lock()
			r.err = fmt.Errorf("history: the recording watch ended: %w", err)
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		r.resumed++
		r.mu.Unlock()
		select { // a cluster without a leader: ask again shortly
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watch records changes after the revision seen until the watch ends: nil when ctx ended
// it, else why etcd did.
func (r *recorder) watch(ctx context.Context, e *Epoch) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := r.cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(r.Seen()+1), clientv3.WithProgressNotify())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			if wr.Canceled {
				return err
			}
			continue
		}
		r.mu.Lock()
		for _, ev := range wr.Events {
			c := Change{Key: string(ev.Kv.Key), Value: string(ev.Kv.Value), Deleted: ev.Type == clientv3.EventTypeDelete}
			if c.Deleted {
				c.Value = ""
			}
			e.Add(ev.Kv.ModRevision, c)
		}
		if wr.Header.Revision > r.seen {
			r.seen = wr.Header.Revision
			e.End = max(e.End, r.seen)
		}
		r.mu.Unlock()
		select {
		case r.moved <- struct{}{}:
		default:
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("the watch channel closed")
}

// Resumed returns how many times the recording watch was opened again after etcd ended it.
func (r *recorder) Resumed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resumed
}

// Seen returns the newest revision the recording has reached.
func (r *recorder) Seen() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

// WaitFor waits until the recording has reached rev (asking etcd for progress as it
// waits), or ctx ends.
func (r *recorder) WaitFor(ctx context.Context, rev int64) error {
	for {
		r.mu.Lock()
		seen, err := r.seen, r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
		if seen >= rev {
			return nil
		}
		_ = r.cli.RequestProgress(clientv3.WithRequireLeader(ctx))
		select {
		case <-r.moved:
		case <-time.After(100 * time.Millisecond): // ask again: a progress request may be lost to a failure
		case <-ctx.Done():
			return fmt.Errorf("history: the recording did not reach revision %d (at %d): %w", rev, seen, ctx.Err())
		}
	}
}

// StopEpoch ends the current epoch's watch; its End is the last revision seen.
func (r *recorder) StopEpoch() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

// History returns what was recorded (call it once the recording stopped).
func (r *recorder) History() (*History, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &r.h, r.err
}

// StateAt returns the current epoch's state at rev.
func (r *recorder) StateAt(rev int64) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h.Epochs[len(r.h.Epochs)-1].StateAt(rev)
}
