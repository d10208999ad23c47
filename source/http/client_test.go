package httpsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer"
)

// fakeAPI is a scripted server: each list request gets the next list body (the last one
// repeats), each watch request the next script (after the last, a stream that stays open
// and silent).
type fakeAPI struct {
	mu      sync.Mutex
	lists   []string
	watches []func(w http.ResponseWriter, r *http.Request)
	log     []string
	ch      chan struct{}
}

func newFake(t *testing.T, lists []string, watches ...func(http.ResponseWriter, *http.Request)) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{lists: lists, watches: watches, ch: make(chan struct{}, 1)}
	ts := httptest.NewServer(f)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return f, ts
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	watch := r.URL.Query().Get("watch") != ""
	var script func(http.ResponseWriter, *http.Request)
	var list string
	if watch {
		f.log = append(f.log, "watch "+r.URL.RawQuery)
		if len(f.watches) > 0 {
			script, f.watches = f.watches[0], f.watches[1:]
		} else {
			script = stream()
		}
	} else {
		f.log = append(f.log, "list "+r.URL.RawQuery)
		list = f.lists[0]
		if len(f.lists) > 1 {
			f.lists = f.lists[1:]
		}
	}
	f.mu.Unlock()
	select {
	case f.ch <- struct{}{}:
	default:
	}
	if watch {
		script(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, list)
}

func (f *fakeAPI) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// stream answers a watch with the given lines, then keeps the stream open until the
// client goes away.
func stream(lines ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		for _, l := range lines {
			_, _ = io.WriteString(w, l)
		}
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}
}

// cutStream answers a watch with raw chunked bytes, then closes the connection: a server
// that died mid-response.
func cutStream(raw string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + raw)
		_ = buf.Flush()
	}
}

// chunk is one HTTP/1.1 chunk.
func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

func listBody(rv string, objs ...string) string {
	return fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"items":[%s]}`, rv, strings.Join(objs, ","))
}

func o(name, val string) string { return fmt.Sprintf(`{"name":%q,"val":%q}`, name, val) }

func ev(typ, rv, object string) string {
	return fmt.Sprintf(`{"type":%q,"resourceVersion":%q,"object":%s}`+"\n", typ, rv, object)
}

// Every kind of bad input ends the watch with an error that matches ErrBadInput; the
// event before it is delivered, the bad one is not (not even in part), and the informer
// lists again and converges.
func TestClientBadInput(t *testing.T) {
	good := ev("ADDED", "11", o("b", "1"))
	for _, tc := range []struct {
		name    string
		watch   func(http.ResponseWriter, *http.Request)
		message string
		maxSize int
	}{
		{"malformed line", stream(good, `{"type":"MODIFIED","object":{"name":"a"`+"\n"), "malformed watch frame", 0},
		{"not an object", stream(good, "[1,2,3]\n"), "malformed watch frame", 0},
		{"trailing garbage", stream(good, ev("MODIFIED", "12", o("a", "2"))[:60]+"} x\n"), "malformed watch frame", 0},
		{"unknown type", stream(good, ev("RENAMED", "12", o("a", "2"))), `unknown watch event type "RENAMED"`, 0},
		{"undecodable object", stream(good, ev("MODIFIED", "12", `{"name":"a","val":7}`)), "cannot be decoded", 0},
		{"invalid JSON in the object", stream(good, `{"type":"MODIFIED","resourceVersion":"12","object":{"name":"a",}}`+"\n"), "cannot be decoded", 0},
		{"mismatched brackets in the object", stream(good, `{"type":"MODIFIED","resourceVersion":"12","object":{"name":"a"]}`+"\n"), "cannot be decoded", 0},
		{"no object", stream(good, `{"type":"MODIFIED","resourceVersion":"12"}`+"\n"), "MODIFIED event without an object", 0},
		{"null object", stream(good, ev("DELETED", "12", "null")), "DELETED event without an object", 0},
		{"bookmark without revision", stream(good, `{"type":"BOOKMARK","object":{"metadata":{}}}`+"\n"), "BOOKMARK event without a resourceVersion", 0},
		{"frame too long", stream(good, ev("MODIFIED", "12", o("a", strings.Repeat("x", 300)))), "longer than 256 bytes", 256},
		{"cut mid-chunk", cutStream(chunk(good) + "40\r\n" + `{"type":"MODIFIED","resourceVersion":"12","obj`), "ended inside a frame", 0},
		{"cut mid-line", cutStream(chunk(good) + chunk(`{"type":"MODIFIED","res`)), "ended inside a frame", 0},
		{"wrong content type", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>")
		}, `Content-Type "text/html"`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ts := newFake(t, []string{
				listBody("10", o("a", "1")),
				listBody("20", o("a", "1"), o("b", "1"), o("c", "1")),
			}, tc.watch)
			c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{MaxFrameSize: tc.maxSize})
			d := wiretest.NewMirror(t, c, "client", func(o *informer.Options[string, *wiretest.Obj]) {
				o.Revision = func(o *wiretest.Obj) string { return o.Val }
			})
			wiretest.Converge(t, d, func() string { return "a=1 b=1 c=1" })
			var bad error
			for _, err := range d.Rec.Errors() {
				if errors.Is(err, informer.ErrBadInput) {
					bad = err
				}
			}
			if bad == nil || !strings.Contains(bad.Error(), tc.message) {
				t.Fatalf("reported %v; want an ErrBadInput saying %q", d.Rec.Errors(), tc.message)
			}
			if strings.HasPrefix(tc.name, "cut") && !errors.Is(bad, io.ErrUnexpectedEOF) {
				t.Errorf("%v does not match io.ErrUnexpectedEOF", bad)
			}
			// b arrives by the watch (or, without one, by the relist), c by the relist; the
			// bad frame's change never arrives.
			want := []string{"add*a=1", "add b=1", "add c=1"}
			if got := d.Rec.Calls(); !slices.Equal(got, want) {
				t.Errorf("handler saw %q, want %q", got, want)
			}
			reqs := f.requests()
			if len(reqs) < 3 || !strings.HasPrefix(reqs[0], "list ") || !strings.HasPrefix(reqs[1], "watch ") || !strings.HasPrefix(reqs[2], "list ") {
				t.Errorf("requests %q: want list, watch, list again", reqs)
			}
			// A frame whose object cannot be decoded is a decode error; any other bad frame
			// a source error.
			st := d.Inf.Stats()
			if n := st.SourceErrors + st.DecodeErrors; n == 0 {
				t.Error("Stats.SourceErrors + fanout.Stats.DecodeErrors = 0")
			}
			if decode := strings.Contains(tc.message, "decoded"); decode != (st.DecodeErrors > 0) {
				t.Errorf("Stats.DecodeErrors = %d for %q", st.DecodeErrors, tc.message)
			}
		})
	}
}

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

// A Kubernetes API server's shapes: revisions in the objects' metadata, bookmarks whose
// object is a bare object with metadata, the end-of-initial-events annotation.
func TestClientKubernetesShapes(t *testing.T) {
	pod := func(name, rv string) string {
		return fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":"default","resourceVersion":%q,"labels":{"app":"x"}},"name":%q,"val":"1"}`, name, rv, name)
	}
	_, ts := newFake(t, []string{`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"100","continue":"tok"},"items":[` + pod("a", "90") + `]}`},
		stream(
			`{"type":"ADDED","object":`+pod("b", "101")+"}\n",
			`{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"105","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n",
			`{"type":"DELETED","object":`+pod("a", "106")+"}\n",
		))
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})
	l, err := c.List(context.Background(), informer.ListOptions{})
	if err != nil || l.Revision != "100" || l.Continue != "tok" || wiretest.State(l.Items) != "a=1" {
		t.Fatalf("%+v %v", l, err)
	}
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "100"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for range 3 {
		e, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		name := ""
		if e.Object != nil {
			name = e.Object.Name
		}
		got = append(got, fmt.Sprintf("%v %s @%s end=%v", e.Type, name, e.Revision, e.EndOfInitialEvents))
	}
	want := []string{"Added b @101 end=false", "Bookmark  @105 end=true", "Deleted a @106 end=false"}
	if !slices.Equal(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
}

// ClientOptions.Decode replaces encoding/json for list items and event objects.
func TestClientCustomDecode(t *testing.T) {
	_, ts := newFake(t, []string{listBody("1", o("a", "1"))}, stream(ev("ADDED", "2", o("b", "2"))))
	var seen []string
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{Decode: func(raw json.RawMessage) (*wiretest.Obj, error) {
		seen = append(seen, string(raw))
		var x wiretest.Obj
		err := json.Unmarshal(raw, &x)
		x.Val += "!"
		return &x, err
	}})
	l, err := c.List(context.Background(), informer.ListOptions{})
	if err != nil || wiretest.State(l.Items) != "a=1!" {
		t.Fatalf("%v %v", l, err)
	}
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if e, err := w.Next(); err != nil || e.Object.Val != "2!" {
		t.Fatalf("%+v %v", e, err)
	}
	if want := []string{o("a", "1"), o("b", "2")}; !slices.Equal(seen, want) {
		t.Errorf("decoder saw %q, want %q", seen, want)
	}
}

// ClientOptions.Revision is used for frames that carry no revision at all.
func TestClientRevisionFunc(t *testing.T) {
	_, ts := newFake(t, []string{listBody("1")}, stream(`{"type":"ADDED","object":{"name":"a","val":"7"}}`+"\n"))
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{Revision: func(o *wiretest.Obj) string { return o.Val }})
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if e, err := w.Next(); err != nil || e.Revision != "7" {
		t.Fatalf("%+v %v", e, err)
	}
}

// The requests a client sends, as a Kubernetes API server expects them.
func TestClientRequests(t *testing.T) {
	f, ts := newFake(t, []string{listBody("1")})
	c := newTestClient(t, ts.URL+"/api/v1/pods?labelSelector=app%3Dx", ClientOptions[*wiretest.Obj]{StreamingList: true})
	ctx := context.Background()
	for _, opts := range []informer.ListOptions{
		{},
		{Consistent: true, Revision: "5", Limit: 10},
		{Revision: "5"},
		{Continue: "tok", Revision: "5", Limit: 10},
	} {
		if _, err := c.List(ctx, opts); err != nil {
			t.Fatal(err)
		}
	}
	for _, opts := range []informer.WatchOptions{
		{Revision: "5", Timeout: 1500 * time.Millisecond, AllowBookmarks: true},
		{SendInitialEvents: true},
	} {
		w, err := c.Watch(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		w.Stop()
	}
	want := []string{
		"list labelSelector=app%3Dx&resourceVersion=0",
		"list labelSelector=app%3Dx&limit=10",
		"list labelSelector=app%3Dx&resourceVersion=5&resourceVersionMatch=NotOlderThan",
		"list continue=tok&labelSelector=app%3Dx&limit=10",
		"watch allowWatchBookmarks=true&labelSelector=app%3Dx&resourceVersion=5&timeoutSeconds=2&watch=1",
		"watch allowWatchBookmarks=true&labelSelector=app%3Dx&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=1",
	}
	if got := f.requests(); !slices.Equal(got, want) {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Without StreamingList, a streaming watch is not supported.
	_, err := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{}).Watch(ctx, informer.WatchOptions{SendInitialEvents: true})
	if !errors.Is(err, informer.ErrNotSupported) {
		t.Errorf("%v, want ErrNotSupported", err)
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

func TestNewClientErrors(t *testing.T) {
	for _, u := range []string{"", "ftp://x/y", "http://", "://", "http://x/?%zz"} {
		if _, err := NewClient[*wiretest.Obj](u, ClientOptions[*wiretest.Obj]{}); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
}

func TestCompareIntegerRevisions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
		ok   bool
	}{
		{"1", "2", -1, true}, {"10", "9", 1, true}, {"42", "42", 0, true}, {"0", "0", 0, true},
		{"99999999999999999999999", "100000000000000000000000", -1, true},
		{"", "1", 0, false}, {"01", "1", 0, false}, {"1", "-1", 0, false}, {"1a", "1", 0, false},
	} {
		got, err := CompareIntegerRevisions(tc.a, tc.b)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("(%q, %q) = %d, %v", tc.a, tc.b, got, err)
		}
	}
}

// The Server-Sent Events reader: data lines joined, fields and comments skipped, CRLF, a
// stream cut inside an event.
func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  error
	}{
		{"data: a\n\n", []string{"a"}, io.EOF},
		{": keepalive\n\nevent: x\nid: 7\nretry: 10\ndata: {\"a\":\ndata:1}\n\n", []string{"{\"a\":\n1}"}, io.EOF},
		{"data: a\r\n\r\ndata:b\r\n\r\n", []string{"a", "b"}, io.EOF},
		{"event: only\n\n", nil, io.EOF},
		{"data\n\n", []string{""}, io.EOF},
		{"data: a\n\ndata: b\n", []string{"a"}, informer.ErrBadInput},
		{"data: a\n\ndata: b", []string{"a"}, informer.ErrBadInput},
	} {
		r := ServerSentEvents.NewReader(strings.NewReader(tc.in), 1<<10)
		var got []string
		var err error
		for {
			var f []byte
			if f, err = r.ReadFrame(); err != nil {
				break
			}
			got = append(got, string(f))
		}
		if !slices.Equal(got, tc.want) || !errors.Is(err, tc.err) {
			t.Errorf("%q: %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// The NDJSON reader: blank lines skipped, CRLF, a frame longer than the buffer, the limit.
func TestNDJSONReader(t *testing.T) {
	long := strings.Repeat("x", 3*readBufferSize)
	for _, tc := range []struct {
		in   string
		max  int
		want []string
		err  error
	}{
		{"a\n\n  \nb\r\n", 100, []string{"a", "b"}, io.EOF},
		{long + "\nz\n", 4 * readBufferSize, []string{long, "z"}, io.EOF},
		{long + "\nz\n", 2 * readBufferSize, nil, informer.ErrBadInput},
		{"a\nb", 100, []string{"a"}, io.ErrUnexpectedEOF},
	} {
		r := NDJSON.NewReader(strings.NewReader(tc.in), tc.max)
		var got []string
		var err error
		for {
			var f []byte
			if f, err = r.ReadFrame(); err != nil {
				break
			}
			got = append(got, string(f))
		}
		if !slices.Equal(got, tc.want) || !errors.Is(err, tc.err) {
			t.Errorf("%.20q: %d frames, %v; want %d, %v", tc.in, len(got), err, len(tc.want), tc.err)
		}
	}
}
