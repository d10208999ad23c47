package persist

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/informer-go/informer"
)

// The file format, little-endian throughout:
//
//	magic        8 bytes  "INFSNAP\x00"
//	format       uint32   formatVersion
//	header size  uint32   at most maxHeader
//	header sum   uint32   CRC-32C of the 16 bytes above and of the header
//	header                schema, codec, informer, object type, source identity (each
//	                      a uvarint length and bytes),
//	                      the number of index names and each name (likewise),
//	                      revision (likewise), object count (uvarint),
//	                      the objects' shape as the codec writes it (a uvarint length
//	                      and JSON, see shape.go; empty for a codec that has none)
//	records               count times: a uvarint length and the codec's bytes
//	trailer      8 bytes  "INFSEND\x00"
//	checksum     uint32   CRC-32C of every byte before it
//
// The first 20 bytes keep this layout in every format version, so the header's checksum
// is checked before any of its fields, the format version included: a damaged header is
// refused as corrupt, never as written by another configuration. Format 2, without the
// shape, is still read: a snapshot of it is refused if its codec records a shape now
// (see header.mismatch). Records are read in one
// sequential pass with a reused buffer and covered by the checksum at the end.

const (
	formatVersion = 3
	noShapeFormat = 2  // the previous format: no shape in the header
	fixedSize     = 20 // magic, format, header size, header sum
	maxHeader     = 1 << 20
	tempSuffix    = ".tmp-"
	bufferSize    = 1 << 20
)

var (
	magic        = [8]byte{'I', 'N', 'F', 'S', 'N', 'A', 'P', 0}
	trailerMagic = [8]byte{'I', 'N', 'F', 'S', 'E', 'N', 'D', 0}
	castagnoli   = crc32.MakeTable(crc32.Castagnoli)
)

// header is the snapshot's description.
type header struct {
	schema, codec, informer string
	typ, source             string // informer.PersistedCache's Type and Source
	indexes                 []string
	revision                string
	count                   uint64
	shape                   string // the codec's shape of the objects (shape.encode), or ""
}

// newHeader returns the header of a snapshot of count objects at revision, saved for the
// informer desc describes with the given schema, codec name and shape.
func newHeader(desc informer.PersistedCache, schema, codec, shape, revision string, count int) *header {
	return &header{
		schema:   schema,
		codec:    codec,
		informer: desc.Informer,
		typ:      desc.Type,
		source:   desc.Source,
		indexes:  desc.Indexes,
		revision: revision,
		count:    uint64(count),
		shape:    shape,
	}
}

// mismatch returns why a snapshot of header h, written for another configuration than
// the one want describes, is not read; nil when it is read. A shape other than want's
// (when want has one) is judged by refuseShape, given the recorded shape: Binary may read
// it exactly.
func (h *header) mismatch(want *header, refuseShape func(recorded string) error) error {
	switch {
	case h.schema != want.schema:
		return fmt.Errorf("%w: schema %q, want %q (bump Options.Schema only when old snapshots must be refused)", ErrIncompatible, h.schema, want.schema)
	case h.codec != want.codec:
		return fmt.Errorf("%w: codec %q, want %q", ErrIncompatible, h.codec, want.codec)
	case h.informer != want.informer:
		return fmt.Errorf("%w: informer %q, want %q", ErrIncompatible, h.informer, want.informer)
	case h.typ != want.typ:
		return fmt.Errorf("%w: objects of type %s, want %s (give each informer its own Options.Name or FileName)", ErrIncompatible, h.typ, want.typ)
	case h.source != want.source:
		return fmt.Errorf("%w: saved from source %q, this informer's source is %q (another cluster, prefix or server: its revisions mean nothing here)", ErrIncompatible, h.source, want.source)
	case !equalStrings(h.indexes, want.indexes):
		return fmt.Errorf("%w: indexes %q, want %q", ErrIncompatible, h.indexes, want.indexes)
	case want.shape != "" && h.shape != want.shape:
		return refuseShape(h.shape)
	}
	return nil
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (h *header) encode() []byte {
	var b []byte
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	str(h.schema)
	str(h.codec)
	str(h.informer)
	str(h.typ)
	str(h.source)
	b = binary.AppendUvarint(b, uint64(len(h.indexes)))
	for _, s := range h.indexes {
		str(s)
	}
	str(h.revision)
	b = binary.AppendUvarint(b, h.count)
	str(h.shape)
	return b
}

// decodeHeader decodes a header of the given format version.
func decodeHeader(b []byte, version uint32) (*header, error) {
	bad := fmt.Errorf("%w: malformed header", ErrCorrupt)
	num := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := num()
		if !ok || n > uint64(len(b)) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	h := &header{}
	var ok bool
	if h.schema, ok = str(); !ok {
		return nil, bad
	}
	if h.codec, ok = str(); !ok {
		return nil, bad
	}
	if h.informer, ok = str(); !ok {
		return nil, bad
	}
	if h.typ, ok = str(); !ok {
		return nil, bad
	}
	if h.source, ok = str(); !ok {
		return nil, bad
	}
	n, ok := num()
	if !ok || n > uint64(len(b)) {
		return nil, bad
	}
	for range n {
		s, ok := str()
		if !ok {
			return nil, bad
		}
		h.indexes = append(h.indexes, s)
	}
	if h.revision, ok = str(); !ok {
		return nil, bad
	}
	if h.count, ok = num(); !ok {
		return nil, bad
	}
	if version > noShapeFormat {
		if h.shape, ok = str(); !ok {
			return nil, bad
		}
	}
	if len(b) != 0 {
		return nil, bad
	}
	return h, nil
}

// crashHook, set by the crash tests only, is called as the snapshot is written: with the
// number of bytes written so far after every write to the temporary file (a write that
// crosses crashOffset is split there), and with -1 and the step after each later step.
var (
	crashOffset int64 = -1
	crashHook   func(written int64, step string)
)

// fileWriter counts and hashes what reaches the file.
type fileWriter struct {
	f       *os.File
	crc     hash.Hash32
	written int64
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if crashHook != nil && crashOffset >= w.written && crashOffset < w.written+int64(len(p)) {
		n, err := w.write(p[:crashOffset-w.written])
		crashHook(w.written, "write")
		if err != nil {
			return n, err
		}
		m, err := w.write(p[n:])
		return n + m, err
	}
	return w.write(p)
}

func (w *fileWriter) write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.crc.Write(p[:n])
	w.written += int64(n)
	return n, err
}

func step(name string) {
	if crashHook != nil {
		crashHook(-1, name)
	}
}

// temps are the temporary files of a File's saves in progress: a Load removes the
// temporary files an interrupted save left, never those of a save still writing.
type temps struct {
	mu   sync.Mutex
	live map[string]bool
}

// create creates a temporary file in dir, named by pattern as os.CreateTemp does, and
// holds it as live until done.
func (t *temps) create(dir, pattern string) (*os.File, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.CreateTemp(dir, pattern)
	if err == nil {
		if t.live == nil {
			t.live = make(map[string]bool)
		}
		t.live[f.Name()] = true
	}
	return f, err
}

// done says that the save of the temporary file name has ended.
func (t *temps) done(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.live, name)
}

// removeLeftovers removes the temporary files of the snapshot at path that no save in
// progress writes: those an interrupted save left.
func (t *temps) removeLeftovers(path string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	matches, _ := filepath.Glob(path + tempSuffix + "*")
	for _, m := range matches {
		if !t.live[m] {
			os.Remove(m)
		}
	}
}

// writeFile writes a snapshot at path atomically: a temporary file held in saving, fsync,
// rename, fsync of the directory. Every byte goes through wrap when it is not nil.
func writeFile[V any](ctx context.Context, saving *temps, path string, h *header, objects func(yield func(any, V) bool), codec Codec[V], wrap func(io.Writer) io.Writer) (err error) {
	dir := filepath.Dir(path)
	f, err := saving.create(dir, filepath.Base(path)+tempSuffix+"*")
	if err != nil {
		return fmt.Errorf("persist: saving %s: %w", path, err)
	}
	tmp := f.Name()
	defer saving.done(tmp)
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	fw := &fileWriter{f: f, crc: crc32.New(castagnoli)}
	var w io.Writer = fw
	if wrap != nil {
		w = wrap(fw)
	}
	bw := bufio.NewWriterSize(w, bufferSize)
	hb := h.encode()
	var fixed [fixedSize]byte
	copy(fixed[:8], magic[:])
	binary.LittleEndian.PutUint32(fixed[8:], formatVersion)
	binary.LittleEndian.PutUint32(fixed[12:], uint32(len(hb)))
	binary.LittleEndian.PutUint32(fixed[16:], headerSum(fixed[:16], hb))
	bw.Write(fixed[:])
	bw.Write(hb)
	var lenBuf [binary.MaxVarintLen64]byte
	var n uint64
	for k, obj := range objects {
		if n%4096 == 0 && ctx.Err() != nil {
			return fmt.Errorf("persist: saving %s: %w", path, ctx.Err())
		}
		b, err := safeEncode(codec, obj)
		if err != nil {
			return fmt.Errorf("persist: saving %s: encoding the object with key %v: %w", path, k, err)
		}
		bw.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(b)))])
		if _, err := bw.Write(b); err != nil { // a write error stays: no more encoding
			return fmt.Errorf("persist: saving %s: %w", path, err)
		}
		n++
	}
	if n != h.count {
		return fmt.Errorf("persist: saving %s: the state changed while it was written (%d objects, %d expected)", path, n, h.count)
	}
	bw.Write(trailerMagic[:])
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("persist: saving %s: %w", path, err)
	}
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], fw.crc.Sum32())
	if _, err := w.Write(sum[:]); err != nil {
		return fmt.Errorf("persist: saving %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("persist: saving %s: fsync: %w", path, err)
	}
	step("synced")
	if err := f.Close(); err != nil {
		return fmt.Errorf("persist: saving %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("persist: saving %s: %w", path, err)
	}
	step("renamed")
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("persist: saving %s: fsync of the directory: %w", path, err)
		}
	}
	step("done")
	return nil
}

// fileReader hashes every byte of the file before the checksum as it is read.
type fileReader struct {
	f      *os.File
	crc    uint32
	offset int64
	hashTo int64 // the offset of the checksum
}

func (r *fileReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	if h := min(int64(n), r.hashTo-r.offset); h > 0 {
		r.crc = crc32.Update(r.crc, castagnoli, p[:h])
	}
	r.offset += int64(n)
	return n, err
}

// readFile reads the snapshot at path: check accepts or refuses the header before any
// record is read; add receives each object. With saving, it first removes the temporary
// files an interrupted save left (those saving does not hold).
func readFile[V any](ctx context.Context, saving *temps, path string, codec Codec[V], check func(*header) error, add func(V)) (*header, error) {
	if saving != nil {
		saving.removeLeftovers(path)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("persist: %s: %w", path, informer.ErrNoPersistedState)
	}
	if err != nil {
		return nil, fmt.Errorf("persist: %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("persist: %s: %w", path, err)
	}
	size := st.Size()
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("persist: %s (%d bytes): %w: %s", path, size, ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if size < fixedSize+8+4 {
		return nil, corrupt("shorter than an empty snapshot")
	}
	fr := &fileReader{f: f, hashTo: size - 4}
	br := bufio.NewReaderSize(fr, bufferSize)
	var fixed [fixedSize]byte
	if _, err := io.ReadFull(br, fixed[:]); err != nil {
		return nil, corrupt("reading the header: %v", err)
	}
	if [8]byte(fixed[:8]) != magic {
		return nil, corrupt("not a snapshot file (bad magic)")
	}
	hsize := int64(binary.LittleEndian.Uint32(fixed[12:]))
	if hsize > maxHeader || fixedSize+hsize+12 > size {
		return nil, corrupt("header size %d out of bounds", hsize)
	}
	hb := make([]byte, hsize)
	if _, err := io.ReadFull(br, hb); err != nil {
		return nil, corrupt("reading the header: %v", err)
	}
	if want, got := binary.LittleEndian.Uint32(fixed[16:]), headerSum(fixed[:16], hb); want != got {
		return nil, corrupt("header checksum mismatch: the file says %08x, its header gives %08x", want, got)
	}
	v := binary.LittleEndian.Uint32(fixed[8:])
	if v != formatVersion && v != noShapeFormat {
		return nil, fmt.Errorf("persist: %s: %w: file format %d, this version reads %d and %d", path, ErrIncompatible, v, noShapeFormat, formatVersion)
	}
	h, err := decodeHeader(hb, v)
	if err != nil {
		return nil, corrupt("%v", err)
	}
	// The header's own checksum matched: what check refuses is another configuration.
	if err := check(h); err != nil {
		return nil, fmt.Errorf("persist: %s: %w", path, err)
	}
	pos := fixedSize + hsize
	end := size - 12 // the trailer
	if h.count > uint64(end-pos) {
		return nil, corrupt("%d objects cannot fit in the file", h.count)
	}
	dec := newDecoder(codec, add)
	defer dec.close()
	for i := range h.count {
		if i%4096 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("persist: %s: %w", path, ctx.Err())
		}
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, corrupt("record %d of %d: %v", i, h.count, err)
		}
		pos += int64(uvarintLen(n))
		if n > uint64(end-pos) {
			return nil, corrupt("record %d of %d: length %d past the end", i, h.count, n)
		}
		if _, err := io.ReadFull(br, dec.next(int(n))); err != nil {
			return nil, corrupt("record %d of %d: %v", i, h.count, err)
		}
		pos += int64(n)
		if err := dec.err(); err != nil {
			return nil, corrupt("%v", err)
		}
	}
	if err := dec.flush(); err != nil {
		return nil, corrupt("%v", err)
	}
	if pos != end {
		return nil, corrupt("%d bytes between the last record and the trailer", end-pos)
	}
	var tail [12]byte
	if _, err := io.ReadFull(br, tail[:]); err != nil {
		return nil, corrupt("reading the trailer: %v", err)
	}
	if [8]byte(tail[:8]) != trailerMagic {
		return nil, corrupt("bad trailer")
	}
	if want, got := binary.LittleEndian.Uint32(tail[8:]), fr.crc; want != got {
		return nil, corrupt("checksum mismatch: the file says %08x, its content gives %08x", want, got)
	}
	return h, nil
}

// headerSum is the header's checksum: CRC-32C of the fixed bytes before it and of the
// header.
func headerSum(fixed, hb []byte) uint32 {
	return crc32.Update(crc32.Checksum(fixed, castagnoli), castagnoli, hb)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func safeEncode[V any](c Codec[V], obj V) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("codec %s panicked: %v", c.Name(), r)
		}
	}()
	return c.Encode(obj)
}
