package informer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/testkit"
)

// This file drives the reflector with sources that misbehave: one test per kind of bad
// value a source can hand back, FuzzReflector, which scripts a whole source from the
// fuzzer's bytes, and FuzzListPages, which scripts the pages of a first list. Objects are
// *string ("key=value") here, so that a source can return nil; FuzzListPages uses string.

// discardLogger drops the logs of sources that fail on purpose.
var discardLogger = slog.New(slog.DiscardHandler)

// ptr returns a pointer to s.
func ptr(s string) *string { return &s }

// ptrKey is the key function of *string objects; a nil object has no key.
func ptrKey(o *string) (string, error) {
	if o == nil {
		return "", errors.New("nil object")
	}
	k, _, ok := strings.Cut(*o, "=")
	if !ok {
		return "", fmt.Errorf("no key in %q", *o)
	}
	return k, nil
}

// numericRevisions compares decimal revisions, as a source with ordered revisions does.
type numericRevisions struct{}

func (numericRevisions) CompareRevisions(a, b string) (int, error) {
	x, err := strconv.ParseUint(a, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("revision %q is not a number", a)
	}
	y, err := strconv.ParseUint(b, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("revision %q is not a number", b)
	}
	return cmp.Compare(x, y), nil
}

// orderedLW is a ListerWatcherFuncs with ordered revisions.
type orderedLW struct {
	ListerWatcherFuncs[*string]
	numericRevisions
}

// streamingLW is a ListerWatcherFuncs that asks for streaming lists.
type streamingLW struct{ ListerWatcherFuncs[*string] }

func (streamingLW) StreamingList() bool { return true }

// sliceWatch returns its events, then err (io.EOF if nil), then err again; or, with
// then set, goes on as then.
type sliceWatch struct {
	events []Event[*string]
	err    error
	then   Watch[*string]
}

func (w *sliceWatch) Next() (Event[*string], error) {
	if len(w.events) > 0 {
		ev := w.events[0]
		w.events = w.events[1:]
		return ev, nil
	}
	if w.then != nil {
		return w.then.Next()
	}
	if w.err == nil {
		return Event[*string]{}, io.EOF
	}
	return Event[*string]{}, w.err
}

func (w *sliceWatch) Stop() {
	if w.then != nil {
		w.then.Stop()
	}
}

// newIdleWatch returns a watch that delivers nothing until it is stopped or ctx ends.
func newIdleWatch(ctx context.Context) Watch[*string] { return ChanWatch[*string](ctx, nil, nil) }

// runBadSource runs an informer over lw and returns it, its reported errors and a stop.
func runBadSource(t *testing.T, lw ListerWatcher[*string]) (*Informer[string, *string], *testkit.Errors, *calls) {
	t.Helper()
	reported := &testkit.Errors{}
	inf, err := New[string, *string](lw, Options[string, *string]{
		Key:          ptrKey,
		Backoff:      Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, Jitter: -1},
		ErrorHandler: reported.Report,
		Logger:       discardLogger,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &calls{}
	inf.AddHandler(HandlerFuncs[*string]{
		AddFunc:    func(o *string, _ bool) { h.add("add " + *o) },
		UpdateFunc: func(_, o *string) { h.add("update " + *o) },
		DeleteFunc: func(o *string, _ bool) { h.add("delete " + *o) },
	}, HandlerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return inf, reported, h
}

type calls struct {
	mu   sync.Mutex
	list []string
}

func (c *calls) add(s string) { c.mu.Lock(); c.list = append(c.list, s); c.mu.Unlock() }
func (c *calls) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.list)
}

// waitState polls cond with a deadline, for state that has no event to wait on.
func waitState(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached within 10s: %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// counter counts calls, safe for concurrent use.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) next() int { c.mu.Lock(); defer c.mu.Unlock(); c.n++; return c.n }
func (c *counter) get() int  { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// goodList is the list every test source ends with.
func goodList() List[*string] {
	return List[*string]{Items: []*string{ptr("a=1"), ptr("b=1")}, Revision: "10"}
}

// expectRecovery checks that the bad value was reported as bad input, counted, and that
// the informer relisted and holds the good list.
func expectRecovery(t *testing.T, inf *Informer[string, *string], reported *testkit.Errors, lists *counter, minLists int) {
	t.Helper()
	waitState(t, "bad input reported", func() bool { return len(reported.Matching(ErrBadInput)) > 0 })
	waitState(t, "relisted", func() bool { return lists.get() >= minLists })
	waitState(t, "cache holds the good list", func() bool {
		got := ReadList(inf)
		return len(got) == 2 && *got[0] == "a=1" && *got[1] == "b=1"
	})
	if inf.Stats().SourceErrors == 0 {
		t.Fatal("bad input not counted in Stats.SourceErrors")
	}
}

// A Watch that returns neither a watch nor an error is bad input: reported, counted,
// relisted; no nil dereference. Both in the watch loop and as a streaming list.
func TestReflector_NilWatchIsBadInput(t *testing.T) {
	t.Run("watch", func(t *testing.T) {
		var lists counter
		lw := firstWatchBad(&lists, nil)
		inf, reported, _ := runBadSource(t, lw)
		expectRecovery(t, inf, reported, &lists, 2)
	})
	t.Run("streaming list", func(t *testing.T) {
		var lists, watches counter
		lw := streamingLW{ListerWatcherFuncs[*string]{
			ListFunc: func(ctx context.Context, opts ListOptions) (List[*string], error) {
				lists.next()
				return goodList(), nil
			},
			WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[*string], error) {
				n := watches.next()
				switch {
				case n == 1:
					return nil, nil
				case opts.SendInitialEvents:
					lists.next()
					return &sliceWatch{events: []Event[*string]{
						{Type: Added, Object: ptr("a=1")}, {Type: Added, Object: ptr("b=1")},
						{Type: Bookmark, Revision: "10", EndOfInitialEvents: true},
					}, then: newIdleWatch(ctx)}, nil
				}
				return newIdleWatch(ctx), nil
			},
		}}
		inf, reported, _ := runBadSource(t, lw)
		expectRecovery(t, inf, reported, &lists, 1)
	})
}

// Nil items of a list are skipped and reported as bad input; the rest of the list is used.
func TestReflector_NilListItemsSkipped(t *testing.T) {
	lw := ListerWatcherFuncs[*string]{
		ListFunc: func(ctx context.Context, opts ListOptions) (List[*string], error) {
			return List[*string]{Items: []*string{nil, ptr("a=1"), nil, ptr("b=1")}, Revision: "10"}, nil
		},
		WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[*string], error) {
			return newIdleWatch(ctx), nil
		},
	}
	inf, reported, h := runBadSource(t, lw)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if WaitForCacheSync(ctx, inf) != nil {
		t.Fatal("no sync")
	}
	waitState(t, "handler called", func() bool { return len(h.get()) == 2 })
	if got := h.get(); !slices.Equal(got, []string{"add a=1", "add b=1"}) {
		t.Fatalf("handler calls %q", got)
	}
	bad := reported.Matching(ErrBadInput)
	if len(bad) != 1 || !strings.Contains(bad[0].Error(), "2 nil items skipped in page 0 (the first at index 0)") {
		t.Fatalf("reported %v", reported.All())
	}
	if n := inf.Stats().KeyErrors; n != 0 {
		t.Fatalf("KeyErrors = %d: the key function was called on a nil object", n)
	}
}

// firstWatchBad is a source whose lists (counted in lists) are goodList and whose first
// watch is first (nil: no watch and no error); later watches are idle.
func firstWatchBad(lists *counter, first Watch[*string]) ListerWatcherFuncs[*string] {
	var watches counter
	return ListerWatcherFuncs[*string]{
		ListFunc: func(ctx context.Context, opts ListOptions) (List[*string], error) {
			lists.next()
			return goodList(), nil
		},
		WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[*string], error) {
			if watches.next() == 1 {
				return first, nil
			}
			return newIdleWatch(ctx), nil
		},
	}
}

// A watch event with a nil object is bad input: the watch ends, the informer relists.
func TestReflector_NilEventObjectIsBadInput(t *testing.T) {
	var lists counter
	lw := firstWatchBad(&lists, &sliceWatch{events: []Event[*string]{{Type: Deleted, Revision: "11"}}})
	inf, reported, _ := runBadSource(t, lw)
	expectRecovery(t, inf, reported, &lists, 2)
}

// A source with ordered revisions must give every list a well-formed revision: an empty or
// malformed one is bad input, and the list is not applied.
func TestReflector_ListRevisionMissingIsBadInput(t *testing.T) {
	for _, rev := range []string{"", "ten"} {
		t.Run(strconv.Quote(rev), func(t *testing.T) {
			var lists counter
			lw := orderedLW{ListerWatcherFuncs: ListerWatcherFuncs[*string]{
				ListFunc: func(ctx context.Context, opts ListOptions) (List[*string], error) {
					if lists.next() == 1 {
						return List[*string]{Items: []*string{ptr("x=1")}, Revision: rev}, nil
					}
					return goodList(), nil
				},
				WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[*string], error) {
					return newIdleWatch(ctx), nil
				},
			}}
			inf, reported, h := runBadSource(t, lw)
			expectRecovery(t, inf, reported, &lists, 2)
			waitState(t, "handler called", func() bool { return len(h.get()) >= 2 })
			if got := h.get(); !slices.Equal(got, []string{"add a=1", "add b=1"}) {
				t.Fatalf("handler calls %q: the list without a revision was applied", got)
			}
		})
	}
}

// An event with no type (the zero EventType) is bad input.
func TestReflector_ZeroEventTypeIsBadInput(t *testing.T) {
	var lists counter
	lw := firstWatchBad(&lists, &sliceWatch{events: []Event[*string]{{Object: ptr("a=2"), Revision: "11"}}})
	inf, reported, _ := runBadSource(t, lw)
	expectRecovery(t, inf, reported, &lists, 2)
}

// Continue tokens that repeat, cycle or never end: the list fails as bad input (within
// MaxListPages pages) and the informer lists again.
func TestReflector_EndlessPagesAreBadInput(t *testing.T) {
	cases := map[string]func(page int) string{
		"repeat":       func(int) string { return "same" },
		"cycle of 3":   func(page int) string { return "t" + strconv.Itoa(page%3) },
		"cycle of 700": func(page int) string { return "t" + strconv.Itoa(page%700) },
		"never ends":   func(page int) string { return "t" + strconv.Itoa(page) },
	}
	for name, token := range cases {
		t.Run(name, func(t *testing.T) {
			var lists counter
			var mu sync.Mutex
			page := 0
			lw := ListerWatcherFuncs[*string]{
				ListFunc: func(ctx context.Context, opts ListOptions) (List[*string], error) {
					if opts.Continue == "" && lists.next() > 1 {
						return goodList(), nil
					}
					mu.Lock()
					defer mu.Unlock()
					if page++; page > MaxListPages+1 {
						t.Error("the list was not bounded to MaxListPages")
						return List[*string]{}, errors.New("unbounded list")
					}
					return List[*string]{Items: []*string{ptr("x=" + strconv.Itoa(page%5))}, Revision: "5", Continue: token(page)}, nil
				},
				WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[*string], error) {
					return newIdleWatch(ctx), nil
				},
			}
			inf, reported, _ := runBadSource(t, lw)
			expectRecovery(t, inf, reported, &lists, 2)
			mu.Lock()
			defer mu.Unlock()
			if name != "never ends" && page > 4*700 {
				t.Fatalf("cycle found after %d pages", page)
			}
		})
	}
}

// FuzzReflector drives a full informer over a source scripted by the fuzzer's bytes: pages
// (with nil items, missing or malformed revisions, repeating continue tokens), watches
// (events of every type and none, nil objects, revisions that go back or do not parse,
// endings with every error class), nil watches, watches returned with an error. Once the
// script is spent the source behaves: its first watch answers expired, every list returns
// the final state. The informer must not panic, and must end with the cache and its
// handler equal to the final state.
//
// The first byte chooses the source's kind (bit 0: ordered revisions, bit 1: streaming
// lists); each later List or Watch call takes the next byte (and a watch the bytes of its
// events, up to an end byte).
func FuzzReflector(f *testing.F) {
	f.Add([]byte{0, 2, 3, 1, 2, 6})
	f.Add([]byte{1, 2, 0, 3, 9, 17, 33, 6})
	f.Add([]byte{1, 0x2a, 3, 0x51, 0x12, 0x23, 0x04, 0x0f})
	f.Add([]byte{2, 4, 3, 1, 4, 6, 7, 2})
	f.Add([]byte{3, 5, 0, 3, 5, 6, 4, 1, 9, 6})
	f.Add([]byte{1, 3, 4, 2, 7, 5, 6, 0xff, 0x17})
	f.Add([]byte{0, 4, 4, 4, 2, 3, 0x10, 0x21, 0x3b, 0x4c, 0x0e})
	f.Add([]byte{1, 1, 2, 3, 0x11, 0x12, 0x03, 0x07, 3, 0x28, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || len(data) > 96 {
			return
		}
		kind, script := data[0], data[1:]
		final := []string{"a=final", "c=final"}
		finalRev := "1000"

		var mu sync.Mutex
		pos, cleanWatches := 0, 0
		take := func() (byte, bool) {
			if pos >= len(script) {
				return 0, false
			}
			b := script[pos]
			pos++
			return b, true
		}
		rev := func(b byte) string {
			switch b % 11 {
			case 9:
				return ""
			case 10:
				return "r" + strconv.Itoa(int(b))
			}
			return strconv.Itoa(int(b>>3) + int(b%11))
		}
		obj := func(b byte) *string {
			if b%13 == 0 {
				return nil
			}
			return ptr(string(rune('a'+b%5)) + "=" + strconv.Itoa(int(b)))
		}
		list := func(ctx context.Context, opts ListOptions) (List[*string], error) {
			mu.Lock()
			defer mu.Unlock()
			b, ok := take()
			if !ok {
				return List[*string]{Items: []*string{ptr(final[0]), ptr(final[1])}, Revision: finalRev}, nil
			}
			switch b & 7 {
			case 0:
				return List[*string]{}, errors.New("scripted list failure")
			case 1:
				return List[*string]{}, fmt.Errorf("scripted: %w", ErrExpired)
			case 2:
				return List[*string]{}, RetryAfter(ErrTooManyRequests, time.Millisecond)
			}
			page := List[*string]{Revision: rev(b >> 3)}
			for i := range int(b>>3)%4 + 1 {
				page.Items = append(page.Items, obj(b+byte(i)*7))
			}
			switch b & 7 {
			case 3:
				page.Continue = "again" // repeats if the next page is a 3 too
			case 4:
				page.Continue = "p" + strconv.Itoa(pos)
			case 5:
				page.Items = append(page.Items, nil)
			}
			return page, nil
		}
		watch := func(ctx context.Context, opts WatchOptions) (Watch[*string], error) {
			mu.Lock()
			defer mu.Unlock()
			b, ok := take()
			if !ok {
				if cleanWatches++; cleanWatches == 1 {
					return nil, fmt.Errorf("scripted: %w", ErrExpired)
				}
				if opts.SendInitialEvents {
					return &sliceWatch{events: []Event[*string]{
						{Type: Added, Object: ptr(final[0])}, {Type: Added, Object: ptr(final[1])},
						{Type: Bookmark, Revision: finalRev, EndOfInitialEvents: true},
					}, then: newIdleWatch(ctx)}, nil
				}
				return newIdleWatch(ctx), nil
			}
			switch b & 7 {
			case 0:
				return nil, nil
			case 1:
				return nil, fmt.Errorf("scripted: %w", ErrExpired)
			case 2:
				return nil, ErrUnavailable
			case 5:
				return newIdleWatch(ctx), errors.New("scripted: a watch and an error")
			case 6:
				return nil, fmt.Errorf("scripted: %w", ErrNotSupported)
			}
			w := &sliceWatch{}
			for {
				e, ok := take()
				if !ok {
					return w, nil
				}
				ev := Event[*string]{Revision: rev(e >> 3), Object: obj(e)}
				switch e & 7 {
				case 0:
					ev.Type = 0
				case 1, 2, 3:
					ev.Type = EventType(e & 7)
				case 4:
					ev.Type = Bookmark
					ev.EndOfInitialEvents = e&8 != 0
				case 5:
					ev.Type = EventType(5 + e>>5)
				case 6:
					return w, nil // io.EOF
				case 7:
					if e&8 != 0 {
						w.err = fmt.Errorf("scripted: %w", ErrExpired)
					} else {
						w.err = ErrConnectionRefused
					}
					return w, nil
				}
				w.events = append(w.events, ev)
			}
		}
		funcs := ListerWatcherFuncs[*string]{ListFunc: list, WatchFunc: watch}
		var lw ListerWatcher[*string] = funcs
		switch kind & 3 {
		case 1:
			lw = orderedLW{ListerWatcherFuncs: funcs}
		case 2:
			lw = streamingLW{funcs}
		case 3:
			lw = struct {
				streamingLW
				numericRevisions
			}{streamingLW{funcs}, numericRevisions{}}
		}

		inf, err := New[string, *string](lw, Options[string, *string]{
			Key:          ptrKey,
			Backoff:      Backoff{Initial: 50 * time.Microsecond, Max: 200 * time.Microsecond, Jitter: -1},
			ErrorHandler: func(error) {},
			Logger:       discardLogger,
		})
		if err != nil {
			t.Fatal(err)
		}
		h := &lifeCycle{last: map[string]string{}}
		inf.AddHandler(HandlerFuncs[*string]{
			AddFunc:    func(o *string, initial bool) { h.OnAdd(*o, initial) },
			UpdateFunc: func(old, o *string) { h.OnUpdate(*old, *o) },
			DeleteFunc: func(o *string, unknown bool) { h.OnDelete(*o, unknown) },
		}, HandlerOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		defer func() { cancel(); <-done }()
		for {
			last, errs := h.state()
			if len(errs) > 0 {
				t.Fatalf("script %x: handler: %s", data, strings.Join(errs, "; "))
			}
			var got []string
			for _, o := range ReadList(inf) {
				got = append(got, *o)
			}
			if slices.Equal(got, final) && slices.Equal(slices.Sorted(maps.Values(last)), final) && inf.Stats().ReceivedRevision == finalRev {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("script %x: no convergence to the final state: cache %q at %q, handler %v", data, got, inf.Stats().ReceivedRevision, last)
			}
			time.Sleep(100 * time.Microsecond) // polling: nothing signals "handler caught up"
		}
	})
}

// warnLines counts the Warn records of a logger.
type warnLines struct {
	mu    sync.Mutex
	lines []string
}

func (h *warnLines) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnLines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "kind" {
			h.lines = append(h.lines, a.Value.String())
		}
		return true
	})
	return nil
}
func (h *warnLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnLines) WithGroup(string) slog.Handler      { return h }

// Source failures are logged at Warn at most once per kind (operation and error class)
// per backoff step; every one is still reported and kept as the last error.
func TestReflector_WarnRateLimitedPerKindAndStep(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	logs := &warnLines{}
	var reported int
	r := newReflectorOf[string](ListerWatcherFuncs[string]{}, nil, reflectorConfig{
		name:    "payments",
		backoff: Backoff{Initial: time.Second, Jitter: -1},
		clock:   fc,
		logger:  slog.New(logs),
		report:  func(error) { reported++ },
	})
	list := func() error { return r.opErr("list", ErrUnavailable) }
	r.fail(list())
	r.fail(list())                                   // same kind, same step: not logged
	r.fail(r.opErr("watch", ErrUnavailable))         // another operation
	r.fail(r.opErr("list", errors.New("forbidden"))) // another class
	fc.Step(999 * time.Millisecond)
	r.fail(list()) // still within the step
	fc.Step(time.Millisecond)
	r.fail(list()) // a step later
	want := []string{"list: retryable", "watch: retryable", "list: other", "list: retryable"}
	if !slices.Equal(logs.lines, want) || reported != 6 {
		t.Fatalf("Warn lines %q (want %q), reported %d (want 6)", logs.lines, want, reported)
	}
	if at, err := r.LastError(); !errors.Is(err, ErrUnavailable) || !at.Equal(time.Unix(1, 0)) {
		t.Fatalf("lastError %v at %v", err, at)
	}
}

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
				t.Fatalf("pages %+v: cache %q after the list, want the last occurrence of each key %q", pages, got, want)
			}
		}
		close(release)
		for {
			last, errs := h.state()
			if len(errs) > 0 {
				t.Fatalf("pages %+v: handler: %s", pages, strings.Join(errs, "; "))
			}
			got := ReadList(inf)
			if slices.Equal(got, valid) && slices.Equal(slices.Sorted(maps.Values(last)), valid) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("pages %+v: no convergence to the valid list: cache %q, handler %v", pages, got, last)
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

// A list of another history (a source restored from a backup) at a revision older than
// the cache had reached moves WaitForRevision back with the cache: a revision between the
// two is waited for again, not taken as reached by the history that was left.
func TestReflector_OtherHistoryListMovesWaitForRevisionBack(t *testing.T) {
	var lists counter
	lw := orderedLW{ListerWatcherFuncs: ListerWatcherFuncs[*string]{
		ListFunc: func(ctx context.Context, opts ListOptions) (List[*string], error) {
			if lists.next() == 1 {
				return List[*string]{Items: []*string{ptr("a=1")}, Revision: "10"}, nil
			}
			return List[*string]{Items: []*string{ptr("a=restored")}, Revision: "5"}, nil
		},
		WatchFunc: func(ctx context.Context, opts WatchOptions) (Watch[*string], error) {
			if opts.Revision == "20" {
				return nil, fmt.Errorf("%w: the source went back to revision 5", ErrOtherHistory)
			}
			if opts.Revision == "10" {
				return &sliceWatch{events: []Event[*string]{{Type: Modified, Object: ptr("a=2"), Revision: "20"}},
					err: fmt.Errorf("%w: the source went back to revision 5", ErrOtherHistory)}, nil
			}
			return newIdleWatch(ctx), nil
		},
	}}
	inf, _, _ := runBadSource(t, lw)
	waitState(t, "the relist of the restored source applied", func() bool {
		o, ok := inf.Get("a")
		return ok && *o == "a=restored"
	})
	if got := inf.Snapshot().Revision(); got != "5" {
		t.Fatalf("snapshot revision %q after the relist, want 5", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := inf.WaitForRevision(ctx, "7"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForRevision(7) on a cache at revision 5 of the new history: %v, want it to wait", err)
	}
}
