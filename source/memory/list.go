package memory

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"reflect"
	"strconv"
	"strings"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/btree"
	"github.com/informer-go/informer/internal/eventlog"
)

// maxPins bounds the snapshots kept for paged lists that were started and never finished.
// Beyond it the oldest is dropped, and its continue token answers informer.ErrExpired.
const maxPins = 64

// pin is the snapshot a paged list reads its later pages from.
type pin[K cmp.Ordered, V any] struct {
	rev    int64
	revStr string
	tree   *btree.Tree[K, V]
}

// List implements informer.ListerWatcher: it returns one page of the objects, sorted by
// key, and the revision the page reflects.
//
// Without opts.Limit (or with Limit <= 0) it returns every object at the current
// revision. With a positive Limit it returns at most Limit objects; if more remain, the
// first page pins the current state (an O(1) copy-on-write clone of the B-tree) and
// returns a Continue token, and every later page reads that same snapshot and reports the
// same Revision, whatever changed since. The snapshot is dropped when the last page is
// served, when a compaction passes its revision, or when more than 64 unfinished lists
// are pinned (the oldest goes). A page costs O(log n + Limit).
//
// opts.Revision, on a first page, means "at least this fresh": the current state always
// satisfies it. opts.Consistent is always satisfied. On later pages both are ignored; the
// token decides.
//
// Errors: ctx.Err() if ctx is done (before or during the delay set with SetDelay); an
// error injected with FailNext; an error matching informer.ErrExpired for a Revision newer
// than the current one ("too large") or for a continue token whose snapshot is gone
// (compacted, finished or evicted); a plain error for a malformed Revision or token.
func (s *Source[K, V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	if err := s.enter(ctx, Request{Op: OpList, List: opts}); err != nil {
		return informer.List[V]{}, err
	}
	var tok token[K]
	atLeast := int64(-1)
	if opts.Continue != "" {
		var err error
		if tok, err = decodeToken[K](opts.Continue); err != nil {
			return informer.List[V]{}, err
		}
	} else if opts.Revision != "" {
		var err error
		if atLeast, err = s.log.ParseRevision(opts.Revision); err != nil {
			return informer.List[V]{}, err
		}
	}

	var page informer.List[V]
	var err error
	s.log.View(func(st eventlog.State[K, V]) {
		s.mu.Lock()
		defer s.mu.Unlock()
		page, err = s.listLocked(st, opts, tok, atLeast)
	})
	return page, err
}

// listLocked serves a page of the state st; the log's lock and s.mu are held.
func (s *Source[K, V]) listLocked(st eventlog.State[K, V], opts informer.ListOptions, tok token[K], atLeast int64) (informer.List[V], error) {
	s.dropPinsLocked(st.Compacted)
	tree, rev, revStr := st.Tree, st.Rev, st.RevStr
	if opts.Continue != "" {
		p := s.pins[tok.list]
		switch {
		case p != nil && p.rev != tok.rev:
			return informer.List[V]{}, fmt.Errorf("memory: malformed continue token %q: revision does not match the list", opts.Continue)
		case p == nil && tok.rev < st.Compacted:
			return informer.List[V]{}, fmt.Errorf("memory: continue token: %w", s.log.CompactedError(tok.rev, st.Compacted))
		case p == nil:
			return informer.List[V]{}, fmt.Errorf("memory: continue token of a finished or evicted list at revision %d: %w", tok.rev, informer.ErrExpired)
		}
		tree, rev, revStr = p.tree, p.rev, p.revStr
	} else if atLeast > st.Rev {
		return informer.List[V]{}, s.log.TooLarge(atLeast, st.Rev)
	}

	limit := opts.Limit
	if limit <= 0 {
		limit = int64(tree.Len())
	}
	items := make([]V, 0, min(limit, int64(tree.Len())))
	more := false
	var last K
	visit := func(k K, obj V) bool {
		if int64(len(items)) == limit {
			more = true
			return false
		}
		items = append(items, obj)
		last = k
		return true
	}
	if opts.Continue != "" {
		tree.AscendAfter(tok.after, visit) // after the last key served
	} else {
		tree.Ascend(visit)
	}

	page := informer.List[V]{Items: items, Revision: revStr}
	switch {
	case more && opts.Continue == "":
		s.lastPin++
		tok.list = s.lastPin
		s.pins[tok.list] = &pin[K, V]{rev: rev, revStr: revStr, tree: st.Tree.Clone()}
		s.evictPinsLocked()
		fallthrough
	case more:
		page.Continue = encodeToken(token[K]{rev: rev, list: tok.list, after: last})
	case opts.Continue != "":
		delete(s.pins, tok.list) // the last page: the snapshot is no longer needed
	}
	return page, nil
}

// dropPinsLocked drops the snapshots whose revision a compaction has passed.
func (s *Source[K, V]) dropPinsLocked(compacted int64) {
	for id, p := range s.pins {
		if p.rev < compacted {
			delete(s.pins, id)
		}
	}
}

// evictPinsLocked drops the oldest snapshots beyond maxPins.
func (s *Source[K, V]) evictPinsLocked() {
	for len(s.pins) > maxPins {
		oldest := s.lastPin
		for id := range s.pins {
			oldest = min(oldest, id)
		}
		delete(s.pins, oldest)
	}
}

// token is the decoded form of a continue token: the list's pinned revision, the list's
// id (two lists may pin the same revision) and the last key served.
type token[K cmp.Ordered] struct {
	rev   int64
	list  uint64
	after K
}

// encodeToken writes "rev.list.key" and a CRC-32 of it in URL-safe base64. The key is
// encoded exactly (raw bytes for strings, shortest round-trip form for numbers); the
// checksum catches a damaged or hand-made token.
func encodeToken[K cmp.Ordered](t token[K]) string {
	var b []byte
	b = strconv.AppendInt(b, t.rev, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, t.list, 10)
	b = append(b, '.')
	v := reflect.ValueOf(t.after)
	switch v.Kind() {
	case reflect.String:
		b = append(b, v.String()...)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b = strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b = strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		b = strconv.AppendFloat(b, v.Float(), 'g', -1, 64)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeToken parses a token written by encodeToken. Any defect is a plain error: a
// malformed token is the caller's mistake, not a state of the source.
func decodeToken[K cmp.Ordered](s string) (token[K], error) {
	var t token[K]
	bad := func() (token[K], error) {
		return token[K]{}, fmt.Errorf("memory: malformed continue token %q", s)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) < 4 {
		return bad()
	}
	sum := binary.BigEndian.Uint32(raw[len(raw)-4:])
	if raw = raw[:len(raw)-4]; crc32.ChecksumIEEE(raw) != sum {
		return bad()
	}
	revPart, rest, ok1 := strings.Cut(string(raw), ".")
	listPart, keyPart, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return bad()
	}
	if t.rev, err = eventlog.ParseRevision("memory", revPart); err != nil {
		return bad()
	}
	if t.list, err = strconv.ParseUint(listPart, 10, 64); err != nil || t.list == 0 {
		return bad()
	}
	v := reflect.ValueOf(&t.after).Elem()
	switch v.Kind() {
	case reflect.String:
		v.SetString(keyPart)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(keyPart, 10, v.Type().Bits())
		if err != nil {
			return bad()
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := strconv.ParseUint(keyPart, 10, v.Type().Bits())
		if err != nil {
			return bad()
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(keyPart, v.Type().Bits())
		if err != nil {
			return bad()
		}
		v.SetFloat(f)
	}
	return t, nil
}
