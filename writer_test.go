package informer

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// After the source is found on another history (a restore from a backup), the cache's
// revision is of the history left: a revision of the new one that compares below it is
// not reached by the old state. WaitForRevision waits for the relist, and a read after it
// returns sees the new history's state (read-your-writes), however long the relist takes.
// The informer learns of the other history from a watch's ErrOtherHistory, or from a list
// older than the revision the cache reached.
func TestInformer_WaitForRevisionWaitsOutAnotherHistory(t *testing.T) {
	for _, sc := range []struct {
		name  string
		err   error // how the watch at the old history's revision ends
		block int   // the list that takes long: the first of the new history
	}{
		{"a watch ends with ErrOtherHistory", fmt.Errorf("%w: the source went back to revision 15", ErrOtherHistory), 2},
		{"a list is older than the cache", fmt.Errorf("%w: the watch expired", ErrExpired), 3},
	} {
		t.Run(sc.name, func(t *testing.T) {
			var lists counter
			var relist ListOptions
			relisting, release, fail := make(chan struct{}), make(chan struct{}), make(chan struct{})
			lw := orderedLW{ListerWatcherFuncs: ListerWatcherFuncs[*string]{
				ListFunc: func(ctx context.Context, opts ListOptions) (List[*string], error) {
					n := lists.next()
					if n == 1 {
						return List[*string]{Items: []*string{ptr("a=1")}, Revision: "10"}, nil
					}
					if n == 2 {
						relist = opts // read after relisting is closed
					}
					if n == sc.block {
						close(relisting)
						select {
						case <-release:
						case <-ctx.Done():
							return List[*string]{}, ctx.Err()
						}
					}
					return List[*string]{Items: []*string{ptr("a=restored")}, Revision: "15"}, nil
				},
				WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[*string], error) {
					if opts.Revision != "10" {
						return newIdleWatch(ctx), nil
					}
					return &sliceWatch{events: []Event[*string]{{Type: Modified, Object: ptr("a=2"), Revision: "20"}},
						then: &failingWatch{ctx: ctx, fail: fail, err: sc.err}}, nil
				},
			}}
			inf, _, _ := runBadSource(t, lw)
			if err := inf.WaitForRevision(context.Background(), "20"); err != nil {
				t.Fatal(err)
			}
			close(fail) // the source is found on another history
			<-relisting
			if errors.Is(sc.err, ErrOtherHistory) && (!relist.Consistent || relist.Revision != "") {
				// The history left's revision means nothing to the source now.
				t.Errorf("the list after another history was asked %+v, want a consistent one", relist)
			}
			got := make(chan string, 1)
			go func() {
				if err := inf.WaitForRevision(context.Background(), "15"); err != nil {
					got <- err.Error()
					return
				}
				o, _ := inf.Get("a")
				got <- *o
			}()
			close(release)
			if v := <-got; v != "a=restored" {
				t.Fatalf("after WaitForRevision(15) returned, the cache holds %q, want the new history's a=restored", v)
			}
			if rev := inf.Snapshot().Revision(); rev != "15" {
				t.Fatalf("snapshot revision %q, want 15", rev)
			}
		})
	}
}

// failingWatch delivers nothing and ends with err once fail is closed.
type failingWatch struct {
	ctx  context.Context
	fail <-chan struct{}
	err  error
}

func (w *failingWatch) Next() (Event[*string], error) {
	select {
	case <-w.fail:
		return Event[*string]{}, w.err
	case <-w.ctx.Done():
		return Event[*string]{}, w.ctx.Err()
	}
}

func (w *failingWatch) Stop() {}

// Suspend keeps every revision unreached until the list's batch is in; a batch of the
// history left does not resume the waits.
func TestWatermarks_SuspendUntilAList(t *testing.T) {
	m := &watermarks{cmp: orderedLW{}}
	m.Advance("10", true)
	m.Suspend()
	m.Advance("20", true) // a straggler of the history left
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Wait(ctx, "5", "w"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(5) while suspended: %v, want it to wait", err)
	}
	m.MoveBack("8", func() bool { return false }) // not a list
	if err := m.Wait(ctx, "5", "w"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(5) after a batch without a list: %v, want it to wait", err)
	}
	m.MoveBack("12", func() bool { return true })
	if err := m.Wait(context.Background(), "12", "w"); err != nil {
		t.Fatalf("Wait(12) after the list at 12: %v", err)
	}
	if err := m.Wait(ctx, "13", "w"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(13) on a cache at 12: %v, want it to wait", err)
	}
}
