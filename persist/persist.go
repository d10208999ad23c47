package persist

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/informer-go/informer"
)

// Codec turns objects into bytes and back. Decode must not keep data: the buffer is reused
// for the next record. A panic in either is turned into an error.
type Codec[V any] interface {
	// Name identifies the encoding in the snapshot's header ("json", "proto-v2", …): a
	// snapshot written with another name is refused.
	Name() string
	// Encode returns obj's bytes.
	Encode(obj V) ([]byte, error)
	// Decode returns the object data encodes.
	Decode(data []byte) (V, error)
}

// CodecFuncs makes a Codec of any Encode/Decode pair.
type CodecFuncs[V any] struct {
	// CodecName is what Name returns.
	CodecName string
	// EncodeFunc serves Encode.
	EncodeFunc func(obj V) ([]byte, error)
	// DecodeFunc serves Decode.
	DecodeFunc func(data []byte) (V, error)
}

// Name returns CodecName.
func (c CodecFuncs[V]) Name() string { return c.CodecName }

// Encode calls EncodeFunc.
func (c CodecFuncs[V]) Encode(obj V) ([]byte, error) { return c.EncodeFunc(obj) }

// Decode calls DecodeFunc.
func (c CodecFuncs[V]) Decode(data []byte) (V, error) { return c.DecodeFunc(data) }

// JSON returns a codec named "json": encoding/json's Marshal and Unmarshal. It stores
// what encoding/json sees (exported fields, custom MarshalJSON methods), as JSON does: a
// string that is not valid UTF-8 comes back with U+FFFD, an interface's numbers as
// float64, and a NaN or ±Inf fails the save. A File's default codec for the types Binary
// does not serve encodes as JSON does, refusing those losses (see Options.Codec).
func JSON[V any]() Codec[V] {
	return CodecFuncs[V]{
		CodecName:  "json",
		EncodeFunc: func(obj V) ([]byte, error) { return json.Marshal(obj) },
		DecodeFunc: func(data []byte) (V, error) {
			var v V
			err := json.Unmarshal(data, &v)
			return v, err
		},
	}
}

// Options configures a File. The zero value is valid: Binary for a plain V and JSON for
// a V that JSON stores exactly, a save every minute, schema "".
type Options[V any] struct {
	// Schema is your version of what the objects mean: bump it when the key function, the
	// Transform or the object type changes in a way an old snapshot must not be loaded
	// with. A snapshot written with another Schema is refused (ErrIncompatible). Default "".
	Schema string
	// Codec encodes the objects; default Binary when V is plain (see Binary), JSON
	// otherwise. Binary decodes several times faster: a warm start of plain objects
	// costs a fraction of a cold list (see README.md). When V is not plain and JSON
	// cannot give every value of V back as it was (an unexported field, an interface, a
	// float, which may be NaN or ±Inf), New refuses V unless AllowLossyJSON is set: give
	// V a codec of its own.
	Codec Codec[V]
	// AllowLossyJSON lets the default codec be JSON for a V that JSON cannot store
	// exactly, accepting what it loses: unexported fields come back empty, interfaces
	// hold float64 for their numbers and maps for their structs, and a save of a value
	// holding NaN or ±Inf fails, naming the object, so that no snapshot is written while
	// one is cached. Default false: New refuses such a V.
	AllowLossyJSON bool
	// Logger receives the codec New chose and why (once); default slog.Default().
	Logger *slog.Logger
	// Interval is how often a running informer saves its cache (when it changed); 0 means
	// one minute, negative means only when the informer stops. A save reads an immutable
	// snapshot and never blocks the informer; it costs one encode per object and one
	// sequential write of the file.
	Interval time.Duration
	// FileName is the snapshot's name in the directory; default the informer's name
	// (Options.Name) with ".snapshot" appended, with characters other than letters,
	// digits, '-', '_' and '.' replaced by '_'.
	FileName string
	// WrapWriter, when set, is called once per save with the writer of the snapshot's
	// temporary file, and Save writes every byte of the snapshot through the writer it
	// returns: one that counts or hashes the bytes, limits their rate, or makes a disk
	// slow or full in a test. Its Write must write exactly the bytes it is given to w, in
	// order, before it returns: Load reads the file as it is, so a byte changed, added or
	// held back makes the snapshot refused as corrupt (to encrypt or compress objects,
	// give Codec a codec that does). An error it returns fails the save as a full disk
	// would: the previous snapshot stays, whole, and the temporary file is removed. A
	// slow writer slows the save only: the informer saves from an immutable snapshot on
	// a goroutine of its own, so its reads, handlers and watch go on meanwhile (a stop
	// waits for the last save: Run returns after it). Default nil: the file itself.
	WrapWriter func(w io.Writer) io.Writer
}

// File keeps an informer's cache in a snapshot file of a directory: it implements
// informer.Persister. One File serves one informer; two processes must not share a
// directory and file name. It is safe for concurrent use.
type File[K comparable, V any] struct {
	dir  string
	opts Options[V]
	// shape is the codec when it records the objects' shape in each snapshot (Binary),
	// nil otherwise; shapeText is the shape it records ("" for none).
	shape     shapedCodec
	shapeText string
	temps     temps // the temporary files of the saves in progress
}

// shapedCodec is a codec that records the objects' shape in each snapshot, and reads a
// snapshot only when it reads its recorded shape exactly (Binary).
type shapedCodec interface {
	// recordedShape returns the shape recorded in each snapshot's header.
	recordedShape() string
	// refuseShape returns why a snapshot recording the shape recorded is not read into
	// objects of type typ, or nil when it is read exactly.
	refuseShape(recorded, typ string) error
}

var _ informer.Persister[string, int] = (*File[string, int])(nil)

// New returns a File that keeps its snapshot in dir, creating dir (mode 0700) if needed.
func New[K comparable, V any](dir string, opts Options[V]) (*File[K, V], error) {
	if dir == "" {
		return nil, errors.New("persist: New: empty directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("persist: New: %w", err)
	}
	logger := cmp.Or(opts.Logger, slog.Default())
	if opts.Codec == nil {
		c, why, err := defaultCodec[V](opts.AllowLossyJSON)
		if err != nil {
			return nil, fmt.Errorf("persist: New: %w", err)
		}
		opts.Codec = c
		level := slog.LevelInfo // JSON: several times slower to load, and why matters
		if c.Name() == binaryName {
			level = slog.LevelDebug
		}
		logger.Log(context.Background(), level, "persist: snapshot codec chosen", "type", reflect.TypeFor[V]().String(), "codec", c.Name(), "why", why)
	}
	f := &File[K, V]{dir: dir, opts: opts}
	if s, ok := opts.Codec.(shapedCodec); ok {
		f.shape, f.shapeText = s, s.recordedShape()
	}
	switch {
	case opts.Interval == 0:
		f.opts.Interval = time.Minute
	case opts.Interval < 0:
		f.opts.Interval = 0
	}
	return f, nil
}

// Errors of Load. Each is wrapped with the file's path and what was found.
var (
	// ErrCorrupt means the file is not a whole snapshot: truncated, a checksum mismatch,
	// a malformed header or record, an object the codec cannot decode.
	ErrCorrupt = errors.New("snapshot corrupt")
	// ErrIncompatible means the snapshot is whole but was written for another
	// configuration: another Schema, codec, informer name, object type, source or index
	// set, or an object type that changed shape in a way Binary cannot read exactly.
	ErrIncompatible = errors.New("snapshot written by another configuration")
)

// Path returns the snapshot's path for the informer described by desc.
func (f *File[K, V]) Path(desc informer.PersistedCache) string {
	name := f.opts.FileName
	if name == "" {
		name = sanitize(desc.Informer) + ".snapshot"
	}
	return filepath.Join(f.dir, name)
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// Interval returns Options.Interval (0: only at stop).
func (f *File[K, V]) Interval() time.Duration { return f.opts.Interval }

// Equal reports whether a and b encode to the same bytes (an object that fails to encode
// is never equal). It costs two encodes.
func (f *File[K, V]) Equal(a, b V) bool {
	ea, err := safeEncode(f.opts.Codec, a)
	if err != nil {
		return false
	}
	eb, err := safeEncode(f.opts.Codec, b)
	return err == nil && bytes.Equal(ea, eb)
}

// Load reads the snapshot in one sequential pass, calling add with each object in key
// order, and returns its revision. It verifies the checksum at the end: add may have been
// called before an error, and the caller must then discard what it got (the informer
// does). No file: an error matching informer.ErrNoPersistedState. Leftover temporary
// files of an interrupted Save are removed; those of a Save in progress are left to it.
func (f *File[K, V]) Load(ctx context.Context, desc informer.PersistedCache, add func(obj V)) (string, error) {
	h, err := readFile(ctx, &f.temps, f.Path(desc), f.opts.Codec, func(h *header) error { return f.check(h, desc) }, add)
	if err != nil {
		return "", err
	}
	return h.revision, nil
}

// errHeaderRead stops SavedSource's read after the header.
var errHeaderRead = errors.New("header read")

// SavedSource returns the source identity (informer.PersistedCache.Source) the snapshot
// for desc was saved with, reading its header only. The informer uses it to serve a saved
// cache while its source does not answer (informer.Options.ServeUnconfirmed), and checks
// the identity once the source answers. No file: an error matching
// informer.ErrNoPersistedState.
func (f *File[K, V]) SavedSource(ctx context.Context, desc informer.PersistedCache) (string, error) {
	var source string
	_, err := readFile(ctx, nil, f.Path(desc), f.opts.Codec, func(h *header) error {
		source = h.source
		return errHeaderRead
	}, func(V) {})
	if !errors.Is(err, errHeaderRead) {
		return "", err
	}
	return source, nil
}

// check refuses a header written for another configuration.
func (f *File[K, V]) check(h *header, desc informer.PersistedCache) error {
	return h.mismatch(f.header(desc, "", 0), func(recorded string) error {
		return f.shape.refuseShape(recorded, desc.Type)
	})
}

// header returns the header of a snapshot f saves for desc: count objects at revision.
func (f *File[K, V]) header(desc informer.PersistedCache, revision string, count int) *header {
	return newHeader(desc, f.opts.Schema, f.opts.Codec.Name(), f.shapeText, revision, count)
}

// Save writes state to a temporary file in the directory, fsyncs it, renames it over the
// snapshot and fsyncs the directory: a crash at any point leaves either the previous
// snapshot or the new one, whole. An object that fails to encode fails the Save (the
// previous snapshot stays). It costs one encode per object and one sequential write.
func (f *File[K, V]) Save(ctx context.Context, desc informer.PersistedCache, state *informer.Snapshot[K, V]) error {
	h := f.header(desc, state.Revision(), state.Len())
	return writeFile(ctx, &f.temps, f.Path(desc), h, func(yield func(any, V) bool) {
		for k, v := range state.All() {
			if !yield(k, v) {
				return
			}
		}
	}, f.opts.Codec, f.opts.WrapWriter)
}
