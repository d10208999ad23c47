package httpsource

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wiretest"
)

// The Watch itself: an event, then the error, and the same error from then on.
func TestClientWatchErrorIsSticky(t *testing.T) {
	_, ts := newFake(t, []string{listBody("1")}, stream(ev("ADDED", "2", o("a", "1")), "garbage\n"))
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e, err := w.Next()
	if err != nil || e.Type != informer.Added || e.Object.Name != "a" || e.Revision != "2" {
		t.Fatalf("%+v %v", e, err)
	}
	_, err1 := w.Next()
	_, err2 := w.Next()
	if !errors.Is(err1, informer.ErrBadInput) || err1 != err2 {
		t.Fatalf("%v then %v", err1, err2)
	}
}

// A connection cut between two frames is not bad input: the watch can resume from the
// last revision (retryable).
func TestClientCutBetweenFrames(t *testing.T) {
	_, ts := newFake(t, []string{listBody("1")}, cutStream(chunk(ev("ADDED", "2", o("a", "1")))))
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := w.Next(); err != nil {
		t.Fatal(err)
	}
	_, err = w.Next()
	if !errors.Is(err, informer.ErrRetryable) || errors.Is(err, informer.ErrBadInput) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("%v: want retryable, wrapping io.ErrUnexpectedEOF", err)
	}
}

// Next returns at once when the watch is stopped from another goroutine or its context is
// cancelled, with no event pending.
func TestClientWatchStopAndCancel(t *testing.T) {
	_, ts := newFake(t, []string{listBody("1")})
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})
	for _, tc := range []struct {
		name string
		end  func(w informer.Watch[*wiretest.Obj], cancel context.CancelFunc)
		want error
	}{
		{"stop", func(w informer.Watch[*wiretest.Obj], _ context.CancelFunc) { w.Stop() }, ErrWatchStopped},
		{"cancel", func(_ informer.Watch[*wiretest.Obj], cancel context.CancelFunc) { cancel() }, context.Canceled},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := c.Watch(ctx, informer.WatchOptions{Revision: "1"})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := w.Next()
			errc <- err
		}()
		tc.end(w, cancel)
		select {
		case err := <-errc:
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		case <-time.After(wiretest.WaitTimeout):
			t.Fatalf("%s: Next did not return", tc.name)
		}
		w.Stop()
		cancel()
	}
}

// With EndWatchAtTimeout the client ends a watch the server never ends at the requested
// timeout, cleanly: Next returns io.EOF after the events sent before.
func TestClientEndWatchAtTimeout(t *testing.T) {
	_, ts := newFake(t, []string{listBody("1")}, stream(ev("ADDED", "2", o("a", "1"))))
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{EndWatchAtTimeout: true, WatchGrace: time.Hour})
	w, err := c.Watch(context.Background(), informer.WatchOptions{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if e, err := w.Next(); err != nil || e.Object.Name != "a" {
		t.Fatalf("%+v %v", e, err)
	}
	start := time.Now()
	if _, err := w.Next(); err != io.EOF {
		t.Fatalf("%v, want io.EOF", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("ended after %v", d)
	}
}

// An informer whose watch server goes silent after the headers reports it, watches again
// and follows the next change: it does not sit synced on a stale cache.
func TestClientSilentWatchRewatches(t *testing.T) {
	f, ts := newFake(t, []string{listBody("1", o("a", "1"))},
		func(w http.ResponseWriter, r *http.Request) { // headers, then silence
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		},
		stream(ev("MODIFIED", "2", o("a", "2"))))
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{WatchGrace: 100 * time.Millisecond})
	d := wiretest.NewMirror(t, c, "silent", func(o *informer.Options[string, *wiretest.Obj]) { o.MinWatchTimeout = time.Second })
	wiretest.Converge(t, d, func() string { return "a=2" })
	if !d.Rec.HasError(informer.ErrRetryable) {
		t.Errorf("errors %v: want the silent watch reported", d.Rec.Errors())
	}
	var lists, watches int
	for _, r := range f.requests() {
		if strings.HasPrefix(r, "watch ") {
			watches++
			if !strings.Contains(r, "resourceVersion=1&") {
				t.Errorf("request %q: want a watch from revision 1", r)
			}
		} else {
			lists++
		}
	}
	if lists != 1 || watches < 2 {
		t.Errorf("requests %q: want one list and a second watch from the same revision", f.requests())
	}
}

// A DELETED frame whose envelope says lastStateUnknown (a fanout PassThrough whose
// source sent the key alone) becomes a Deleted event with LastStateUnknown, so that the
// informer hands OnDelete its cached state; a frame without the field (an older server,
// a Kubernetes API server) is a delete of the state sent, as before; on another event
// type the field is ignored; a value other than true or false is bad input.
func TestClientWatchDeleteOfKeyAlone(t *testing.T) {
	keyAlone := `{"type":"DELETED","resourceVersion":"2","lastStateUnknown":true,"object":{"name":"a","val":""}}` + "\n"
	said := `{"type":"DELETED","resourceVersion":"3","lastStateUnknown":false,"object":{"name":"b","val":"1"}}` + "\n"
	added := `{"type":"ADDED","resourceVersion":"5","lastStateUnknown":true,"object":{"name":"d","val":"1"}}` + "\n"
	bad := `{"type":"DELETED","resourceVersion":"6","lastStateUnknown":"yes","object":{"name":"d","val":""}}` + "\n"
	_, ts := newFake(t, []string{listBody("1")}, stream(keyAlone, said, ev("DELETED", "4", o("c", "1")), added, bad))
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, want := range []string{"Deleted a= @2 last state unknown", "Deleted b=1 @3", "Deleted c=1 @4", "Added d=1 @5"} {
		e, err := w.Next()
		if err != nil {
			t.Fatalf("want %s: %v", want, err)
		}
		got := wiretest.Event(e)
		if e.LastStateUnknown {
			got += " last state unknown"
		}
		if got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
	_, err = w.Next()
	wantError(t, err, "lastStateUnknown is not true or false", informer.ErrBadInput)
}
