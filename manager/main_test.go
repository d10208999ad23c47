package manager_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/memory"
)

// TestMain fails the package if a test leaves a goroutine behind: a cache, a runnable, a
// campaign loop, a timer.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

// newManager returns a manager configured by opts.
func newManager(t *testing.T, opts manager.Options) *manager.Manager {
	t.Helper()
	m, err := manager.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// recv waits for a value from ch, failing the test after waitLimit.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testkit.Recv(t, ch, what)
}

// eventually polls cond until it holds, for the few states nothing can be waited on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Until(t, what, 5*time.Millisecond, cond)
}

type thing struct{ Name, Value string }

func thingKey(t *thing) string { return t.Name }

// newInformer returns an informer named name over lw.
func newInformer(t *testing.T, name string, lw informer.ListerWatcher[*thing]) *informer.Informer[string, *thing] {
	t.Helper()
	inf, err := informer.New(lw, informer.Options[string, *thing]{
		Name:   name,
		Key:    func(o *thing) (string, error) { return o.Name, nil },
		Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// recordedCache records when its Run returns.
type recordedCache struct {
	manager.Cache
	ev *testkit.Log
}

func (c recordedCache) Run(ctx context.Context) error {
	err := c.Cache.Run(ctx)
	c.ev.Record(fmt.Sprintf("stop informer %s", c.Name()))
	return err
}

// toggle is a source that fails every call while failing is set.
type toggle struct {
	*memory.Source[string, *thing]
	failing atomic.Bool
}

func (s *toggle) List(ctx context.Context, opts informer.ListOptions) (informer.List[*thing], error) {
	if s.failing.Load() {
		return informer.List[*thing]{}, fmt.Errorf("test source down: %w", informer.ErrUnavailable)
	}
	return s.Source.List(ctx, opts)
}

func (s *toggle) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*thing], error) {
	if s.failing.Load() {
		return nil, fmt.Errorf("test source down: %w", informer.ErrUnavailable)
	}
	return s.Source.Watch(ctx, opts)
}

func newToggle() *toggle { return &toggle{Source: memory.New(thingKey, memory.Options{})} }

// started is a manager running in the background.
type started struct {
	cancel context.CancelFunc
	done   chan error
	err    error
	once   sync.Once
}

// start runs m.Start until the test ends or stop is called.
func start(t *testing.T, m *manager.Manager) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- m.Start(ctx) }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop cancels Start's context and returns what Start returned.
func (s *started) stop(t *testing.T) error {
	t.Helper()
	s.once.Do(func() {
		s.cancel()
		s.err = recv(t, s.done, "Start to return")
	})
	return s.err
}

// probe GETs path from h and returns the status and body.
func probe(h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// fakeElector hands out the terms a test pushes, one per Campaign.
type fakeElector struct {
	grants    chan manager.Leadership
	campaigns atomic.Int32
}

func newFakeElector() *fakeElector { return &fakeElector{grants: make(chan manager.Leadership, 10)} }

func (e *fakeElector) Campaign(ctx context.Context) (manager.Leadership, error) {
	e.campaigns.Add(1)
	select {
	case l := <-e.grants:
		return l, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fakeTerm is a term the test ends by closing lost.
type fakeTerm struct {
	term     manager.Term
	lost     chan struct{}
	resigned chan struct{}
	once     sync.Once
	renewed  time.Time
	deadline time.Duration
	expires  time.Time
}

func newFakeTerm(value int64) *fakeTerm {
	return &fakeTerm{
		term:     manager.Term{Key: "/election/" + fmt.Sprint(value), Holder: "me", Value: value},
		lost:     make(chan struct{}),
		resigned: make(chan struct{}),
		renewed:  time.Now().Add(time.Hour), // renewing: never late
		deadline: time.Second,
	}
}

func (f *fakeTerm) Term() manager.Term           { return f.term }
func (f *fakeTerm) Lost() <-chan struct{}        { return f.lost }
func (f *fakeTerm) Renewed() time.Time           { return f.renewed }
func (f *fakeTerm) RenewDeadline() time.Duration { return f.deadline }
func (f *fakeTerm) Expires() time.Time           { return f.expires }
func (f *fakeTerm) Resign(context.Context) error {
	f.once.Do(func() { close(f.resigned) })
	return nil
}

var errTest = errors.New("test failure")

func contains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}
