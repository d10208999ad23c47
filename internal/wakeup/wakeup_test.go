package wakeup

import (
	"fmt"
	"slices"
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

type watch struct {
	name string
	wake Waiter
}

func (w *watch) Waiter() *Waiter { return &w.wake }

func newWatches(names ...string) []*watch {
	ws := make([]*watch, len(names))
	for i, n := range names {
		ws[i] = &watch{name: n, wake: NewWaiter()}
	}
	return ws
}

// woken reports which watches have a signal waiting, and takes it.
func woken(ws []*watch) []string {
	var got []string
	for _, w := range ws {
		select {
		case <-w.wake.C():
			got = append(got, w.name)
		default:
		}
	}
	return got
}

func names(l *List[*watch]) []string {
	var got []string
	for _, w := range l.ws {
		got = append(got, w.name)
	}
	slices.Sort(got)
	return got
}

// A watch is on a list once however often it is added; Remove takes off only the watch
// named, and a watch not on the list is left alone.
func TestListAddRemove(t *testing.T) {
	ws := newWatches("a", "b", "c")
	var l List[*watch]
	for _, w := range ws {
		l.Add(w)
		l.Add(w)
	}
	if got := names(&l); !slices.Equal(got, []string{"a", "b", "c"}) || l.Len() != 3 {
		t.Fatalf("after adding twice: %q (Len %d), want a, b, c", got, l.Len())
	}
	l.Remove(ws[0])
	l.Remove(ws[0])
	if got := names(&l); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("after removing a: %q, want b, c", got)
	}
	l.Add(ws[0])
	if got := names(&l); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after adding a again: %q, want a, b, c", got)
	}
	if got := woken(ws); got != nil {
		t.Fatalf("Add and Remove signalled %q", got)
	}
}

// WakeAll signals every watch on the list, once however many times it is called, and
// empties the list; a watch woken can be added again.
func TestListWakeAll(t *testing.T) {
	ws := newWatches("a", "b", "c")
	var l List[*watch]
	l.Add(ws[0])
	l.Add(ws[2])
	l.WakeAll()
	l.WakeAll()
	if got := woken(ws); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("woken %q, want a, c", got)
	}
	if l.Len() != 0 {
		t.Fatalf("Len %d after WakeAll, want 0", l.Len())
	}
	l.Add(ws[0])
	if got := names(&l); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after adding a woken watch: %q, want a", got)
	}
}

// WakeIf wakes and takes off the watches it is told to, and keeps the others waiting.
func TestListWakeIf(t *testing.T) {
	ws := newWatches("a", "b", "c", "d")
	var l List[*watch]
	for _, w := range ws {
		l.Add(w)
	}
	l.WakeIf(func(w *watch) bool { return w.name == "b" || w.name == "d" })
	if got := woken(ws); !slices.Equal(got, []string{"b", "d"}) {
		t.Fatalf("woken %q, want b, d", got)
	}
	if got := names(&l); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("left waiting %q, want a, c", got)
	}
	l.Remove(ws[1]) // woken: no longer on the list
	if got := names(&l); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("after removing a woken watch: %q, want a, c", got)
	}
}

// Signal never blocks: signals sent while nobody waits collapse into one.
func TestSignalCollapses(t *testing.T) {
	w := NewWaiter()
	for range 3 {
		w.Signal()
	}
	<-w.C()
	select {
	case <-w.C():
		t.Fatal("a second signal was kept")
	default:
	}
}

// BenchmarkWakeAll measures a change waking n blocked watches, each of which then waits
// again: the List against the same loop written out for one watch type, as the sources
// had it.
func BenchmarkWakeAll(b *testing.B) {
	for _, n := range []int{1, 64} {
		ws := make([]*watch, n)
		for i := range ws {
			ws[i] = &watch{wake: NewWaiter()}
		}
		b.Run(fmt.Sprintf("list/n=%d", n), func(b *testing.B) {
			var l List[*watch]
			b.ReportAllocs()
			for b.Loop() {
				for _, w := range ws {
					l.Add(w)
				}
				l.WakeAll()
				for _, w := range ws {
					<-w.wake.c
				}
			}
		})
		b.Run(fmt.Sprintf("inline/n=%d", n), func(b *testing.B) {
			var l []*watch
			b.ReportAllocs()
			for b.Loop() {
				for _, w := range ws {
					if !w.wake.waiting {
						w.wake.waiting = true
						l = append(l, w)
					}
				}
				for _, w := range l {
					w.wake.waiting = false
					select {
					case w.wake.c <- struct{}{}:
					default:
					}
				}
				clear(l)
				l = l[:0]
				for _, w := range ws {
					<-w.wake.c
				}
			}
		})
	}
}
