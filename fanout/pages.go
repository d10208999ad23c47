package fanout

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/btree"
)

// list answers a list request from a snapshot of the state: a first page clones the
// state tree (O(1)); a paged list keeps its clone, under the client's name, for its later
// pages.
func (s *Server[K, V]) list(client string, req request) (page[*record[K]], error) {
	if req.cont != "" {
		return s.nextPage(client, req)
	}
	tree, rev := s.snapshot(req.filter)
	if req.rv != "" && req.rv != "0" {
		at, err := s.core.revs.listRevision(req.rv)
		if err != nil {
			return page[*record[K]]{}, &requestError{err}
		}
		if n, _ := strconv.ParseInt(at, 10, 64); at != "" && n > rev {
			return page[*record[K]]{}, &requestError{fmt.Errorf("resourceVersion %s is newer than the server's newest revision %s: %w", req.rv, s.onWire(rev), informer.ErrExpired)}
		}
	}
	pg := page[*record[K]]{rev: s.onWire(rev), stale: s.staleAt(rev)}
	if req.limit <= 0 || int64(tree.Len()) <= req.limit {
		pg.items = func(yield func(*record[K]) bool) { tree.Ascend(func(_ K, r *record[K]) bool { return yield(r) }) }
		return pg, nil
	}
	p := &pin[K]{tree: tree, rev: rev, client: client}
	items := p.take(req.limit)
	s.pins.add(p)
	pg.cont = s.token(p)
	pg.items = slices.Values(items)
	return pg, nil
}

// nextPage serves a later page of a paged list from its snapshot; a token of another
// replica, or of a snapshot this one dropped, is served from the state if it is at the
// token's upstream revision (portablePage).
func (s *Server[K, V]) nextPage(client string, req request) (page[*record[K]], error) {
	tok, err := s.core.revs.continueToken(req.cont)
	if err != nil {
		if pg, ok := s.portablePage(client, req); ok {
			return pg, nil
		}
		return page[*record[K]]{}, &requestError{err}
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 2 && len(parts) != 4 {
		return page[*record[K]]{}, &requestError{fmt.Errorf("malformed continue token %q", req.cont)}
	}
	id, err1 := strconv.ParseUint(parts[0], 36, 64)
	seq, err2 := strconv.ParseInt(parts[1], 36, 64)
	if err1 != nil || err2 != nil || seq < 1 {
		return page[*record[K]]{}, &requestError{fmt.Errorf("malformed continue token %q", req.cont)}
	}
	p, err := s.pins.get(id, s.src.CompactedRevision())
	if err != nil {
		if pg, ok := s.portablePage(client, req); ok {
			return pg, nil
		}
		return page[*record[K]]{}, &requestError{fmt.Errorf("continue token %q: %w", req.cont, err)}
	}
	limit := req.limit
	if limit <= 0 {
		limit = math.MaxInt64
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch seq {
	case p.seq: // the next page
	case p.seq - 1: // the last page again (the client retries it)
		p.after, p.started, p.seq = p.prevAfter, p.prevStarted, p.seq-1
	default:
		return page[*record[K]]{}, &requestError{fmt.Errorf("continue token %q is not the next page of its list: %w", req.cont, informer.ErrExpired)}
	}
	items := p.take(limit)
	pg := page[*record[K]]{rev: s.onWire(p.rev), items: slices.Values(items), stale: s.staleAt(p.rev)}
	if p.more {
		pg.cont = s.token(p)
	} else {
		s.pins.remove(p)
	}
	return pg, nil
}

// staleAt returns a check that the log revision rev has left the history.
func (s *Server[K, V]) staleAt(rev int64) func() bool {
	return func() bool { return rev < s.src.CompactedRevision() }
}

func (s *Server[K, V]) onWire(rev int64) string {
	b, _ := s.core.revs.appendWire(nil, strconv.FormatInt(rev, 10))
	return string(b)
}

// token is the continue token of p's next page: the server's tag, the list's id and the
// page's number; over an ordered upstream also the list's upstream revision and the last
// key served, so that a replica at that revision can serve the next page
// (portablePage).
func (s *Server[K, V]) token(p *pin[K]) string {
	b := strconv.AppendUint(nil, p.id, 36)
	b = append(b, '.')
	b = strconv.AppendInt(b, p.seq, 36)
	if key, err := json.Marshal(p.after); s.up != nil && p.started && err == nil {
		b = append(b, '.')
		b = base64.RawURLEncoding.AppendEncode(b, []byte(s.onWire(p.rev)))
		b = append(b, '.')
		b = base64.RawURLEncoding.AppendEncode(b, key)
	}
	return string(s.core.revs.appendContinue(nil, string(b)))
}

// portablePage serves the next page of a list another replica began (behind a
// round-robin balancer), or whose snapshot this one dropped: when the server's state is at
// the token's upstream revision, the page continues after the token's last key.
func (s *Server[K, V]) portablePage(client string, req request) (page[*record[K]], bool) {
	parts := strings.Split(req.cont, ".")
	if s.up == nil || len(parts) != 5 {
		return page[*record[K]]{}, false
	}
	onWire, err1 := base64.RawURLEncoding.DecodeString(parts[3])
	rawKey, err2 := base64.RawURLEncoding.DecodeString(parts[4])
	var after K
	if err1 != nil || err2 != nil || json.Unmarshal(rawKey, &after) != nil {
		return page[*record[K]]{}, false
	}
	tree, rev := s.snapshot(req.filter)
	if s.onWire(rev) != string(onWire) {
		return page[*record[K]]{}, false
	}
	p := &pin[K]{tree: tree, rev: rev, client: client, after: after, started: true, seq: 1}
	limit := req.limit
	if limit <= 0 {
		limit = math.MaxInt64
	}
	items := p.take(limit)
	pg := page[*record[K]]{rev: string(onWire), items: slices.Values(items), stale: s.staleAt(rev)}
	if p.more {
		s.pins.add(p)
		pg.cont = s.token(p)
	}
	return pg, true
}

// pin is the snapshot a paged list reads its later pages from.
type pin[K cmp.Ordered] struct {
	id     uint64
	client string
	tree   *btree.Tree[K, *record[K]]
	rev    int64

	mu          sync.Mutex
	seq         int64 // the number of the next page
	after       K     // the last key served
	started     bool  // a page was served (after is set)
	prevAfter   K     // after and started before the last page, to serve it again
	prevStarted bool
	more        bool // keys remain after after
}

// take returns the next limit records of the list and advances it.
func (p *pin[K]) take(limit int64) []*record[K] {
	items := make([]*record[K], 0, min(limit, int64(p.tree.Len()), 4096))
	p.more = false
	visit := func(_ K, r *record[K]) bool {
		if int64(len(items)) == limit {
			p.more = true
			return false
		}
		items = append(items, r)
		return true
	}
	if p.started {
		p.tree.AscendAfter(p.after, visit)
	} else {
		p.tree.Ascend(visit)
	}
	p.prevAfter, p.prevStarted = p.after, p.started
	if len(items) > 0 {
		p.after, p.started = items[len(items)-1].key, true
	}
	p.seq++
	return items
}

// pinTable holds the snapshots of paged lists, per client.
type pinTable[K cmp.Ordered] struct {
	limit, perClient int

	mu       sync.Mutex
	lastID   uint64
	byID     map[uint64]*pin[K]
	byClient map[string][]*pin[K] // oldest first
}

// add keeps p; the client's own oldest goes if it holds perClient, else the oldest of the
// client holding the most if the table holds limit.
func (t *pinTable[K]) add(p *pin[K]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastID++
	p.id = t.lastID
	if own := t.byClient[p.client]; len(own) >= t.perClient {
		t.removeLocked(own[0])
	}
	if len(t.byID) >= t.limit {
		var most []*pin[K]
		for _, ps := range t.byClient {
			if len(ps) > len(most) || (len(ps) == len(most) && ps[0].id < most[0].id) {
				most = ps
			}
		}
		t.removeLocked(most[0])
	}
	t.byID[p.id] = p
	t.byClient[p.client] = append(t.byClient[p.client], p)
}

// get returns the snapshot of list id, unless it is gone or its revision has left the
// history (then the error matches informer.ErrExpired).
func (t *pinTable[K]) get(id uint64, compacted int64) (*pin[K], error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.byID[id]
	switch {
	case p == nil:
		return nil, fmt.Errorf("the list is finished, or its snapshot was dropped (too many paged lists in progress): %w", informer.ErrExpired)
	case p.rev < compacted:
		t.removeLocked(p)
		return nil, fmt.Errorf("the list's revision has left the server's history: %w", informer.ErrExpired)
	}
	return p, nil
}

func (t *pinTable[K]) remove(p *pin[K]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(p)
}

func (t *pinTable[K]) removeLocked(p *pin[K]) {
	if t.byID[p.id] != p {
		return
	}
	delete(t.byID, p.id)
	own := slices.DeleteFunc(t.byClient[p.client], func(q *pin[K]) bool { return q == p })
	if len(own) == 0 {
		delete(t.byClient, p.client)
	} else {
		t.byClient[p.client] = own
	}
}
