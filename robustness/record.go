package robustness

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Item is what every informer of the suite mirrors: an etcd key and its value.
type Item struct {
	// Key is the etcd key, with the prefix; Value is its value.
	Key, Value string
}

// Read is one published state a participant was seen to hold: a Snapshot() of an
// informer, a list through a fan-out tier, or a state a warm restart restored.
type Read struct {
	Who string    // the participant: informer or client name
	At  time.Time // when the read was taken
	// Restores is how many etcd restores had begun when the read was taken: the state may
	// belong to any epoch up to that one (a cache is allowed to be behind, never wrong).
	Restores int
	// Label is the revision the state said it reflects.
	Label int64
	// State is the state read: key → value.
	State map[string]string
	// Index is the state's "last" index as the reader saw it: value → keys, sorted; nil
	// when the read had no index to check.
	Index map[string][]string
	// Exact is true for a state that claims to be exactly etcd's at Label (a saved
	// snapshot, a warm restart's restored state), false for a read that may hold changes
	// after Label (a non-exact Snapshot()).
	Exact bool
	// Kind says what was read ("snapshot", "saved", "restored").
	Kind string
	// Filter is a filtered client's filter value: its state holds only the keys whose
	// values index there ("": every key).
	Filter string
}

// Note is one notification a handler received.
type Note struct {
	// Handler is the name of the handler that received the notification.
	Handler string
	Seq     int    // per handler, from 0
	Kind    string // "add", "update", "delete", "resync"
	// Key is the key of the object notified about.
	Key     string
	Value   string // the new state; for a delete, the last state given
	Old     string // for an update, the old state given
	Initial bool   // OnAdd's initial
	Unknown bool   // OnDelete's finalStateUnknown
}

// Policy names a handler's queue policy for the validators: a Coalesce handler may skip
// intermediate states, a Block handler may not.
type Policy string

// The handler policies the suite runs.
const (
	PolicyBlock    Policy = "block"
	PolicyCoalesce Policy = "coalesce"
)

// Handler records every notification it is given, in order, for the validators; Delay
// makes it slow.
type Handler struct {
	// Name is the handler's name, recorded in its notes.
	Name string
	// Policy is the handler's queue policy.
	Policy Policy
	// Delay is how long the handler sleeps on each notification (0: none).
	Delay time.Duration

	mu    sync.Mutex
	notes []Note
	last  map[string]string // the key's state as the handler last heard it; absent: deleted
}

// NewHandler returns a recording handler.
func NewHandler(name string, p Policy, delay time.Duration) *Handler {
	return &Handler{Name: name, Policy: p, Delay: delay, last: make(map[string]string)}
}

func (h *Handler) record(n Note) {
	if h.Delay > 0 {
		time.Sleep(h.Delay) // the work a slow handler does
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n.Handler, n.Seq = h.Name, len(h.notes)
	h.notes = append(h.notes, n)
	if n.Kind == "delete" {
		delete(h.last, n.Key)
	} else {
		h.last[n.Key] = n.Value
	}
}

// OnAdd records an add.
func (h *Handler) OnAdd(it *Item, initial bool) {
	h.record(Note{Kind: "add", Key: it.Key, Value: it.Value, Initial: initial})
}

// OnUpdate records an update, or a resync when old and new are the same object.
func (h *Handler) OnUpdate(old, it *Item) {
	kind := "update"
	if old == it {
		kind = "resync"
	}
	h.record(Note{Kind: kind, Key: it.Key, Value: it.Value, Old: old.Value})
}

// OnDelete records a delete.
func (h *Handler) OnDelete(it *Item, unknown bool) {
	h.record(Note{Kind: "delete", Key: it.Key, Value: it.Value, Unknown: unknown})
}

// Notes returns a copy of the notifications so far.
func (h *Handler) Notes() []Note {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.notes)
}

// State returns the state the handler's notifications add up to.
func (h *Handler) State() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.last))
	for k, v := range h.last {
		out[k] = v
	}
	return out
}

// Recording is everything the participants of a run saw, for the validators.
type Recording struct {
	mu sync.Mutex
	// Reads are the states the participants were seen to hold, in recording order.
	Reads []Read
	// Handlers are the recording handlers of the run's informers.
	Handlers []*Handler
	// Errors are the errors the informers' ErrorHandlers received.
	Errors []ReportedError
	// Waits are the read-your-writes checks: a read after WaitForRevision returned.
	Waits []Wait
	// Writes are the leader-only writes the reconcile loop had accepted, in acceptance order.
	Writes []FencedWrite
	// Kills are the kills of the leader-only controller's leader.
	Kills []ControllerKill
	// Heap samples the process's live heap, in bytes, across the run.
	Heap []uint64
	// Files are the steps of the informers' snapshot files, in the order they happened.
	Files    []FileEvent
	max      int
	sink     func(Read)      // when set, reads go there instead (an informer process streams them)
	fileSink func(FileEvent) // likewise for the steps of snapshot files
}

// FileEvent is a step of an informer's snapshot file: a save begun ("save"), done
// ("saved") or failed ("failed"), each with the revision it saves; or the file read
// outside a save ("loaded": at a warm start, or after a save failed) and what it held.
type FileEvent struct {
	// Who is the informer whose file it is.
	Who string
	// Kind is "save", "saved", "failed" or "loaded".
	Kind string
	// Label is the revision saved, or the revision the file held when it was loaded whole.
	Label int64
	// Found is what a load found: "whole", "none" (no file), "corrupt" (a torn or damaged
	// file) or "refused" (a whole file of another configuration, or a load cut short).
	Found string
	// After says when a load happened: "warm start" or "failed save".
	After string
	// Err is the load's error, if any.
	Err string
}

// ReportedError is one error an informer's ErrorHandler received.
type ReportedError struct {
	// Informer is the name of the informer that reported the error.
	Informer string
	// Text is the error's message.
	Text string
}

// Wait is a read taken after WaitForRevision(Rev) returned: its Label must be at least Rev.
type Wait struct {
	// Who is the participant that waited and read.
	Who string
	// Rev is the revision WaitForRevision was given.
	Rev int64
	// Label is the revision the read's state said it reflects.
	Label int64
}

// FencedWrite is a write the leader-only controller made and etcd accepted: Term is its
// leadership's term (the election key's create revision), Rev the write's revision, Epoch
// the restores begun before it was sent and still when it was accepted (a write that a
// restore overlapped is not recorded: which history took it is unknown).
type FencedWrite struct {
	// Term is the writer's leadership term: the election key's create revision.
	Term int64
	// Rev is the revision etcd gave the write.
	Rev int64
	// Key is the etcd key written.
	Key string
	// Epoch is the number of restores begun before the write was sent.
	Epoch int
	// At is when etcd's answer reached the writer.
	At time.Time
}

// ControllerKill is a kill -9 of the leader-only controller's leader: the replica's key,
// its newest term and when it was killed.
type ControllerKill struct {
	// Key is the key the killed replica writes.
	Key string
	// Term is the newest term the killed replica wrote in.
	Term int64
	// At is when it was killed.
	At time.Time
}

func newRecording(maxReads int) *Recording { return &Recording{max: maxReads} }

// AddRead records a read unless the recording is full.
func (r *Recording) AddRead(rd Read) {
	if r.sink != nil {
		r.sink(rd)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.Reads) < r.max {
		r.Reads = append(r.Reads, rd)
	}
}

// Full reports whether no more reads will be recorded.
func (r *Recording) Full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.Reads) >= r.max
}

// AddFile records a step of a snapshot file.
func (r *Recording) AddFile(ev FileEvent) {
	if r.fileSink != nil {
		r.fileSink(ev)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Files = append(r.Files, ev)
}

// AddError records an error an informer reported.
func (r *Recording) AddError(who string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Errors = append(r.Errors, ReportedError{Informer: who, Text: err.Error()})
}

// AddWait records a read-your-writes check.
func (r *Recording) AddWait(w Wait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Waits = append(r.Waits, w)
}

// AddWrite records an accepted leader-only write.
func (r *Recording) AddWrite(w FencedWrite) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Writes = append(r.Writes, w)
}

// AddKill records a kill of the controller's leader.
func (r *Recording) AddKill(k ControllerKill) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Kills = append(r.Kills, k)
}

// describeState prints a state's keys and values in key order, for reports.
func describeState(state map[string]string) string {
	keys := make([]string, 0, len(state))
	for k := range state {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", k, state[k])
	}
	return b.String()
}
