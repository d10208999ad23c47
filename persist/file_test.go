package persist

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

type rec struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// state is what a snapshot holds: a revision and objects in key order.
type state struct {
	rev  string
	objs []rec
}

func makeState(rev string, n int) state {
	s := state{rev: rev}
	for i := range n {
		s.objs = append(s.objs, rec{Name: fmt.Sprintf("k%04d", i), Value: rev + "-" + strconv.Itoa(i)})
	}
	return s
}

func testHeader(s state) *header {
	return &header{schema: "v1", codec: "json", informer: "test", indexes: []string{"a", "b"}, revision: s.rev, count: uint64(len(s.objs))}
}

func write(t testing.TB, path string, s state) {
	t.Helper()
	err := writeFile(context.Background(), new(temps), path, testHeader(s), func(yield func(any, rec) bool) {
		for _, o := range s.objs {
			if !yield(o.Name, o) {
				return
			}
		}
	}, JSON[rec](), nil)
	if err != nil {
		t.Fatal(err)
	}
}

func acceptV1(h *header) error {
	if h.schema != "v1" || h.codec != "json" || h.informer != "test" || !slices.Equal(h.indexes, []string{"a", "b"}) {
		return fmt.Errorf("%w: header %+v", ErrIncompatible, h)
	}
	return nil
}

// read loads path and returns the state it holds.
func read(path string) (state, error) {
	var s state
	h, err := readFile(context.Background(), nil, path, JSON[rec](), acceptV1, func(r rec) { s.objs = append(s.objs, r) })
	if err != nil {
		return state{}, err
	}
	s.rev = h.revision
	return s, nil
}

func sameState(a, b state) bool { return a.rev == b.rev && slices.Equal(a.objs, b.objs) }

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 1000} {
		path := filepath.Join(t.TempDir(), "s.snapshot")
		want := makeState("42", n)
		write(t, path, want)
		got, err := read(path)
		if err != nil {
			t.Fatal(err)
		}
		if !sameState(got, want) {
			t.Fatalf("%d objects: read back %d objects at %q", n, len(got.objs), got.rev)
		}
	}
}

// region names the part of the file an offset falls in, so that a failure says which.
func region(size, hsize, off int64) string {
	switch {
	case off < fixedSize:
		return "fixed header"
	case off < fixedSize+hsize:
		return "header"
	case off < size-12:
		return "records"
	case off < size-4:
		return "trailer"
	}
	return "checksum"
}

func headerSize(t *testing.T, data []byte) int64 {
	return int64(data[12]) | int64(data[13])<<8 | int64(data[14])<<16 | int64(data[15])<<24
}

// writtenSnapshot writes a snapshot of 20 objects at revision 7 and returns its path and
// bytes, for the tests that damage it.
func writtenSnapshot(t *testing.T) (string, []byte) {
	path := filepath.Join(t.TempDir(), "s.snapshot")
	write(t, path, makeState("7", 20))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data
}

// Every truncation of a snapshot, at every byte offset, is refused as corrupt.
func TestLoadRefusesTruncated(t *testing.T) {
	path, data := writtenSnapshot(t)
	size, hsize := int64(len(data)), headerSize(t, data)
	seen := map[string]int{}
	for cut := range size {
		if err := os.WriteFile(path, data[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := read(path)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes (in the %s): got %v, want ErrCorrupt", cut, size, region(size, hsize, cut), err)
		}
		seen[region(size, hsize, cut)]++
	}
	// And a byte too many.
	if err := os.WriteFile(path, append(slices.Clone(data), 0), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := read(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("one byte appended: got %v, want ErrCorrupt", err)
	}
	if len(seen) != 5 {
		t.Fatalf("truncations covered %v, want every region", seen)
	}
}

// A snapshot damaged at any byte, in any of several ways, is refused as corrupt, the
// header too: its checksum is checked before its fields, so a damaged header never reads
// as written by another configuration. It never loads and never panics.
func TestLoadRefusesCorrupted(t *testing.T) {
	path, data := writtenSnapshot(t)
	size, hsize := int64(len(data)), headerSize(t, data)
	seen := map[string]int{}
	for off := range size {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			bad := slices.Clone(data)
			bad[off] ^= flip
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := read(path)
			r := region(size, hsize, off)
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrIncompatible) {
				t.Fatalf("byte %d of %d (in the %s) xor %#x: got %v, want ErrCorrupt", off, size, r, flip, err)
			}
			seen[r]++
		}
	}
	if len(seen) != 5 {
		t.Fatalf("damage covered %v, want every region", seen)
	}
}

// A codec that panics on garbage is an error, not a crash.
func TestDecodePanicIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.snapshot")
	write(t, path, makeState("7", 3))
	panicky := CodecFuncs[rec]{CodecName: "json", DecodeFunc: func([]byte) (rec, error) { panic("bad bytes") }}
	_, err := readFile(context.Background(), nil, path, panicky, acceptV1, func(rec) {})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
}

const (
	childDirEnv   = "PERSIST_CRASH_CHILD_DIR"
	childPointEnv = "PERSIST_CRASH_CHILD_POINT"
)

// crashChild is the child process of TestKilledMidWrite: it saves state A whole, then
// state B, killing itself at the crash point (a byte offset of B's file, or a step).
func crashChild(dir, point string) {
	path := filepath.Join(dir, "s.snapshot")
	write(failer{}, path, makeState("1", 300))
	kill := func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	if off, err := strconv.ParseInt(point, 10, 64); err == nil {
		crashOffset = off
		crashHook = func(written int64, step string) {
			if step == "write" {
				kill()
			}
		}
	} else {
		crashHook = func(_ int64, step string) {
			if step == point {
				kill()
			}
		}
	}
	write(failer{}, path, makeState("2", 300))
	os.Exit(3) // not killed: the parent reports it
}

// failer is the testing.TB of the child: it exits on a failure.
type failer struct{ testing.TB }

func (failer) Helper() {}
func (failer) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(2)
}

// A process killed at random bytes of a save, and between its steps, leaves a snapshot
// that loads whole as the previous state (killed before the rename) or the new one
// (after), never a torn one. The test re-runs its own binary as the child that is killed.
func TestKilledMidWrite(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		crashChild(dir, os.Getenv(childPointEnv))
		return
	}
	// The size of B's file, to draw offsets in.
	probe := filepath.Join(t.TempDir(), "s.snapshot")
	b := makeState("2", 300)
	write(t, probe, b)
	st, err := os.Stat(probe)
	if err != nil {
		t.Fatal(err)
	}
	seed := rand.Uint64()
	t.Logf("seed %d, file of %d bytes", seed, st.Size())
	rnd := rand.New(rand.NewPCG(seed, seed))
	points := []string{"0", strconv.FormatInt(st.Size()-1, 10), "synced", "renamed", "done"}
	for range 15 {
		points = append(points, strconv.FormatInt(rnd.Int64N(st.Size()), 10))
	}
	a := makeState("1", 300)
	for _, point := range points {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledMidWrite$", "-test.count=1")
		cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childPointEnv+"="+point)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("crash point %s: the child was not killed: %v\n%s", point, err, out)
		}
		got, err := read(filepath.Join(dir, "s.snapshot"))
		if err != nil {
			t.Fatalf("crash point %s: the snapshot does not load: %v", point, err)
		}
		want := a
		if point == "renamed" || point == "done" {
			want = b
		}
		if !sameState(got, want) {
			t.Fatalf("crash point %s: loaded revision %s with %d objects, want revision %s whole", point, got.rev, len(got.objs), want.rev)
		}
		// The interrupted save's temporary file is removed by the next Load.
		new(temps).removeLeftovers(filepath.Join(dir, "s.snapshot"))
		if tmps, _ := filepath.Glob(filepath.Join(dir, "*"+tempSuffix+"*")); len(tmps) != 0 {
			t.Fatalf("crash point %s: temporary files left: %v", point, tmps)
		}
	}
}

// A whole snapshot of another format version (its header checksum right) is refused as
// written by another configuration, not as corrupt.
func TestLoadRefusesOtherFormat(t *testing.T) {
	path, data := writtenSnapshot(t)
	hsize := headerSize(t, data)
	data[8]++ // the format version
	binary.LittleEndian.PutUint32(data[16:], headerSum(data[:16], data[fixedSize:fixedSize+hsize]))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := read(path); !errors.Is(err, ErrIncompatible) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("format %d: got %v, want ErrIncompatible", formatVersion+1, err)
	}
}
