package informer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lifeCycle is a handler that checks the life cycle of every key (no add on top of an add,
// no update or delete of a key it was not told of) and records each key's last state.
type lifeCycle struct {
	mu   sync.Mutex
	last map[string]string // key → last object; absent once deleted
	errs []string
}

func (h *lifeCycle) OnAdd(o string, _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, _, _ := strings.Cut(o, "=")
	if prev, ok := h.last[k]; ok {
		h.errs = append(h.errs, fmt.Sprintf("add %s on top of %s", o, prev))
	}
	h.last[k] = o
}

func (h *lifeCycle) OnUpdate(old, o string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, _, _ := strings.Cut(o, "=")
	if prev, ok := h.last[k]; !ok || prev != old {
		h.errs = append(h.errs, fmt.Sprintf("update %s→%s, last seen %q (known %v)", old, o, prev, ok))
	}
	h.last[k] = o
}

func (h *lifeCycle) OnDelete(o string, _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, _, _ := strings.Cut(o, "=")
	if _, ok := h.last[k]; !ok {
		h.errs = append(h.errs, fmt.Sprintf("delete %s of a key never added", o))
	}
	delete(h.last, k)
}

func (h *lifeCycle) state() (map[string]string, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.last), slices.Clone(h.errs)
}

// FuzzListPages feeds the informer a first list made of fuzzed pages: duplicate keys,
// unordered keys, empty pages, objects whose key function fails, pages reporting another
// revision. The informer must not panic; if it accepted the list, the cache holds the last
// occurrence of every valid key; handlers keep a valid life cycle; and after the watch
// expires, the next (valid) list is what the cache and every handler converge to.
//
// Input bytes: 0xFF ends a page, 0xFE is an object with no key, 0xFD makes the next page
// report another revision; any other byte b is the object "<'a'+b%6>=<position>".
func FuzzListPages(f *testing.F) {
	f.Add([]byte{0, 1, 2})
	f.Add([]byte{2, 1, 0, 0xFF, 1, 1, 0xFF, 0xFF, 5})
	f.Add([]byte{0, 0xFE, 0, 0xFF, 0xFD, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64 {
			data = data[:64]
		}
		var pages []List[string]
		page := List[string]{Revision: "5"}
		malformed := false
		lastWins := map[string]string{}
		for i, b := range data {
			switch b {
			case 0xFF:
				pages = append(pages, page)
				page = List[string]{Revision: "5"}
			case 0xFE:
				page.Items = append(page.Items, "no key")
			case 0xFD:
				malformed = true
				pages = append(pages, page)
				page = List[string]{Revision: "6"}
			default:
				o := string(rune('a'+b%6)) + "=" + strconv.Itoa(i)
				page.Items = append(page.Items, o)
				lastWins[o[:1]] = o
			}
		}
		pages = append(pages, page)
		for i := range pages[:len(pages)-1] {
			pages[i].Continue = "p" + strconv.Itoa(i+1)
		}
		valid := []string{"a=v", "c=v", "e=v"}

		var mu sync.Mutex
		listStarts, watches := 0, 0
		release := make(chan struct{})
		lw := ListerWatcherFuncs[string]{
			ListFunc: func(ctx context.Context, opts ListOptions) (List[string], error) {
				mu.Lock()
				defer mu.Unlock()
				if opts.Continue == "" {
					listStarts++
				}
				if listStarts > 1 {
					return List[string]{Items: slices.Clone(valid), Revision: "10"}, nil
				}
				i := 0
				if opts.Continue != "" {
					i, _ = strconv.Atoi(opts.Continue[1:])
				}
				p := pages[i]
				p.Items = slices.Clone(p.Items)
				return p, nil
			},
			WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[string], error) {
				mu.Lock()
				watches++
				first := watches == 1
				mu.Unlock()
				if first {
					// The watch after the fuzzed list expires once released: a relist follows.
					return expiringWatch(ctx, release), nil
				}
				return ChanWatch[string](ctx, nil, nil), nil
			},
		}
		inf, err := New[string, string](lw, Options[string, string]{
			Key: func(s string) (string, error) {
				k, _, ok := strings.Cut(s, "=")
				if !ok {
					return "", fmt.Errorf("no key in %q", s)
				}
				return k, nil
			},
			Backoff:      Backoff{Initial: 100 * time.Microsecond, Max: time.Millisecond, Jitter: -1},
			ErrorHandler: func(error) {},
		})
		if err != nil {
			t.Fatal(err)
		}
		h := &lifeCycle{last: map[string]string{}}
		inf.AddHandler(h, HandlerOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		defer func() { cancel(); <-done }()
		if WaitForCacheSync(ctx, inf) != nil {
			t.Fatal("no sync")
		}
		if !malformed {
			var want []string
			for _, k := range slices.Sorted(maps.Keys(lastWins)) {
				want = append(want, lastWins[k])
			}
			if got := ReadList(inf); !slices.Equal(got, want) {
				t.Fatalf("pages %q: cache %q after the list, want the last occurrence of each key %q", pages, got, want)
			}
		}
		close(release)
		for {
			last, errs := h.state()
			if len(errs) > 0 {
				t.Fatalf("pages %q: handler: %s", pages, strings.Join(errs, "; "))
			}
			got := ReadList(inf)
			if slices.Equal(got, valid) && slices.Equal(slices.Sorted(maps.Values(last)), valid) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("pages %q: no convergence to the valid list: cache %q, handler %v", pages, got, last)
			}
			time.Sleep(100 * time.Microsecond) // polling: nothing signals "handler caught up"
		}
	})
}

// expiringWatch returns a watch that fails with ErrExpired once release is closed.
func expiringWatch(ctx context.Context, release <-chan struct{}) Watch[string] {
	return FuncWatch(func() (Event[string], error) {
		select {
		case <-release:
			return Event[string]{}, ErrExpired
		case <-ctx.Done():
			return Event[string]{}, ctx.Err()
		}
	}, nil)
}
