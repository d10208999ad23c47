package robustness

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// twoTxns is a hand-made history: a put at 2, a write outside the prefix at 3, a
// transaction over a and b at 4, a delete of a at 5.
func twoTxns() *History {
	e := NewEpoch(1, map[string]string{})
	e.Add(2, Change{Key: "a", Value: "v1.0"})
	e.Add(4, Change{Key: "a", Value: "v2.0"}, Change{Key: "b", Value: "v2.1"})
	e.Add(5, Change{Key: "a", Deleted: true})
	e.End = 6
	return &History{Epochs: []*Epoch{e}}
}

func expectOne(t *testing.T, vs []Violation, validator, want string) {
	t.Helper()
	if len(vs) != 1 {
		t.Fatalf("got %d violations, want 1 of %s: %v", len(vs), validator, vs)
	}
	if vs[0].Validator != validator || !strings.Contains(vs[0].Message, want) {
		t.Fatalf("got %s: %q, want %s containing %q", vs[0].Validator, vs[0].Message, validator, want)
	}
}

func TestOneHistoryAcceptsEveryStateEtcdHad(t *testing.T) {
	h := twoTxns()
	reads := []Read{
		{Who: "i", Label: 2, State: map[string]string{"a": "v1.0"}, Kind: "snapshot"},
		{Who: "i", Label: 3, State: map[string]string{"a": "v1.0"}, Exact: true, Kind: "saved"},
		// A read may hold changes after its label, a whole transaction's.
		{Who: "i", Label: 3, State: map[string]string{"a": "v2.0", "b": "v2.1"}, Kind: "snapshot",
			Index: map[string][]string{"0": {"a"}, "1": {"b"}}},
		{Who: "i", Label: 6, State: map[string]string{"b": "v2.1"}, Exact: true, Kind: "saved"},
	}
	if vs := CheckOneHistory(h, reads); len(vs) != 0 {
		t.Fatal(vs)
	}
}

func TestOneHistoryFindsHalfATransaction(t *testing.T) {
	h := twoTxns()
	// Labelled 3, exactly: it holds a of the transaction at 4 but not b.
	vs := CheckOneHistory(h, []Read{{Who: "i", Label: 3, State: map[string]string{"a": "v2.0"}, Exact: true, Kind: "saved"}})
	expectOne(t, vs, OneHistory, "saved of i labelled revision 3 (1 keys")
	if !strings.Contains(vs[0].Message, "a: read v2.0, etcd had v1.0 (the read's value was written at revision 4)") ||
		!strings.Contains(vs[0].Slice, "rev 4: put a=v2.0 put b=v2.1") {
		t.Fatalf("the report does not show the transaction: %v", vs[0])
	}
	// The same as a Snapshot(): no revision ≥ 3 had it either.
	vs = CheckOneHistory(h, []Read{{Who: "i", Label: 3, State: map[string]string{"a": "v2.0"}, Kind: "snapshot"}})
	expectOne(t, vs, OneHistory, "matches no state etcd had at or after its label")
}

func TestOneHistoryFindsAStateOlderThanItsLabel(t *testing.T) {
	vs := CheckOneHistory(twoTxns(), []Read{{Who: "i", Label: 5, State: map[string]string{"a": "v2.0", "b": "v2.1"}, Kind: "snapshot"}})
	expectOne(t, vs, OneHistory, "labelled revision 5")
}

func TestOneHistoryFiltersAFilteredClientsState(t *testing.T) {
	h := twoTxns()
	good := Read{Who: "c", Label: 4, State: map[string]string{"b": "v2.1"}, Filter: "1", Kind: "snapshot"}
	bad := Read{Who: "c", Label: 4, State: map[string]string{"a": "v2.0"}, Filter: "1", Kind: "snapshot"}
	expectOne(t, CheckOneHistory(h, []Read{good, bad}), OneHistory, "a: read v2.0, etcd had absent")
}

func TestOneHistoryFindsAWrongIndex(t *testing.T) {
	vs := CheckOneHistory(twoTxns(), []Read{{Who: "i", Label: 2, State: map[string]string{"a": "v1.0"},
		Index: map[string][]string{"0": {"a"}, "1": {"a"}}, Kind: "snapshot"}})
	expectOne(t, vs, OneHistory, `index value "1" holds [a], no object indexes there`)
}

// restored is twoTxns restored at 6 from a backup at 2 (a = v1.0), then b put at 3.
func restored() *History {
	h := twoTxns()
	e := NewEpoch(2, map[string]string{"a": "v1.0"})
	e.Shared = 2
	e.Add(3, Change{Key: "b", Value: "v9.0"})
	e.End = 7
	h.Epochs = append(h.Epochs, e)
	return h
}

func TestOneHistoryFindsACacheThatTrustedARestore(t *testing.T) {
	h := restored()
	// Behind the restore, not yet noticed: a state the old history had, allowed.
	ok := Read{Who: "i", Label: 6, State: map[string]string{"b": "v2.1"}, Restores: 1, Kind: "snapshot"}
	// The old history's b kept, the new history's changes applied over it: a mix.
	bad := Read{Who: "i", Label: 7, State: map[string]string{"a": "v1.0", "b": "v2.1"}, Restores: 1, Kind: "snapshot"}
	vs := CheckOneHistory(h, []Read{ok, bad})
	expectOne(t, vs, OneHistory, "b: read v2.1, etcd had v9.0 (the read's value is of epoch 0, written at revision 4, which a restore undid)")
	// Before the restore began, only the first epoch counts.
	vs = CheckOneHistory(h, []Read{{Who: "i", Label: 3, State: map[string]string{"a": "v1.0", "b": "v9.0"}, Kind: "snapshot"}})
	expectOne(t, vs, OneHistory, "b: read v9.0")
}

func TestConvergedFindsKeysEtcdNoLongerHas(t *testing.T) {
	h := restored()
	vs := CheckConverged(h, []FinalState{
		{Who: "good", State: map[string]string{"a": "v1.0", "b": "v9.0"}},
		{Who: "filtered", Filter: "1", State: map[string]string{}}, // no value of the final state ends in 1
		{Who: "bad", State: map[string]string{"a": "v1.0", "b": "v9.0", "lost": "v2.2"}},
	})
	expectOne(t, vs, Converged, "bad did not converge to etcd's final state at revision 7 (2 keys): 1 key(s) differ: lost: has v2.2, etcd has absent")
}

func notes(handler string, ns ...Note) []Note {
	for i := range ns {
		ns[i].Handler, ns[i].Seq, ns[i].Key = handler, i, "a"
	}
	return ns
}

func TestHandlersAcceptOrderedUniqueNotifications(t *testing.T) {
	h := twoTxns()
	runs := []HandlerRun{
		{Name: "block", Policy: PolicyBlock, ListedOne: true, Notes: notes("block",
			Note{Kind: "add", Value: "v1.0", Initial: true}, Note{Kind: "resync", Value: "v1.0"}, Note{Kind: "resync", Value: "v1.0"},
			Note{Kind: "update", Value: "v2.0"}, Note{Kind: "delete", Value: "v2.0"})},
		// A Coalesce handler may skip intermediate states.
		{Name: "coalesce", Policy: PolicyCoalesce, Notes: notes("coalesce",
			Note{Kind: "add", Value: "v1.0"}, Note{Kind: "delete", Value: "v2.0"})},
		// After a relist, so may a Block handler; and the relist's update of an unchanged
		// object repeats its state.
		{Name: "relisted", Policy: PolicyBlock, Notes: notes("relisted",
			Note{Kind: "add", Value: "v1.0"}, Note{Kind: "update", Value: "v1.0"}, Note{Kind: "delete", Value: "v1.0", Unknown: true})},
	}
	if vs := CheckHandlers(h, runs); len(vs) != 0 {
		t.Fatal(vs)
	}
}

func TestHandlersFindOutOfOrderRepeatedAndSkipped(t *testing.T) {
	h := twoTxns()
	for _, tc := range []struct {
		name string
		run  HandlerRun
		want string
	}{
		{"out of order", HandlerRun{Name: "c", Policy: PolicyCoalesce, Notes: notes("c",
			Note{Kind: "add", Value: "v2.0"}, Note{Kind: "update", Value: "v1.0"})},
			"notification #1 (update v1.0): is not a state etcd gave the key after the one before it"},
		{"repeated", HandlerRun{Name: "c", Policy: PolicyCoalesce, ListedOne: true, Notes: notes("c",
			Note{Kind: "add", Value: "v1.0"}, Note{Kind: "update", Value: "v1.0"})},
			"notification #1 (update v1.0): repeats the state the handler already had, and is not a resync"},
		{"never etcd's", HandlerRun{Name: "c", Policy: PolicyCoalesce, Notes: notes("c",
			Note{Kind: "add", Value: "v7.0"})},
			"is not a state etcd gave the key"},
		{"skipped by Block", HandlerRun{Name: "b", Policy: PolicyBlock, ListedOne: true, Notes: notes("b",
			Note{Kind: "add", Value: "v1.0"}, Note{Kind: "delete", Value: "v2.0"})},
			"skips 1 state(s) of the key (from revision 4)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectOne(t, CheckHandlers(h, []HandlerRun{tc.run}), HandlerOrder, tc.want)
		})
	}
}

func TestHandlersAcceptARestoredStateAfterTheOldHistory(t *testing.T) {
	h := restored()
	run := HandlerRun{Name: "c", Policy: PolicyCoalesce, Notes: notes("c",
		Note{Kind: "add", Value: "v2.0"}, Note{Kind: "update", Value: "v1.0"})} // back to the backup's a
	if vs := CheckHandlers(h, []HandlerRun{run}); len(vs) != 0 {
		t.Fatal(vs)
	}
}

func TestReadYourWritesFindsAnOlderRead(t *testing.T) {
	vs := CheckReadYourWrites([]Wait{{Who: "i", Rev: 5, Label: 5}, {Who: "i", Rev: 7, Label: 6}})
	expectOne(t, vs, ReadYourWrite, "i: WaitForRevision(7) returned, then a read was labelled 6")
}

func TestWarmRestartFindsAStateOfAnotherHistory(t *testing.T) {
	h := restored()
	good := Read{Who: "i", Label: 2, State: map[string]string{"a": "v1.0"}, Restores: 1, Exact: true, Kind: "restored"}
	// Saved at 4 before the restore; after it, revision 4 is another state.
	bad := Read{Who: "i", Label: 4, State: map[string]string{"a": "v2.0", "b": "v2.1"}, Restores: 1, Exact: true, Kind: "restored"}
	expectOne(t, CheckWarmRestarts(h, []Read{good, bad}), WarmRestart, "restored of i labelled revision 4")
}

func TestFencedOrderFindsAnOldLeadersWrite(t *testing.T) {
	vs := CheckFencedOrder([]FencedWrite{{Term: 10, Rev: 11, Key: "x"}, {Term: 20, Rev: 21, Key: "y"}, {Term: 10, Rev: 25, Key: "z"},
		{Term: 5, Rev: 8, Key: "after a restore", Epoch: 1}})
	expectOne(t, vs, FencedOrder, "write of z at revision 25 by the leader of term 10 was accepted after the write of y at revision 21 by the leader of term 20")
}

func TestErrorsNamedFindsAnAnonymousError(t *testing.T) {
	vs := CheckErrorsNamed([]ReportedError{{Informer: "p", Text: `informer "p": watch: etcd unavailable`}, {Informer: "p", Text: "watch: etcd unavailable"}})
	expectOne(t, vs, ErrorsNamed, `an error of informer "p" does not name it`)
}

func TestHeapFindsAGrowingHeap(t *testing.T) {
	expectOne(t, CheckHeap([]uint64{10 << 20, 900 << 20}, 512<<20), HeapBounded, "live heap 900 MiB at sample 1 of 2")
}

func TestHeapTrendFindsAHeapThatKeepsGrowing(t *testing.T) {
	var flat, leaking []uint64
	for i := range 20 {
		noise := uint64(i%3) * 8 << 20 // GC and pools: up and down, no trend
		flat = append(flat, 100<<20+noise)
		leaking = append(leaking, 100<<20+noise+uint64(i)*6<<20) // 6 MiB more after each run
	}
	flat[15] += 200 << 20 // one run's peak is not a trend
	if vs := CheckHeapTrend(flat, 64<<20); len(vs) > 0 {
		t.Fatalf("a flat heap with one peak: %v", vs)
	}
	if vs := CheckHeapTrend(leaking[:5], 1); len(vs) > 0 {
		t.Fatalf("five runs judged: %v", vs)
	}
	expectOne(t, CheckHeapTrend(leaking, 32<<20), HeapTrend, "the live heap after GC grew by 51 MiB over the last 10 runs (5.7 MiB per run")
}

func TestTakeoverFindsALeaderNotReplaced(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	writes := []FencedWrite{
		{Term: 10, Rev: 11, Key: "/c/0", At: at},
		{Term: 20, Rev: 30, Key: "/c/1", At: at.Add(3 * time.Second)}, // took over from the first kill
		{Term: 20, Rev: 31, Key: "/c/1", At: at.Add(50 * time.Second)},
		{Term: 25, Rev: 40, Key: "/c/1", At: at.Add(70 * time.Second)}, // the killed one's own new term: no takeover
	}
	kills := []ControllerKill{{Key: "/c/0", Term: 10, At: at.Add(time.Second)}, {Key: "/c/1", Term: 20, At: at.Add(60 * time.Second)}}
	expectOne(t, CheckTakeover(kills, writes, 30*time.Second), Takeover, "the leader writing /c/1 in term 20 was killed at 12:01:00.000 and no other replica")
}

// A Block handler started after a restore begins at a state the undone history had too:
// its notifications follow the restored history from there, and only a real skip fails.
func TestHandlersStartInTheRestoredHistory(t *testing.T) {
	h := twoTxns() // a: v1.0 at 2, v2.0 at 4, gone at 5
	e := NewEpoch(2, map[string]string{"a": "v1.0"})
	e.Shared = 2
	e.Add(3, Change{Key: "a", Value: "v2.5"})
	e.Add(4, Change{Key: "a", Value: "v3.0"})
	e.End = 5
	h.Epochs = append(h.Epochs, e)
	follows := HandlerRun{Name: "b#2", Policy: PolicyBlock, ListedOne: true, Notes: notes("b#2",
		Note{Kind: "add", Value: "v1.0"}, Note{Kind: "update", Value: "v2.5"}, Note{Kind: "update", Value: "v3.0"})}
	if vs := CheckHandlers(h, []HandlerRun{follows}); len(vs) != 0 {
		t.Fatal(vs)
	}
	skips := HandlerRun{Name: "b#2", Policy: PolicyBlock, ListedOne: true, Notes: notes("b#2",
		Note{Kind: "add", Value: "v1.0"}, Note{Kind: "update", Value: "v3.0"})}
	expectOne(t, CheckHandlers(h, []HandlerRun{skips}), HandlerOrder, "skips")
}

// fileLife is an informer's snapshot file through a first start, saves, a kill -9 after
// a rename, a failed save and a kill -9 mid-write: every load finds a whole snapshot it
// may hold.
func fileLife() []FileEvent {
	return []FileEvent{
		{Who: "p", Kind: "loaded", After: "warm start", Found: "none"},
		{Who: "p", Kind: "save", Label: 5},
		{Who: "p", Kind: "saved", Label: 5},
		{Who: "p", Kind: "save", Label: 7}, // killed after its rename
		{Who: "p", Kind: "loaded", After: "warm start", Found: "whole", Label: 7},
		{Who: "p", Kind: "save", Label: 9},
		{Who: "p", Kind: "saved", Label: 9},
		{Who: "p", Kind: "save", Label: 11},
		{Who: "p", Kind: "failed", Label: 11},
		{Who: "p", Kind: "loaded", After: "failed save", Found: "whole", Label: 9},
		{Who: "p", Kind: "save", Label: 12}, // killed mid-write
		{Who: "p", Kind: "loaded", After: "warm start", Found: "whole", Label: 9},
		{Who: "p", Kind: "loaded", After: "warm start", Found: "refused", Err: "another configuration"},
	}
}

func TestSnapshotFilesAcceptWholeSnapshots(t *testing.T) {
	if vs := CheckSnapshotFiles(fileLife()); len(vs) != 0 {
		t.Fatal(vs)
	}
}

func TestSnapshotFilesFindTornLostAndStaleFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		last FileEvent
		want string
	}{
		{"a torn file at a warm start (a save written in place, killed mid-write)",
			FileEvent{Kind: "loaded", After: "warm start", Found: "corrupt", Err: "snapshot corrupt: checksum mismatch"},
			"p: at a warm start, its snapshot file is torn or damaged: snapshot corrupt: checksum mismatch; the newest snapshot saved whole was revision 9"},
		{"no file once one was saved",
			FileEvent{Kind: "loaded", After: "warm start", Found: "none"}, "its snapshot file is gone"},
		{"an older snapshot than the newest saved",
			FileEvent{Kind: "loaded", After: "warm start", Found: "whole", Label: 5}, "holds revision 5; the newest snapshot saved whole was revision 9"},
		{"a failed save that replaced the file",
			FileEvent{Kind: "loaded", After: "failed save", Found: "whole", Label: 13}, "at a failed save, its snapshot file holds revision 13"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := fileLife()
			if tc.last.After == "failed save" {
				events = append(events, FileEvent{Who: "p", Kind: "save", Label: 13}, FileEvent{Who: "p", Kind: "failed", Label: 13})
			}
			tc.last.Who = "p"
			expectOne(t, CheckSnapshotFiles(append(events, tc.last)), SnapshotWhole, tc.want)
		})
	}
}

// The faulty disk's writer passes the bytes before its fault through unchanged, fails
// with ENOSPC where the disk is full, and stalls where it stalls, after the bytes before.
func TestFaultyWriter(t *testing.T) {
	data := make([]byte, 300)
	for i := range data {
		data[i] = byte(i)
	}
	var buf bytes.Buffer
	full := &faultyWriter{w: &buf, stallAt: -1, failAt: 100}
	if n, err := full.Write(data); n != 100 || !errors.Is(err, syscall.ENOSPC) || !bytes.Equal(buf.Bytes(), data[:100]) {
		t.Fatalf("full at 100: wrote %d (%d bytes passed), %v", n, buf.Len(), err)
	}
	buf.Reset()
	stalledAt := -1
	slow := &faultyWriter{w: &buf, slow: true, stallAt: 170, failAt: -1, stalled: func() { stalledAt = buf.Len() }}
	if n, err := slow.Write(data); n != 300 || err != nil || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("slow: wrote %d, %v", n, err)
	}
	if stalledAt != 170 {
		t.Fatalf("stalled after %d bytes, want 170", stalledAt)
	}
}
