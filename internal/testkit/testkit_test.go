package testkit

import (
	"net"
	"runtime"
	"slices"
	"strconv"
	"testing"
)

// StableAddr never returns an address twice, and each is free: a server can listen there.
func TestStableAddr(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		addr := StableAddr(t)
		if seen[addr] {
			t.Fatalf("StableAddr returned %s twice", addr)
		}
		seen[addr] = true
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		ln.Close()
		if _, port, _ := net.SplitHostPort(addr); mustAtoi(t, port) >= ephemeralLow() {
			t.Fatalf("port %s is in the ephemeral range (from %d)", port, ephemeralLow())
		}
	}
}

// FindLeaks finds a goroutine left running, and nothing once it ended.
func TestFindLeaks(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); <-stop }()
	if err := findLeaks(0); err == nil {
		t.Fatal("findLeaks found nothing while a goroutine runs")
	}
	close(stop)
	<-done
	if err := FindLeaks(); err != nil {
		t.Fatalf("FindLeaks after the goroutine ended: %v", err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// W1 is the same for the same arguments, keeps its mix of changes, and never changes or
// deletes an id that is not live.
func TestW1(t *testing.T) {
	type o struct{ id, rev int }
	mk := func(id, rev int) o { return o{id, rev} }
	objs, ops := W1(1000, 20000, mk)
	_, again := W1(1000, 20000, mk)
	if len(objs) != 1000 || len(ops) != 20000 || !slices.Equal(ops, again) {
		t.Fatalf("%d objects, %d ops; the same twice: %v", len(objs), len(ops), slices.Equal(ops, again))
	}
	live := map[int]bool{}
	for _, x := range objs {
		live[x.id] = true
	}
	var adds, deletes int
	for e, op := range ops {
		if op.Obj.rev != e+1 {
			t.Fatalf("op %d has revision %d", e, op.Obj.rev)
		}
		switch {
		case op.Delete:
			if !live[op.Obj.id] {
				t.Fatalf("op %d deletes %d, not live", e, op.Obj.id)
			}
			delete(live, op.Obj.id)
			deletes++
		case !live[op.Obj.id]:
			live[op.Obj.id] = true
			adds++
		}
	}
	if adds < 2700 || adds > 3300 || deletes < 2700 || deletes > 3300 {
		t.Fatalf("%d adds and %d deletes of 20000 changes, want about 15 %% each", adds, deletes)
	}
}

// The recorder's notation, its cursor (Expect, ExpectNext, ExpectNoMore), a held call let
// through by Step, and the key of each kind of line.
func TestRecorder(t *testing.T) {
	type kv struct{ k, v string }
	r := NewRecorder(func(o kv) (string, string) { return o.k, o.v })
	r.OnAdd(kv{"a", "1"}, true)
	r.OnUpdate(kv{"a", "1"}, kv{"a", "2"})
	r.Expect(t, "add*a=1", "update a=1→2")
	r.OnUpdate(kv{"a", "2"}, kv{"a", "2"})
	r.OnDelete(kv{"b", "1"}, true)
	r.OnDelete(kv{"a", "2"}, false)
	r.ExpectNextUnordered(t, "delete?b=1", "resync a=2")
	r.ExpectNext(t, "delete a=2")
	r.ExpectNoMore(t)
	if r.Checked() != 5 {
		t.Fatalf("Checked() = %d, want 5", r.Checked())
	}
	got := ByKey(r.Calls())
	if want := []string{"add*a=1", "update a=1→2", "resync a=2", "delete a=2"}; !slices.Equal(got["a"], want) || len(got) != 2 {
		t.Fatalf("ByKey: %q", got)
	}

	h := NewRecorder(func(s string) (string, string) { return s, "x" }).Hold()
	done := make(chan struct{})
	go func() { defer close(done); h.OnAdd("p", false); h.OnAdd("q", false) }()
	if got := h.Step(t); got != "add p=x" {
		t.Fatalf("Step: %q", got)
	}
	if got := h.Calls(); len(got) != 1 {
		t.Fatalf("calls while q is held: %q", got)
	}
	h.Release()
	<-done
	h.Expect(t, "add p=x", "add q=x")
}

// PeakHeap takes a sample at once, so a stop right away still sees the heap of a buffer
// alive before it started, and a second sampler sees it too.
func TestPeakHeap(t *testing.T) {
	const size = 64 << 20
	buf := make([]byte, size)
	if peak := PeakHeap()(); peak < size {
		t.Fatalf("peak %d with a live buffer of %d bytes", peak, size)
	}
	stop := PeakHeap()
	buf[size-1] = 1 // buf stays alive until here
	if peak := stop(); peak < size {
		t.Fatalf("peak %d with a live buffer of %d bytes", peak, size)
	}
	runtime.KeepAlive(buf)
}
