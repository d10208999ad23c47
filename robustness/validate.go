package robustness

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Violation is a guarantee a run broke: which validator found it, what it found, and the
// slice of etcd's history it concerns.
type Violation struct {
	// Validator is the name of the validator that found the violation.
	Validator string
	// Message says what was found.
	Message string
	// Slice is the part of etcd's history the violation concerns, as text ("": none).
	Slice string
}

// String returns the violation as text: the validator, the message and the slice, if any.
func (v Violation) String() string {
	s := v.Validator + ": " + v.Message
	if v.Slice != "" {
		s += "\n" + v.Slice
	}
	return s
}

// The validators' names, as the table and the reports print them.
const (
	OneHistory    = "one-history"
	HandlerOrder  = "handler-order"
	Converged     = "converged"
	ReadYourWrite = "read-your-writes"
	WarmRestart   = "warm-restart"
	SnapshotWhole = "snapshot-whole"
	FencedOrder   = "fenced-order"
	ErrorsNamed   = "errors-named"
	HeapBounded   = "heap-bounded"
	HeapTrend     = "heap-trend"
	Takeover      = "takeover"
)

// Validators lists every validator's name, in the table's order.
var Validators = []string{OneHistory, HandlerOrder, Converged, ReadYourWrite, WarmRestart, SnapshotWhole, FencedOrder, Takeover, ErrorsNamed, HeapBounded, HeapTrend}

// IndexOf is the suite's index function: an item's value's last character (the values are
// "v<op>.<n>", so the index moves as the value does).
func IndexOf(value string) string {
	if value == "" {
		return ""
	}
	return value[len(value)-1:]
}

// CheckOneHistory checks that every published state is a state etcd really had: atomic,
// one history. For each read of Kind other than "restored":
//
//   - an exact state (a saved snapshot labelled R) equals etcd's state of the prefix at
//     R, in one of the epochs the read may belong to (the current one when it was taken
//     or an earlier one: a cache may be behind a restore it has not noticed yet, never
//     ahead of it or a mix of two);
//   - a Snapshot() labelled R equals etcd's state at some revision S ≥ R of one such
//     epoch: a read may include changes after its label when the cache applied them
//     without knowing it was exact (it is then S's state whole), never a part of a
//     transaction or of a lease's expiry, never a state etcd did not have;
//   - its index (value → keys) holds exactly the keys whose values index there.
//
// A state etcd never had at or after its label is the torn transaction; a state mixing
// two epochs is a cache that trusted a restored etcd.
func CheckOneHistory(h *History, reads []Read) []Violation {
	var out []Violation
	for _, rd := range reads {
		if rd.Kind == "restored" {
			continue
		}
		if v, ok := checkIndex(rd); !ok {
			out = append(out, Violation{Validator: OneHistory, Message: v})
			continue
		}
		if matchAny(h, rd) {
			continue
		}
		out = append(out, explain(h, rd, OneHistory))
	}
	return out
}

// checkIndex compares a read's index with its objects.
func checkIndex(rd Read) (string, bool) {
	if rd.Index == nil {
		return "", true
	}
	want := make(map[string][]string)
	for k, v := range rd.State {
		want[IndexOf(v)] = append(want[IndexOf(v)], k)
	}
	for _, ks := range want {
		slices.Sort(ks)
	}
	for val, ks := range rd.Index {
		if len(ks) == 0 {
			delete(rd.Index, val)
		}
	}
	if maps.EqualFunc(want, rd.Index, slices.Equal) {
		return "", true
	}
	for val, ks := range want {
		if !slices.Equal(ks, rd.Index[val]) {
			return fmt.Sprintf("%s of %s labelled %d: index value %q holds %v, its objects put %v there", rd.Kind, rd.Who, rd.Label, val, rd.Index[val], ks), false
		}
	}
	for val, ks := range rd.Index {
		if _, ok := want[val]; !ok {
			return fmt.Sprintf("%s of %s labelled %d: index value %q holds %v, no object indexes there", rd.Kind, rd.Who, rd.Label, val, ks), false
		}
	}
	return "index differs", false
}

// epochsFor are the epochs a read taken after restores restores may show, newest first.
func epochsFor(h *History, restores int) []*Epoch {
	n := min(restores, len(h.Epochs)-1)
	var out []*Epoch
	for i := n; i >= 0; i-- {
		out = append(out, h.Epochs[i])
	}
	return out
}

func matchAny(h *History, rd Read) bool {
	for _, e := range epochsFor(h, rd.Restores) {
		if rd.Exact {
			if rd.Label >= e.Base && rd.Label <= e.End && maps.Equal(filtered(e.StateAt(rd.Label), rd.Filter), rd.State) {
				return true
			}
			continue
		}
		if matchFrom(e, rd.Label, rd.State, rd.Filter) {
			return true
		}
	}
	return false
}

// filtered keeps the keys of state whose values index under filter ("": all of them).
func filtered(state map[string]string, filter string) map[string]string {
	if filter == "" {
		return state
	}
	maps.DeleteFunc(state, func(_, v string) bool { return IndexOf(v) != filter })
	return state
}

// matchFrom reports whether state is e's state at some revision S ≥ from (its keys whose
// values index under filter, if filter is set).
func matchFrom(e *Epoch, from int64, state map[string]string, filter string) bool {
	lower, upper := max(from, e.Base), e.End
	for k, v := range state {
		at, next, ok := e.writtenAt(k, v)
		if !ok {
			return false
		}
		lower, upper = max(lower, at), min(upper, next-1)
	}
	if lower > upper {
		return false
	}
	if maps.Equal(filtered(e.StateAt(lower), filter), state) {
		return true
	}
	for _, rev := range e.Revs {
		if rev > lower && rev <= upper && maps.Equal(filtered(e.StateAt(rev), filter), state) {
			return true
		}
	}
	return false
}

// explain describes how a read differs from etcd's state at its label in the newest
// epoch it may belong to, with the history around it.
func explain(h *History, rd Read, validator string) Violation {
	e := epochsFor(h, rd.Restores)[0]
	at := min(max(rd.Label, e.Base), e.End)
	want := filtered(e.StateAt(at), rd.Filter)
	lo, hi := at, at
	var diffs []string
	for _, k := range unionKeys(rd.State, want) {
		got, gok := rd.State[k]
		exp, eok := want[k]
		if gok == eok && got == exp {
			continue
		}
		d := fmt.Sprintf("%s: read %s, etcd had %s", k, show(got, gok), show(exp, eok))
		if gok {
			if w, _, ok := e.writtenAt(k, got); ok {
				d += fmt.Sprintf(" (the read's value was written at revision %d)", w)
				lo, hi = min(lo, w), max(hi, w)
			} else if where := writtenBefore(h, e, k, got); where != "" {
				d += " (the read's value is " + where + ")"
			} else {
				d += " (the read's value is in no epoch's history)"
			}
		}
		diffs = append(diffs, d)
	}
	what := "matches no state etcd had at or after its label"
	if rd.Exact {
		what = "is not etcd's state at its label"
	}
	msg := fmt.Sprintf("%s of %s labelled revision %d (%d keys, taken %s, after %d restore(s)) %s; against revision %d: %s",
		rd.Kind, rd.Who, rd.Label, len(rd.State), rd.At.Format("15:04:05.000"), rd.Restores, what, at, strings.Join(diffs, "; "))
	return Violation{Validator: validator, Message: msg, Slice: e.Slice(lo-2, hi+2)}
}

// writtenBefore says where an epoch before e had k = value.
func writtenBefore(h *History, e *Epoch, k, value string) string {
	for i, old := range h.Epochs {
		if old == e {
			break
		}
		if at, _, ok := old.writtenAt(k, value); ok {
			return fmt.Sprintf("of epoch %d, written at revision %d, which a restore undid", i, at)
		}
	}
	return ""
}

func show(v string, ok bool) string {
	if !ok {
		return "absent"
	}
	return v
}

func unionKeys(a, b map[string]string) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Final returns etcd's state of the prefix at the end of the run.
func (h *History) Final() map[string]string {
	e := h.Epochs[len(h.Epochs)-1]
	return e.StateAt(e.End)
}

// FinalState is a participant's state once the run has quiesced.
type FinalState struct {
	// Who is the participant: informer, client or handler name.
	Who    string
	Filter string // a filtered client's filter value: it holds the keys whose values index there
	// State is the participant's final state: key → value.
	State map[string]string
}

// CheckConverged checks that, once the run has quiesced (traffic stopped, failures
// healed, every participant waited up to etcd's last revision), each participant's final
// state (a cache, a client's cache, the state a handler's notifications add up to)
// equals etcd's final state of the prefix (a filtered client's: the keys its filter
// selects): nothing kept that etcd no longer has, nothing missing, no stale value.
func CheckConverged(h *History, finals []FinalState) []Violation {
	var out []Violation
	for _, f := range finals {
		who, got, want := f.Who, f.State, filtered(h.Final(), f.Filter)
		if maps.Equal(got, want) {
			continue
		}
		var diffs []string
		for _, k := range unionKeys(got, want) {
			g, gok := got[k]
			w, wok := want[k]
			if gok != wok || g != w {
				diffs = append(diffs, fmt.Sprintf("%s: has %s, etcd has %s", k, show(g, gok), show(w, wok)))
			}
		}
		e := h.Epochs[len(h.Epochs)-1]
		out = append(out, Violation{Validator: Converged,
			Message: fmt.Sprintf("%s did not converge to etcd's final state at revision %d (%d keys): %d key(s) differ: %s",
				who, e.End, len(want), len(diffs), strings.Join(diffs, "; "))})
	}
	return out
}

// HandlerRun is what the handler validator needs of one handler: its notifications, its
// policy, and whether its informer listed only once (no relist, no restore, no warm
// start) during the run, so that every state must have reached it.
type HandlerRun struct {
	// Name is the handler's name.
	Name string
	// Policy is the handler's queue policy.
	Policy Policy
	// Notes are the handler's notifications, in order.
	Notes []Note
	// ListedOne is true when the handler's informer listed only once during the run.
	ListedOne bool
}

// absent stands for a deleted key in a key's sequence of states.
const absent = "\x00absent"

// CheckHandlers checks each handler's notifications, key by key:
//
//   - ordered: the states a key's notifications leave it in (a value, or absent after a
//     delete) follow etcd's history of that key: each is a state etcd gave the key after
//     the state before (a restored epoch's state of the key counts as after every state
//     of the epoch before it);
//   - unique: a notification never leaves a key in the state it was already in, except a
//     resync (OnUpdate with the same object), which may repeat it any number of times,
//     and an update after a relist (without Options.Revision every object of a relist is
//     an update, changed or not); a Coalesce handler may also be told of the delete of a
//     key whose add it never got;
//   - every state, for a Block handler of an informer that listed once: no state of the
//     key is skipped between the handler's first notification of it and its last.
//     A Coalesce handler may skip intermediate states (merged while its queue was full);
//     a relist may too, so the check is not made after one.
//
// Convergence of what the notifications add up to is CheckConverged's.
func CheckHandlers(h *History, handlers []HandlerRun) []Violation {
	var out []Violation
	for _, hr := range handlers {
		perKey := make(map[string][]Note)
		for _, n := range hr.Notes {
			perKey[n.Key] = append(perKey[n.Key], n)
		}
		for _, k := range slices.Sorted(maps.Keys(perKey)) {
			if v, ok := checkKeyNotes(h, hr, k, perKey[k]); !ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// keySequence is every state etcd gave k, in order, across epochs (a restored epoch
// starting with its restored state of k), with the revision of each.
func keySequence(h *History, k string) (states []string, revs []int64) {
	for i, e := range h.Epochs {
		if i > 0 || len(e.Initial) > 0 {
			v, ok := e.Initial[k]
			states, revs = append(states, show2(v, ok)), append(revs, e.Base)
		}
		for _, ver := range e.byKey[k] {
			if ver.rev == e.Base {
				continue
			}
			states, revs = append(states, show2(ver.value, !ver.deleted)), append(revs, ver.rev)
		}
	}
	return states, revs
}

func show2(v string, ok bool) string {
	if !ok {
		return absent
	}
	return v
}

func checkKeyNotes(h *History, hr HandlerRun, k string, notes []Note) (Violation, bool) {
	seq, revs := keySequence(h, k)
	fail := func(n Note, why string) (Violation, bool) {
		var lines []string
		for _, m := range notes {
			lines = append(lines, fmt.Sprintf("  #%d %s %s", m.Seq, m.Kind, m.Value))
		}
		var hist []string
		for i, s := range seq {
			hist = append(hist, fmt.Sprintf("%d:%s", revs[i], strings.Replace(s, absent, "absent", 1)))
		}
		return Violation{Validator: HandlerOrder,
			Message: fmt.Sprintf("handler %s (%s), key %s, notification #%d (%s %s): %s", hr.Name, hr.Policy, k, n.Seq, n.Kind, n.Value, why),
			Slice:   "the handler's notifications of the key:\n" + strings.Join(lines, "\n") + "\netcd's states of the key (revision:state): " + strings.Join(hist, " ")}, false
	}
	// The handler's first state may be one etcd gave the key more than once (in a history
	// a restore undid and again in the restored one): the handler passes if its
	// notifications follow etcd's states from any of them.
	v, ok, firstAt := walkKeyNotes(seq, revs, hr, notes, 0, fail)
	for !ok && firstAt >= 0 {
		var again bool
		if _, again, firstAt = walkKeyNotes(seq, revs, hr, notes, firstAt+1, fail); again {
			return Violation{}, true
		}
	}
	return v, ok
}

// walkKeyNotes checks a handler's notifications of a key against etcd's states of it
// (seq, at revs), its first state matched at position from or later; it returns where
// that first state matched (-1: nowhere).
func walkKeyNotes(seq []string, revs []int64, hr HandlerRun, notes []Note, from int, fail func(Note, string) (Violation, bool)) (v Violation, ok bool, firstAt int) {
	firstAt = -1
	cur := absent
	pos := -1 // the position in seq of the state the key is in for the handler
	first := true
	for _, n := range notes {
		if n.Kind == "resync" {
			continue
		}
		next := n.Value
		if n.Kind == "delete" {
			next = absent
		}
		if next == cur {
			if n.Kind == "delete" && first && hr.Policy == PolicyCoalesce {
				first = false
				continue
			}
			if n.Kind == "update" && !hr.ListedOne {
				continue // a relist's update of an unchanged object
			}
			v, ok = fail(n, "repeats the state the handler already had, and is not a resync")
			return v, ok, firstAt
		}
		// The earliest position after pos holding next: greedy matching is exact for
		// "is a subsequence".
		found, start := -1, pos+1
		if first {
			start = max(start, from)
		}
		for i := start; i < len(seq); i++ {
			if seq[i] == next {
				found = i
				break
			}
		}
		if found < 0 {
			v, ok = fail(n, "is not a state etcd gave the key after the one before it (out of order, or never etcd's)")
			return v, ok, firstAt
		}
		if first {
			firstAt = found
		}
		if hr.Policy == PolicyBlock && hr.ListedOne && !first && found != pos+1 {
			v, ok = fail(n, fmt.Sprintf("skips %d state(s) of the key (from revision %d), and a Block handler of an informer that never relisted must get every one", found-pos-1, revs[pos+1]))
			return v, ok, firstAt
		}
		pos, cur, first = found, next, false
	}
	return Violation{}, true, firstAt
}

// CheckReadYourWrites checks read-your-writes: a read made after WaitForRevision(R)
// returned, through the informer or through a fan-out tier, is labelled at least R.
func CheckReadYourWrites(waits []Wait) []Violation {
	var out []Violation
	for _, w := range waits {
		if w.Label < w.Rev {
			out = append(out, Violation{Validator: ReadYourWrite,
				Message: fmt.Sprintf("%s: WaitForRevision(%d) returned, then a read was labelled %d", w.Who, w.Rev, w.Label)})
		}
	}
	return out
}

// CheckWarmRestarts checks that a warm restart never restores a state etcd did not have:
// each state a restarted informer restored (Kind "restored", labelled R) equals etcd's
// state at R in the epoch etcd was in when the informer restarted, or in an earlier one
// whose history up to R that epoch shares (a restore keeps the history up to its backup).
func CheckWarmRestarts(h *History, reads []Read) []Violation {
	var out []Violation
	for _, rd := range reads {
		if rd.Kind != "restored" {
			continue
		}
		n := min(rd.Restores, len(h.Epochs)-1)
		ok := false
		for i := n; i >= 0 && !ok; i-- {
			e := h.Epochs[i]
			if i < n && rd.Label > h.Epochs[i+1].Shared {
				break // the newer epoch does not share this revision with this one
			}
			ok = rd.Label >= e.Base && rd.Label <= e.End && maps.Equal(e.StateAt(rd.Label), rd.State)
		}
		if !ok {
			out = append(out, explain(h, rd, WarmRestart))
		}
	}
	return out
}

// CheckSnapshotFiles checks that an informer's snapshot file always holds a whole
// snapshot it saved, whatever happened to the process or its disk. Whenever the file is
// read outside a save (at a warm start, after a save failed), it holds the newest
// snapshot saved whole before, or, at a warm start after a kill -9, the one whose save
// the kill interrupted (its rename may have been done): never a torn file, never no file
// once a snapshot was saved, never an older snapshot, and after a failed save (a full
// disk) still the previous one. A file of another configuration, or a load cut short,
// is the warm start's business (CheckWarmRestarts, CheckErrorsNamed). Events are each
// informer's steps in the order they happened, across its restarts.
func CheckSnapshotFiles(events []FileEvent) []Violation {
	type file struct{ saved, saving int64 } // the newest whole save, the save in progress
	files := map[string]*file{}
	var out []Violation
	for _, ev := range events {
		f := files[ev.Who]
		if f == nil {
			f = &file{}
			files[ev.Who] = f
		}
		switch ev.Kind {
		case "save":
			f.saving = ev.Label
		case "saved":
			f.saved, f.saving = ev.Label, 0
		case "failed":
			f.saving = 0
		case "loaded":
			var what string
			switch {
			case ev.Found == "corrupt":
				what = "is torn or damaged: " + ev.Err
			case ev.Found == "none" && f.saved != 0:
				what = "is gone"
			case ev.Found == "whole" && ev.Label != f.saved && (ev.Label != f.saving || f.saving == 0):
				what = fmt.Sprint("holds revision ", ev.Label)
			default:
				continue
			}
			msg := fmt.Sprintf("%s: at a %s, its snapshot file %s; the newest snapshot saved whole was revision %d", ev.Who, ev.After, what, f.saved)
			if f.saving != 0 {
				msg += fmt.Sprintf(", and a save of revision %d was in progress", f.saving)
			}
			out = append(out, Violation{Validator: SnapshotWhole, Message: msg})
		}
	}
	return out
}

// CheckFencedOrder checks that no leader-only write is accepted out of term order: in
// etcd's revision order, the terms (each leadership's election revision) of the
// controller's accepted writes never go back: once a newer leader has written, no write
// of an older one is accepted. Each epoch (history between restores) is checked on its
// own: a restore brings back the backup's election keys, and with them its terms.
func CheckFencedOrder(writes []FencedWrite) []Violation {
	ws := slices.Clone(writes)
	slices.SortFunc(ws, func(a, b FencedWrite) int {
		if a.Epoch != b.Epoch {
			return a.Epoch - b.Epoch
		}
		return int(a.Rev - b.Rev)
	})
	var out []Violation
	for i := 1; i < len(ws); i++ {
		if ws[i].Epoch == ws[i-1].Epoch && ws[i].Term < ws[i-1].Term {
			out = append(out, Violation{Validator: FencedOrder,
				Message: fmt.Sprintf("write of %s at revision %d by the leader of term %d was accepted after the write of %s at revision %d by the leader of term %d",
					ws[i].Key, ws[i].Rev, ws[i].Term, ws[i-1].Key, ws[i-1].Rev, ws[i-1].Term)})
		}
	}
	return out
}

// CheckTakeover checks that the leader-only controller goes on when its leader dies:
// after each kill -9 of the leader, another replica has a write accepted in a newer term
// within limit (the election's TTL and a campaign, with room for a loaded machine).
func CheckTakeover(kills []ControllerKill, writes []FencedWrite, limit time.Duration) []Violation {
	var out []Violation
	for _, k := range kills {
		ok := false
		for _, w := range writes {
			if w.Key != k.Key && w.Term > k.Term && !w.At.Before(k.At) && w.At.Sub(k.At) <= limit {
				ok = true
				break
			}
		}
		if !ok {
			out = append(out, Violation{Validator: Takeover,
				Message: fmt.Sprintf("the leader writing %s in term %d was killed at %s and no other replica had a write accepted in a newer term within %v",
					k.Key, k.Term, k.At.Format("15:04:05.000"), limit)})
		}
	}
	return out
}

// CheckErrorsNamed checks that every error an informer reported names that informer
// (`informer "name"`), so that an operator reading it knows which cache it is about.
func CheckErrorsNamed(errs []ReportedError) []Violation {
	var out []Violation
	for _, e := range errs {
		if !strings.Contains(e.Text, fmt.Sprintf("informer %q", e.Informer)) {
			out = append(out, Violation{Validator: ErrorsNamed,
				Message: fmt.Sprintf("an error of informer %q does not name it: %s", e.Informer, e.Text)})
		}
	}
	return out
}

// CheckHeap checks that the process's live heap stayed under limit bytes at every sample.
func CheckHeap(samples []uint64, limit uint64) []Violation {
	for i, s := range samples {
		if s > limit {
			return []Violation{{Validator: HeapBounded,
				Message: fmt.Sprintf("live heap %d MiB at sample %d of %d, over the bound of %d MiB", s>>20, i, len(samples), limit>>20)}}
		}
	}
	return nil
}

// minTrendSamples is the fewest samples CheckHeapTrend judges: fewer say nothing of a trend.
const minTrendSamples = 6

// CheckHeapTrend checks that the process's live heap does not keep growing across a long
// run: samples are the heap after a garbage collection, one after each run, in order;
// over the second half of them, the growth the least-squares trend gives (its slope times
// the runs it spans) stays under maxGrowth bytes. CheckHeap finds a heap over a cap; this
// finds one that leaks a little per run, long before it reaches a cap. Fewer than
// minTrendSamples samples pass.
func CheckHeapTrend(samples []uint64, maxGrowth uint64) []Violation {
	if len(samples) < minTrendSamples {
		return nil
	}
	half := samples[len(samples)/2:]
	n := float64(len(half))
	var mx, my float64
	for i, s := range half {
		mx += float64(i)
		my += float64(s)
	}
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i, s := range half {
		dx := float64(i) - mx
		sxy += dx * (float64(s) - my)
		sxx += dx * dx
	}
	slope := sxy / sxx // bytes per run
	if growth := slope * (n - 1); growth > float64(maxGrowth) {
		return []Violation{{Validator: HeapTrend,
			Message: fmt.Sprintf("the live heap after GC grew by %.0f MiB over the last %d runs (%.1f MiB per run; %d MiB, then %d MiB), over the bound of %d MiB",
				growth/(1<<20), len(half), slope/(1<<20), half[0]>>20, half[len(half)-1]>>20, maxGrowth>>20)}}
	}
	return nil
}
