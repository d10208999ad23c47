package persist_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/persist"
)

// wrapDesc describes the cache of the WrapWriter tests.
var wrapDesc = informer.PersistedCache{Informer: "wrap", Type: "*github.com/informer-go/informer/persist_test.item"}

// fullDisk passes the first left bytes to w, then fails as a full disk does.
type fullDisk struct {
	w    io.Writer
	left int64
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if int64(len(p)) <= d.left {
		n, err := d.w.Write(p)
		d.left -= int64(n)
		return n, err
	}
	n, err := d.w.Write(p[:d.left])
	d.left -= int64(n)
	if err != nil {
		return n, err
	}
	return n, fmt.Errorf("writing the snapshot: %w", syscall.ENOSPC)
}

// twoStates returns the informer's snapshots of two states of a source: a, with 200
// objects, and b, with each of them changed.
func twoStates(t *testing.T) (a, b *informer.Snapshot[string, *item]) {
	t.Helper()
	src := newSource()
	for i := range 200 {
		src.Put(&item{Name: fmt.Sprintf("k%03d", i), Value: "a"})
	}
	l := start(t, src, nil, nil)
	catchUp(t, l, src)
	a = l.inf.Snapshot()
	for i := range 200 {
		src.Put(&item{Name: fmt.Sprintf("k%03d", i), Value: "b"})
	}
	catchUp(t, l, src)
	return a, l.inf.Snapshot()
}

// loaded returns the revision and the objects (key=value) of the snapshot f holds.
func loaded(t *testing.T, f *persist.File[string, *item]) (string, []string) {
	t.Helper()
	var objs []string
	rev, err := f.Load(context.Background(), wrapDesc, func(it *item) { objs = append(objs, it.Name+"="+it.Value) })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return rev, objs
}

// A save whose writer fails at any byte (a full disk) fails with the writer's error and
// leaves the previous snapshot whole and no temporary file; the next save that can
// write replaces it.
func TestWrapWriterFailureKeepsPreviousSnapshot(t *testing.T) {
	a, b := twoStates(t)
	probe, err := persist.New[string, *item](t.TempDir(), persist.Options[*item]{Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Save(context.Background(), wrapDesc, b); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(probe.Path(wrapDesc))
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	seed := rand.Uint64()
	t.Logf("seed %d, file of %d bytes", seed, size)
	rnd := rand.New(rand.NewPCG(seed, seed))
	// The first byte, the header, the records, the trailer, the checksum (its own write),
	// the last byte, and random ones.
	offsets := []int64{0, 1, 20, 100, size / 2, size - 12, size - 4, size - 1}
	for range 8 {
		offsets = append(offsets, rnd.Int64N(size))
	}
	for _, off := range offsets {
		dir := t.TempDir()
		failAt := int64(-1) // no failure
		f, err := persist.New[string, *item](dir, persist.Options[*item]{Interval: -1, WrapWriter: func(w io.Writer) io.Writer {
			if failAt < 0 {
				return w
			}
			return &fullDisk{w: w, left: failAt}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Save(context.Background(), wrapDesc, a); err != nil {
			t.Fatal(err)
		}
		wantRev, wantObjs := loaded(t, f)
		failAt = off
		err = f.Save(context.Background(), wrapDesc, b)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("disk full at byte %d: Save returned %v, want the writer's error", off, err)
		}
		if rev, objs := loaded(t, f); rev != wantRev || !slices.Equal(objs, wantObjs) {
			t.Fatalf("disk full at byte %d: the snapshot holds revision %s (%d objects), want the previous one, %s, whole", off, rev, len(objs), wantRev)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != filepath.Base(f.Path(wrapDesc)) {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("disk full at byte %d: the directory holds %v, want the snapshot alone", off, names)
		}
		failAt = -1
		if err := f.Save(context.Background(), wrapDesc, b); err != nil {
			t.Fatal(err)
		}
		if rev, _ := loaded(t, f); rev != b.Revision() {
			t.Fatalf("after the disk had room again: revision %s, want %s", rev, b.Revision())
		}
	}
}

// Every byte of the file goes through the writer WrapWriter returns, in order: a writer
// that hashes what it is given hashes the file.
func TestWrapWriterSeesEveryByte(t *testing.T) {
	_, b := twoStates(t)
	h := sha256.New()
	var n int64
	f, err := persist.New[string, *item](t.TempDir(), persist.Options[*item]{Interval: -1, WrapWriter: func(w io.Writer) io.Writer {
		h.Reset()
		n = 0
		return writerFunc(func(p []byte) (int, error) {
			h.Write(p)
			n += int64(len(p))
			return w.Write(p)
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(context.Background(), wrapDesc, b); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.Path(wrapDesc))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); n != int64(len(data)) || !bytes.Equal(h.Sum(nil), sum[:]) {
		t.Fatalf("the writer was given %d bytes hashing to %x; the file has %d hashing to %x", n, h.Sum(nil), len(data), sum)
	}
}

// writerFunc is an io.Writer of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// stallingDisk stalls a save in the middle of its file when armed: it writes half of
// what it is given, says so on stalled, and waits for release.
type stallingDisk struct {
	armed   atomic.Bool
	stalled chan struct{}
	release chan struct{}
	once    sync.Once
}

func newStallingDisk() *stallingDisk {
	return &stallingDisk{stalled: make(chan struct{}), release: make(chan struct{})}
}

func (d *stallingDisk) wrap(w io.Writer) io.Writer {
	if !d.armed.CompareAndSwap(true, false) {
		return w
	}
	return writerFunc(func(p []byte) (int, error) {
		var n int
		d.once.Do(func() {
			n, _ = w.Write(p[:len(p)/2])
			close(d.stalled)
			<-d.release
		})
		m, err := w.Write(p[n:])
		return n + m, err
	})
}

// A save stalled in the middle of its file blocks neither the informer's watch, reads
// and handlers, nor WaitForRevision; the snapshot meanwhile is the previous one, whole,
// and once the disk writes again the informer saves its newest state.
func TestStalledSaveDoesNotBlockTheInformer(t *testing.T) {
	src := newSource()
	disk := newStallingDisk()
	t.Cleanup(func() {
		select {
		case <-disk.release:
		default:
			close(disk.release)
		}
	})
	f, err := persist.New[string, *item](t.TempDir(), persist.Options[*item]{Interval: time.Millisecond, WrapWriter: disk.wrap})
	if err != nil {
		t.Fatal(err)
	}
	src.Put(&item{Name: "a", Value: "1"})
	l := start(t, src, f, nil)
	l.rec.Expect(t, "add*a=1")
	desc := informer.PersistedCache{Informer: "informer", Type: wrapDesc.Type, Source: sourceID(t, src), Indexes: []string{"group"}}
	first := strconv.FormatInt(src.Revision(), 10)
	savedAt(t, f, desc, first)
	disk.armed.Store(true)
	src.Put(&item{Name: "b", Value: "1"})
	select {
	case <-disk.stalled:
	case <-time.After(informertest.DefaultTimeout):
		t.Fatal("no save reached the stalled disk")
	}
	// While the save stalls: the watch, the handlers and the reads go on.
	var want []string
	for i := range 100 {
		src.Put(&item{Name: "c", Value: strconv.Itoa(i)})
		if i == 0 {
			want = append(want, "add b=1", "add c=0")
		} else {
			want = append(want, fmt.Sprintf("update c=%d→%d", i-1, i))
		}
	}
	l.rec.ExpectNext(t, want...)
	catchUp(t, l, src)
	if v, ok := l.inf.Get("c"); !ok || v.Value != "99" {
		t.Fatalf("Get(c) = %v, %v while a save stalls; want c=99", v, ok)
	}
	if rev := l.inf.Snapshot().Revision(); rev != strconv.FormatInt(src.Revision(), 10) {
		t.Fatalf("Snapshot at %s while a save stalls; want %d", rev, src.Revision())
	}
	if rev, err := f.Load(context.Background(), desc, func(*item) {}); err != nil || rev != first {
		t.Fatalf("the snapshot while a save stalls: revision %q, %v; want the previous one, %s", rev, err, first)
	}
	close(disk.release)
	savedAt(t, f, desc, strconv.FormatInt(src.Revision(), 10))
	l.stop()
	if errs := l.errs.All(); len(errs) != 0 {
		t.Fatalf("reported %v", errs)
	}
}

// A Load while a save is in progress (stalled mid-file) leaves the save's temporary
// file, which only an interrupted save leaves behind: the save then completes.
func TestLoadDuringStalledSave(t *testing.T) {
	a, b := twoStates(t)
	disk := newStallingDisk()
	f, err := persist.New[string, *item](t.TempDir(), persist.Options[*item]{Interval: -1, WrapWriter: disk.wrap})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(context.Background(), wrapDesc, a); err != nil {
		t.Fatal(err)
	}
	disk.armed.Store(true)
	saved := make(chan error, 1)
	go func() { saved <- f.Save(context.Background(), wrapDesc, b) }()
	select {
	case <-disk.stalled:
	case err := <-saved:
		t.Fatalf("the save did not reach the stalled disk: %v", err)
	}
	if rev, _ := loaded(t, f); rev != a.Revision() {
		t.Fatalf("Load during the stalled save: revision %s, want the previous one, %s", rev, a.Revision())
	}
	close(disk.release)
	if err := <-saved; err != nil {
		t.Fatalf("the save after a Load: %v", err)
	}
	if rev, _ := loaded(t, f); rev != b.Revision() {
		t.Fatalf("after the save: revision %s, want %s", rev, b.Revision())
	}
}

// sourceID returns src's identity.
func sourceID(t *testing.T, src informer.SourceIdentifier) string {
	t.Helper()
	id, err := src.SourceID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// savedAt waits until f's snapshot for desc is at rev.
func savedAt(t *testing.T, f *persist.File[string, *item], desc informer.PersistedCache, rev string) {
	t.Helper()
	informertest.Eventually(t, informertest.DefaultTimeout, func() bool {
		got, err := f.Load(context.Background(), desc, func(*item) {})
		return err == nil && got == rev
	}, "no snapshot of revision %s", rev)
}
