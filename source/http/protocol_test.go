package httpsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wiretest"
)

// A Retry-After on a list failure is honoured: the client sends nothing before it passes
// (the informer's own backoff here is a few milliseconds).
func TestClientHonoursRetryAfter(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	first := true
	ch := make(chan struct{}, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		refuse := first
		first = false
		mu.Unlock()
		select {
		case ch <- struct{}{}:
		default:
		}
		if refuse {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Query().Get("watch") != "" {
			stream()(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, listBody("1", o("a", "1")))
	}))
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{}), "client", nil)
	wiretest.Converge(t, d, func() string { return "a=1" })
	mu.Lock()
	defer mu.Unlock()
	if gap := at[1].Sub(at[0]); gap < time.Second {
		t.Errorf("second request %v after a 503 with Retry-After: 1", gap)
	}
	if !d.Rec.HasError(informer.ErrUnavailable) {
		t.Errorf("errors %v: want the 503 reported", d.Rec.Errors())
	}
}

// HTTP statuses, ERROR events and transport failures map to the informer's error classes.
func TestClientErrorClasses(t *testing.T) {
	type class struct{ expired, retryable, tooMany, unavailable bool }
	for _, tc := range []struct {
		status int
		retry  string
		want   class
		after  time.Duration
	}{
		{400, "", class{}, 0},
		{401, "", class{}, 0},
		{403, "", class{}, 0},
		{404, "", class{}, 0},
		{410, "", class{expired: true}, 0},
		{429, "7", class{retryable: true, tooMany: true}, 7 * time.Second},
		{500, "", class{retryable: true}, 0},
		{502, "", class{retryable: true}, 0},
		{503, "2", class{retryable: true, unavailable: true}, 2 * time.Second},
		{504, "", class{retryable: true}, 0},
	} {
		h := func(w http.ResponseWriter, r *http.Request) {
			if tc.retry != "" {
				w.Header().Set("Retry-After", tc.retry)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tc.status)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","message":"nope","reason":"Whatever","code":`+fmt.Sprint(tc.status)+`}`)
		}
		ts := httptest.NewServer(http.HandlerFunc(h))
		// Two clients: after a Retry-After, one client would wait before its next request.
		_, lerr := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{}).List(context.Background(), informer.ListOptions{})
		_, werr := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{}).Watch(context.Background(), informer.WatchOptions{Revision: "1"})
		ts.Close()
		for _, err := range []error{lerr, werr} {
			got := class{
				expired: errors.Is(err, informer.ErrExpired), retryable: errors.Is(err, informer.ErrRetryable),
				tooMany: errors.Is(err, informer.ErrTooManyRequests), unavailable: errors.Is(err, informer.ErrUnavailable),
			}
			var se *StatusError
			d, _ := informer.RetryAfterOf(err)
			if got != tc.want || d != tc.after || !errors.As(err, &se) || se.Code != tc.status || se.Message != "nope" {
				t.Errorf("%d: %v: class %+v, retry after %v; want %+v, %v", tc.status, err, got, d, tc.want, tc.after)
			}
		}
	}

	// ERROR events, Kubernetes style (code in the Status; reason only for old servers).
	for _, tc := range []struct {
		status string
		check  func(error) bool
	}{
		{`{"kind":"Status","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}`, func(err error) bool { return errors.Is(err, informer.ErrExpired) }},
		{`{"kind":"Status","reason":"Gone"}`, func(err error) bool { return errors.Is(err, informer.ErrExpired) }},
		{`{"kind":"Status","reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":4}}`, func(err error) bool {
			d, _ := informer.RetryAfterOf(err)
			return errors.Is(err, informer.ErrTooManyRequests) && d == 4*time.Second
		}},
		{`{"kind":"Status","reason":"InternalError","code":500}`, func(err error) bool { return errors.Is(err, informer.ErrRetryable) }},
		{`{"kind":"Status","reason":"Forbidden","code":403}`, func(err error) bool {
			var se *StatusError
			return errors.As(err, &se) && se.Code == 403 && !errors.Is(err, informer.ErrRetryable)
		}},
	} {
		_, ts := newFake(t, []string{listBody("1")}, stream(`{"type":"ERROR","object":`+tc.status+"}\n"))
		w, err := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{}).Watch(context.Background(), informer.WatchOptions{Revision: "1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Next(); !tc.check(err) {
			t.Errorf("ERROR %s: %v", tc.status, err)
		}
		w.Stop()
	}

	// A refused connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = newTestClient(t, "http://"+addr, ClientOptions[*wiretest.Obj]{}).Watch(context.Background(), informer.WatchOptions{})
	if !errors.Is(err, informer.ErrConnectionRefused) || !errors.Is(err, informer.ErrRetryable) {
		t.Errorf("refused: %v", err)
	}
	// A request hook that fails.
	hookErr := errors.New("no token")
	_, err = newTestClient(t, "http://"+addr, ClientOptions[*wiretest.Obj]{PrepareRequest: func(*http.Request) error { return hookErr }}).
		List(context.Background(), informer.ListOptions{})
	if !errors.Is(err, hookErr) {
		t.Errorf("hook: %v", err)
	}
}

// A Retry-After beyond MaxRetryAfter is cut to it: the error carries the capped delay
// and the client waits no longer than that before its next request.
func TestClientRetryAfterCap(t *testing.T) {
	var mu sync.Mutex
	refuse := true
	ts := wiretest.ServeFunc(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		no := refuse
		refuse = false
		mu.Unlock()
		if no {
			w.Header().Set("Retry-After", "99999999")
			http.Error(w, "later", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, listBody("1", o("a", "1")))
	})
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})
	_, err := c.List(context.Background(), informer.ListOptions{})
	if d, ok := informer.RetryAfterOf(err); !ok || d != DefaultMaxRetryAfter {
		t.Fatalf("retry after %v (%v), want the default cap %v: %v", d, ok, DefaultMaxRetryAfter, err)
	}

	mu.Lock()
	refuse = true
	mu.Unlock()
	c = newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{MaxRetryAfter: 300 * time.Millisecond})
	_, err = c.List(context.Background(), informer.ListOptions{})
	if d, _ := informer.RetryAfterOf(err); d != 300*time.Millisecond {
		t.Fatalf("retry after %v, want 300ms: %v", d, err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if l, err := c.List(ctx, informer.ListOptions{}); err != nil || len(l.Items) != 1 {
		t.Fatalf("%+v %v", l, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("the next request went %v later, want about 300ms", d)
	}
}
