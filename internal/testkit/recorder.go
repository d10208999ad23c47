package testkit

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Recorder is a handler (it has informer.Handler's methods) that records each call as a
// line of the repository's one test notation:
//
//	add k=v        OnAdd, not initial
//	add*k=v        OnAdd of the initial state (the first list, or a replay)
//	update k=a→b   OnUpdate from state a to state b
//	resync k=v     OnUpdate with the same state twice (a resync)
//	delete k=v     OnDelete of an observed delete
//	delete?k=v     OnDelete whose final state is unknown (found gone by a relist)
//
// k and v are what the describe function given to NewRecorder returns for the object.
// It lives here, not in informertest, so that the root package's internal tests can use
// it too (informertest imports the root); informertest.Recorder is this one. It is safe
// for concurrent use: a test reads the calls while an informer runs.
type Recorder[V any] struct {
	Log
	describe func(V) (key, state string)
}

// NewRecorder returns a Recorder that renders objects with describe.
func NewRecorder[V any](describe func(obj V) (key, state string)) *Recorder[V] {
	r := &Recorder[V]{describe: describe}
	r.init()
	return r
}

// WithTimeout is Log.WithTimeout for a Recorder: it returns r.
func (r *Recorder[V]) WithTimeout(d time.Duration) *Recorder[V] {
	r.Log.WithTimeout(d)
	return r
}

// Hold is Log.Hold for a Recorder: it returns r.
func (r *Recorder[V]) Hold() *Recorder[V] {
	r.Log.Hold()
	return r
}

// OnAdd records "add k=v", or "add*k=v" when initial.
func (r *Recorder[V]) OnAdd(obj V, initial bool) { r.record(obj, "add ", "add*", initial) }

// OnUpdate records "update k=old→new", or "resync k=v" when both states are the same.
func (r *Recorder[V]) OnUpdate(old, new V) {
	k, nv := r.describe(new)
	_, ov := r.describe(old)
	if ov == nv {
		r.Record("resync " + k + "=" + nv)
		return
	}
	r.Record("update " + k + "=" + ov + "→" + nv)
}

// OnDelete records "delete k=v", or "delete?k=v" when the final state is unknown.
func (r *Recorder[V]) OnDelete(obj V, finalStateUnknown bool) {
	r.record(obj, "delete ", "delete?", finalStateUnknown)
}

// record records "<kind>k=v" for obj, kind being marked if mark, plain if not.
func (r *Recorder[V]) record(obj V, plain, marked string, mark bool) {
	k, v := r.describe(obj)
	if mark {
		plain = marked
	}
	r.Record(plain + k + "=" + v)
}

// Log is a list of lines a test records, waits on and checks in order: Recorder's calls,
// or what a fake of the test records (a metrics provider's calls). It is safe for
// concurrent use; the zero value is not ready, NewLog makes one.
type Log struct {
	timeout time.Duration
	gate    chan struct{} // when non-nil (Hold), each line waits for a token from Step
	release sync.Once     // closes gate

	mu      sync.Mutex
	calls   []string
	checked int           // the lines Expect, ExpectNext and ExpectNextUnordered have checked
	signal  chan struct{} // receives (without blocking) after each line
}

// NewLog returns an empty Log whose waits fail after WaitLimit.
func NewLog() *Log {
	l := &Log{}
	l.init()
	return l
}

func (l *Log) init() { l.timeout, l.signal = WaitLimit, make(chan struct{}, 1) }

// WithTimeout makes the log's waits fail after d instead of WaitLimit (for tests against
// slow real servers), and returns l. Call it before the log is in use.
func (l *Log) WithTimeout(d time.Duration) *Log {
	l.timeout = d
	return l
}

// Hold makes every later line wait, before it is recorded, until Step lets it through: a
// test holds a handler inside a call to let a queue fill up behind it. Call it before the
// first line; it returns l.
func (l *Log) Hold() *Log {
	l.gate = make(chan struct{})
	return l
}

// Step lets one held call through and returns its line once it is recorded; it fails t
// if no call comes within the recorder's timeout.
func (l *Log) Step(t testing.TB) string {
	t.Helper()
	n := len(l.Calls())
	select {
	case l.gate <- struct{}{}:
	case <-time.After(l.timeout):
		t.Fatalf("waited %v for a held call, have %q", l.timeout, l.Calls())
	}
	return l.WaitFor(t, n+1)[n]
}

// Release lets every held call through, now and later, as if Hold had not been called;
// calling it again does nothing.
func (l *Log) Release() { l.release.Do(func() { close(l.gate) }) }

// Record appends a line of its own (a marker a test wants to see in order with the calls).
func (l *Log) Record(line string) {
	if l.gate != nil {
		<-l.gate
	}
	l.mu.Lock()
	l.calls = append(l.calls, line)
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

// Calls returns the calls recorded so far, in a new slice.
func (l *Log) Calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// Reset forgets the calls recorded so far, and what Expect and ExpectNext checked.
func (l *Log) Reset() {
	l.mu.Lock()
	l.calls, l.checked = nil, 0
	l.mu.Unlock()
}

// Wait waits until at least n calls were recorded and returns them, or returns ctx's
// error with the calls so far. It waits on the calls, never on time.
func (l *Log) Wait(ctx context.Context, n int) ([]string, error) {
	for {
		if got := l.Calls(); len(got) >= n {
			return got, nil
		}
		select {
		case <-l.signal:
		case <-ctx.Done():
			return l.Calls(), ctx.Err()
		}
	}
}

// WaitFor is Wait for a test: it fails t if n calls are not recorded within the
// recorder's timeout (WaitLimit unless WithTimeout changed it).
func (l *Log) WaitFor(t testing.TB, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	got, err := l.Wait(ctx, n)
	if err != nil {
		t.Fatalf("waited %v for %d calls, have %q", l.timeout, n, got)
	}
	return got
}

// WaitForLine waits until line is recorded and returns the calls up to it, failing t if it
// is not within the recorder's timeout: for a test that knows the last call of a run but
// not how many come before it (updates a Coalesce handler may merge).
func (l *Log) WaitForLine(t testing.TB, line string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	for n := 1; ; n++ {
		got, err := l.Wait(ctx, n)
		if err != nil {
			t.Fatalf("waited %v for %q, have %q", l.timeout, line, got)
		}
		if got[n-1] == line {
			return got[:n]
		}
	}
}

// Expect waits for len(want) calls and fails t unless the first ones are exactly want, in
// order. Calls that arrive later are not checked: follow with a barrier (a change whose
// call must come next), or ExpectNoMore once none can come; ExpectNext checks the calls
// after these.
func (l *Log) Expect(t testing.TB, want ...string) {
	t.Helper()
	if got := l.WaitFor(t, len(want))[:len(want)]; !slices.Equal(got, want) {
		t.Fatalf("calls:\n got  %q\n want %q", got, want)
	}
	l.mu.Lock()
	l.checked = len(want)
	l.mu.Unlock()
}

// ExpectNext waits for the len(want) calls after those Expect and ExpectNext checked so
// far, and fails t unless they are exactly want, in order: a test checks a run of changes
// one step at a time with it.
func (l *Log) ExpectNext(t testing.TB, want ...string) {
	t.Helper()
	l.expectNext(t, false, want)
}

// ExpectNextUnordered is ExpectNext for calls whose order is not defined (those of
// different keys in one list): the next len(want) calls are want in any order.
func (l *Log) ExpectNextUnordered(t testing.TB, want ...string) {
	t.Helper()
	l.expectNext(t, true, want)
}

func (l *Log) expectNext(t testing.TB, unordered bool, want []string) {
	t.Helper()
	from := l.Checked()
	got := l.Next(t, len(want))
	g, w := got, want
	if unordered {
		g, w = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	}
	if !slices.Equal(g, w) {
		t.Fatalf("calls after the first %d:\n got  %q\n want %q", from, got, want)
	}
}

// Next waits for the n lines after those checked so far, counts them checked and returns
// them: for a test that looks at lines it cannot name in advance.
func (l *Log) Next(t testing.TB, n int) []string {
	t.Helper()
	from := l.Checked()
	got := l.WaitFor(t, from+n)[from : from+n]
	l.mu.Lock()
	l.checked = from + n
	l.mu.Unlock()
	return got
}

// Checked returns how many calls Expect, ExpectNext and ExpectNextUnordered have checked.
func (l *Log) Checked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checked
}

// ExpectNoMore fails t if a call came after those Expect and ExpectNext checked. It looks
// once: a call still on its way is not seen, so a test makes sure first that none can be
// (a barrier, or a stopped informer).
func (l *Log) ExpectNoMore(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	extra := slices.Clone(l.calls[l.checked:])
	l.mu.Unlock()
	if len(extra) != 0 {
		t.Fatalf("unexpected calls %q", extra)
	}
}

// KeyOf returns the key of a line of the notation ("" for a line of Record's that is
// not one).
func KeyOf(line string) string {
	for _, p := range []string{"add ", "add*", "update ", "resync ", "delete ", "delete?"} {
		if rest, ok := strings.CutPrefix(line, p); ok {
			k, _, _ := strings.Cut(rest, "=")
			return k
		}
	}
	return ""
}

// ByKey groups lines of the notation by their key, keeping their order.
func ByKey(lines []string) map[string][]string {
	m := make(map[string][]string)
	for _, l := range lines {
		k := KeyOf(l)
		m[k] = append(m[k], l)
	}
	return m
}
