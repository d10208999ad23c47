package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/informer-go/informer"
)

// Op is a kind of call to a Source, for FailNext and Requests.
type Op int

// The kinds of calls.
const (
	// OpList is a List call.
	OpList Op = iota + 1
	// OpWatch is a Watch call.
	OpWatch
	// OpAny matches both List and Watch calls; FailNext only.
	OpAny
)

// String returns "List", "Watch" or "Any".
func (o Op) String() string {
	switch o {
	case OpList:
		return "List"
	case OpWatch:
		return "Watch"
	case OpAny:
		return "Any"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Request is one List or Watch call as Requests records it: Op is OpList or OpWatch, and
// the options of that kind are set (the other field is zero).
type Request struct {
	// Op is the kind of call: OpList or OpWatch.
	Op Op
	// List holds the options of a List call (zero for a Watch).
	List informer.ListOptions
	// Watch holds the options of a Watch call (zero for a List).
	Watch informer.WatchOptions
}

// failRule is one FailNext: the next n calls of kind op fail with err.
type failRule struct {
	n   int
	op  Op
	err error
}

// FailNext makes the next n List or Watch calls of kind op (OpList, OpWatch or OpAny) fail
// with err, or with informer.ErrUnavailable if err is nil. Rules add up and are consumed in
// the order they were made: a call takes the oldest rule that matches it. A failing call is
// still recorded by Requests and still waits the delay set with SetDelay. n <= 0, or an op
// that is none of the three, does nothing.
func (s *Source[K, V]) FailNext(n int, op Op, err error) {
	if n <= 0 || op < OpList || op > OpAny {
		return
	}
	if err == nil {
		err = informer.ErrUnavailable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails = append(s.fails, failRule{n: n, op: op, err: err})
}

// SetDelay makes every later List and Watch call wait d on the Options clock before it is
// served, as a slow server would; a call whose context ends meanwhile returns ctx.Err().
// Each delayed call arms one timer, so a test on a clock.Fake can wait for it with
// WaitForWaiters and then Step. d <= 0 removes the delay.
func (s *Source[K, V]) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = max(d, 0)
}

// DropWatches ends every open watch at once: its next Next (or the one blocked now)
// returns err, or io.EOF if err is nil, and whatever it had not delivered yet is
// abandoned, as when a server closes a connection. The consumer is expected to watch
// again from the last revision it received. Dropped watches no longer count as open.
func (s *Source[K, V]) DropWatches(err error) { s.log.DropWatches(err) }

// Inject sends ev, exactly as given, to every open watch, without changing the state or the
// revision. Each watch delivers it after the log events it had not yet delivered when
// Inject was called. Use it to test how a consumer handles bad input: an event with an
// old revision, an unknown EventType, a malformed revision.
func (s *Source[K, V]) Inject(ev informer.Event[V]) { s.log.Inject(ev) }

// Bookmark sends a Bookmark at the current revision to every open watch that allows
// bookmarks (WatchOptions.AllowBookmarks), after the log events it had not yet delivered.
func (s *Source[K, V]) Bookmark() { s.log.Bookmark() }

// Requests returns every List and Watch call made so far (the newest
// Options.KeepRequests of them, if set), in the order they were made, including those
// that failed or were delayed, in a new slice that belongs to the caller.
func (s *Source[K, V]) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	reqs := s.requests
	if keep := s.opts.KeepRequests; keep > 0 && len(reqs) > keep {
		reqs = reqs[len(reqs)-keep:]
	}
	return append([]Request(nil), reqs...)
}

// OpenWatches returns the number of open watches: those returned by Watch that have not
// been stopped or dropped and whose Next has not returned an error. A watch whose context
// was cancelled or whose timeout passed counts until its Next (or Stop) notices.
func (s *Source[K, V]) OpenWatches() int { return s.log.OpenWatches() }

// WaitForWatches blocks until at least n watches are open (see OpenWatches) and returns
// nil, or returns ctx.Err() once ctx is done. It waits on a channel that each new watch
// closes, without polling, so tests use it instead of sleeping.
func (s *Source[K, V]) WaitForWatches(ctx context.Context, n int) error {
	return s.log.WaitForWatches(ctx, n)
}

// enter is the common start of List and Watch: it records the call, takes an injected
// failure if one is due, waits the delay, and checks ctx.
func (s *Source[K, V]) enter(ctx context.Context, r Request) error {
	s.mu.Lock()
	if keep := s.opts.KeepRequests; keep >= 0 {
		if keep > 0 && len(s.requests) >= 2*keep {
			s.requests = append(s.requests[:0], s.requests[len(s.requests)-keep+1:]...)
		}
		s.requests = append(s.requests, r)
	}
	var fail error
	for i := range s.fails {
		f := &s.fails[i]
		if f.op == OpAny || f.op == r.Op {
			fail = f.err
			if f.n--; f.n == 0 {
				s.fails = append(s.fails[:i], s.fails[i+1:]...)
			}
			break
		}
	}
	delay := s.delay
	s.mu.Unlock()

	if delay > 0 {
		t := s.clock.NewTimer(delay)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fail
}
