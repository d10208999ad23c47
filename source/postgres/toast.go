package postgres

import (
	"context"
	"strings"
	"sync"
)

// bigValueMin is the size from which the source keeps a copy of a column's value.
// PostgreSQL moves a value out of its row (TOAST) only when the row exceeds about 2 KB,
// and an update that leaves such a value unchanged does not send it: the source supplies
// the copy it kept. Values under this size are not kept; an unchanged TOASTed value
// that the source has no copy of is read from the table (see fillUnchanged).
const bigValueMin = 2000

// bigValues keeps, per row key, the values of at least bigValueMin bytes the source last
// received. It costs the size of those values, once more than the cache holds them.
type bigValues struct {
	mu   sync.Mutex
	rows map[string]map[string][]byte
}

func (b *bigValues) reset() {
	b.mu.Lock()
	b.rows = nil
	b.mu.Unlock()
}

// remember keeps the row's big values and drops those it kept of columns that are now
// small.
func (b *bigValues) remember(r *Row) {
	big := false
	for i, v := range r.vals {
		if r.present[i] && len(v) >= bigValueMin {
			big = true
			break
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !big && len(b.rows) == 0 {
		return
	}
	key := r.fullKey()
	kept := b.rows[key]
	if !big {
		delete(b.rows, key)
		return
	}
	if kept == nil {
		kept = map[string][]byte{}
		if b.rows == nil {
			b.rows = map[string]map[string][]byte{}
		}
		b.rows[key] = kept
	}
	for i, v := range r.vals {
		switch {
		case !r.present[i]:
		case len(v) >= bigValueMin:
			kept[r.cols[i].name] = append([]byte(nil), v...)
		default:
			delete(kept, r.cols[i].name)
		}
	}
}

func (b *bigValues) forget(key string) {
	b.mu.Lock()
	delete(b.rows, key)
	b.mu.Unlock()
}

// fill sets the columns of r listed in cols from the values kept for its key, and
// returns those it has no value for.
func (b *bigValues) fill(r *Row, cols []int) (missing []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.rows[r.fullKey()]
	for _, i := range cols {
		if v, ok := kept[r.cols[i].name]; ok {
			r.vals[i], r.present[i] = v, true
		} else {
			missing = append(missing, i)
		}
	}
	return missing
}

// fillUnchanged completes an updated row whose TOASTed columns were sent as unchanged:
// from the values the source kept, else from the table. A value read from the table is
// its newest, which a later change in the stream may already have replaced: that change
// follows, so the cache converges. A row no longer in the table leaves the columns out
// (its delete follows).
func (s *Source[V]) fillUnchanged(ctx context.Context, r *Row, cols []int) {
	missing := s.big.fill(r, cols)
	if len(missing) == 0 {
		return
	}
	conn, err := s.connect(ctx, false)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var sel, where []string
	for _, i := range missing {
		sel = append(sel, quoteIdent(r.cols[i].name)+"::text")
	}
	for i, c := range r.cols {
		if c.key && r.present[i] && r.vals[i] != nil {
			where = append(where, quoteIdent(c.name)+" = "+quoteLiteral(string(r.vals[i])))
		}
	}
	if len(where) == 0 {
		return
	}
	res, err := conn.Exec(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+s.qualified()+" WHERE "+strings.Join(where, " AND ")).ReadAll()
	if err != nil || len(res) == 0 || len(res[0].Rows) == 0 {
		return
	}
	for j, i := range missing {
		r.vals[i], r.present[i] = res[0].Rows[0][j], true
	}
}
