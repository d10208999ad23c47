package httpsource

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
	"github.com/informer-go/informer/internal/wiretest"
)

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
	got := wiretest.Watched(t, c, informer.WatchOptions{Revision: "100"}, 3)
	want := []string{"Added b=1 @101", "Bookmark @105 end", "Deleted a=1 @106"}
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

// An OrderedClient compares a Server's history-tagged revisions by their number, with
// the upstream's plain ones too (WaitForRevision of a write's revision), and refuses two
// of one number with different tags: states of two histories of the upstream.
func TestOrderedClientComparesTaggedRevisions(t *testing.T) {
	var c OrderedClient[*wiretest.Obj]
	for _, tc := range []struct {
		a, b string
		want int
		ok   bool
	}{
		{"41@k3", "42@x9", -1, true}, {"42", "42@x9", 0, true}, {"43@k3", "42", 1, true},
		{"42@k3", "42@k3", 0, true}, {"42@k3", "42@x9", 0, false}, {"42@", "41", 1, true},
		{"4x@k3", "42", 0, false}, {"dn68.4@k3", "dn68.5", -1, true},
	} {
		got, err := c.CompareRevisions(tc.a, tc.b)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("(%q, %q) = %d, %v", tc.a, tc.b, got, err)
		}
	}
	if got := PlainRevision("42@k3j9x"); got != "42" {
		t.Errorf("PlainRevision(42@k3j9x) = %q", got)
	}
}

// A small gzip body that expands to millions of list items is refused while the page is
// split, with the default limits, before a single item is decoded.
func TestClientListItemLimit(t *testing.T) {
	const items = 2_000_000 // twice DefaultMaxListItems
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	fmt.Fprint(zw, `{"metadata":{"resourceVersion":"1"},"items":[{}`)
	fmt.Fprint(zw, strings.Repeat(`,{}`, items-1))
	fmt.Fprint(zw, `]}`)
	zw.Close()
	if gz.Len() > 64<<10 {
		t.Fatalf("the compressed body is %d bytes", gz.Len())
	}
	ts := wiretest.ServeFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz.Bytes())
	})
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})
	l, err := c.List(context.Background(), informer.ListOptions{})
	wantError(t, err, "more than 1000000 items (ClientOptions.MaxListItems)", informer.ErrBadInput)
	if len(l.Items) != 0 {
		t.Errorf("%d items returned with the error", len(l.Items))
	}

	// The limit is exact: a page of MaxListItems items is accepted, one more is not.
	small := wiretest.ServeFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"metadata":{"resourceVersion":"1"},"items":[{}`+strings.Repeat(`,{}`, 999)+`]}`)
	})
	c = newTestClient(t, small.URL, ClientOptions[*wiretest.Obj]{MaxListItems: 1000})
	if l, err := c.List(context.Background(), informer.ListOptions{}); err != nil || len(l.Items) != 1000 {
		t.Fatalf("%d items, %v", len(l.Items), err)
	}
	c = newTestClient(t, small.URL, ClientOptions[*wiretest.Obj]{MaxListItems: 999})
	_, err = c.List(context.Background(), informer.ListOptions{})
	wantError(t, err, "more than 999 items", informer.ErrBadInput)
}

// A list body longer than MaxListBytes (counted after decompression, with or without a
// Content-Length) fails the List; one at the limit is read, and its List.Bytes is the
// body's size as MaxListBytes counts it.
func TestClientListByteLimit(t *testing.T) {
	const limit = 64 << 10
	body := func(n int) string { // a valid list of about n bytes
		pad := n - len(listBody("1", o("a", "")))
		return listBody("1", o("a", strings.Repeat("x", pad)))
	}
	for _, tc := range []struct {
		name string
		size int
		gzip bool
		ok   bool
	}{
		{"at the limit", limit, false, true},
		{"over the limit, Content-Length", limit + 1, false, false},
		{"at the limit, gzip", limit, true, true},
		{"over the limit, gzip", 10 * limit, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := body(tc.size)
			if len(b) != tc.size {
				t.Fatalf("body of %d bytes", len(b))
			}
			ts := wiretest.ServeFunc(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if tc.gzip {
					w.Header().Set("Content-Encoding", "gzip")
					zw := gzip.NewWriter(w)
					_, _ = io.WriteString(zw, b)
					zw.Close()
					return
				}
				_, _ = io.WriteString(w, b)
			})
			c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{MaxListBytes: limit})
			l, err := c.List(context.Background(), informer.ListOptions{})
			if tc.ok {
				if err != nil || len(l.Items) != 1 || l.Bytes != int64(tc.size) {
					t.Fatalf("%d items of %d bytes, %v; want 1 of %d", len(l.Items), l.Bytes, err, tc.size)
				}
				return
			}
			wantError(t, err, "longer than 65536 bytes (ClientOptions.MaxListBytes)", informer.ErrBadInput)
		})
	}
}

// The limits' defaults are the documented ones.
func TestClientLimitDefaults(t *testing.T) {
	c := newTestClient(t, "http://127.0.0.1:1/", ClientOptions[*wiretest.Obj]{})
	got := fmt.Sprint(c.maxFrame, c.maxListBytes, c.maxListItems, c.headerTimeout, c.listTimeout, c.watchGrace, c.watchIdle, c.maxRetryAfter)
	if want := "16777216 268435456 1000000 1m0s 5m0s 30s 10m0s 5m0s"; got != want {
		t.Errorf("defaults %s, want %s", got, want)
	}
}

// A server that goes silent cannot hold a request forever: every way of going silent ends
// in an error that matches informer.ErrRetryable, with http.DefaultClient too.
func TestClientSilentServer(t *testing.T) {
	hold := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	headersOnly := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}
	drip := func(data string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			rc := http.NewResponseController(w)
			tick := time.NewTicker(20 * time.Millisecond) // a byte per tick, never a whole frame
			defer tick.Stop()
			for i := 0; ; i++ {
				_, _ = io.WriteString(w, data[i%len(data):i%len(data)+1])
				_ = rc.Flush()
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
				}
			}
		}
	}
	// A blackhole: a listener whose connections are never accepted (the kernel completes
	// the handshake, nothing ever answers).
	blackhole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blackhole.Close() })

	opts := ClientOptions[*wiretest.Obj]{
		HTTPClient:            http.DefaultClient,
		ResponseHeaderTimeout: 200 * time.Millisecond,
		ListTimeout:           300 * time.Millisecond,
		WatchGrace:            200 * time.Millisecond,
		WatchIdleTimeout:      300 * time.Millisecond,
	}
	list := func(c *Client[*wiretest.Obj]) error {
		_, err := c.List(context.Background(), informer.ListOptions{})
		return err
	}
	watch := func(timeout time.Duration) func(c *Client[*wiretest.Obj]) error {
		return func(c *Client[*wiretest.Obj]) error {
			w, err := c.Watch(context.Background(), informer.WatchOptions{Timeout: timeout})
			if err != nil {
				return err
			}
			defer w.Stop()
			for {
				if _, err := w.Next(); err != nil {
					return err
				}
			}
		}
	}
	for _, tc := range []struct {
		name   string
		url    string // "" for the handler's server
		h      http.HandlerFunc
		call   func(*Client[*wiretest.Obj]) error
		says   string
		within time.Duration
	}{
		{"list: no headers", "", hold, list, "no response headers within 200ms", 2 * time.Second},
		{"list: blackhole", "http://" + blackhole.Addr().String(), nil, list, "no response headers within 200ms", 2 * time.Second},
		{"list: headers then nothing", "", headersOnly, list, "longer than 300ms (ClientOptions.ListTimeout)", 2 * time.Second},
		{"list: a drip", "", drip(listBody("1", o("a", "1"))), list, "longer than 300ms (ClientOptions.ListTimeout)", 2 * time.Second},
		{"watch: no headers", "", hold, watch(time.Second), "no response headers within 200ms", 2 * time.Second},
		{"watch: blackhole", "http://" + blackhole.Addr().String(), nil, watch(time.Second), "no response headers within 200ms", 2 * time.Second},
		{"watch: headers then nothing", "", headersOnly, watch(time.Second), "within its timeout plus 200ms (ClientOptions.WatchGrace)", 3 * time.Second},
		{"watch: a drip", "", drip(ev("ADDED", "2", o("a", strings.Repeat("x", 200)))), watch(time.Second), "within its timeout plus 200ms", 3 * time.Second},
		{"watch without a timeout: headers then nothing", "", headersOnly, watch(0), "no complete watch frame for 300ms (ClientOptions.WatchIdleTimeout)", 2 * time.Second},
		{"watch without a timeout: a drip", "", drip(ev("ADDED", "2", o("a", strings.Repeat("x", 200)))), watch(0), "no complete watch frame for 300ms", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.url
			if u == "" {
				u = wiretest.ServeFunc(t, tc.h).URL
			}
			c := newTestClient(t, u, opts)
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- tc.call(c) }()
			select {
			case err := <-done:
				wantError(t, err, tc.says, informer.ErrRetryable)
				if d := time.Since(start); d > tc.within {
					t.Errorf("took %v", d)
				}
			case <-time.After(wiretest.WaitTimeout):
				t.Fatal("the call is still blocked")
			}
		})
	}
}

// Redirects are followed only within the origin: a redirect to another port, or from
// https to http, fails the request and the other server never sees it (nor the token).
func TestClientRedirects(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []string // requests the other origin got, with their Authorization
	other := wiretest.ServeFunc(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhere = append(elsewhere, r.URL.Path+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, listBody("1", o("stolen", "1")))
	})
	redirector := func(to string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/here" {
				body, _ := io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, listBody("1", o("here", string(body)+" auth="+r.Header.Get("Authorization"))))
				return
			}
			http.Redirect(w, r, to, http.StatusTemporaryRedirect)
		}
	}
	bearer := func(r *http.Request) error { r.Header.Set("Authorization", "Bearer secret"); return nil }

	t.Run("another port", func(t *testing.T) {
		ts := wiretest.ServeFunc(t, redirector(other.URL+"/collection"))
		c := newTestClient(t, ts.URL+"/collection", ClientOptions[*wiretest.Obj]{PrepareRequest: bearer})
		_, err := c.List(context.Background(), informer.ListOptions{})
		wantError(t, err, "refused a redirect from "+origin(mustParse(t, ts.URL))+" to another origin, "+origin(mustParse(t, other.URL)))
	})
	t.Run("https to http", func(t *testing.T) {
		tls := httptest.NewTLSServer(redirector(other.URL + "/collection"))
		t.Cleanup(tls.Close)
		c := newTestClient(t, tls.URL+"/collection", ClientOptions[*wiretest.Obj]{HTTPClient: tls.Client(), PrepareRequest: bearer})
		_, err := c.List(context.Background(), informer.ListOptions{})
		wantError(t, err, "to another origin, http://")
	})
	mu.Lock()
	if len(elsewhere) != 0 {
		t.Errorf("the other origin got %q", elsewhere)
	}
	mu.Unlock()

	t.Run("same origin, body and token resent", func(t *testing.T) {
		ts := wiretest.ServeFunc(t, redirector("/here"))
		c := newTestClient(t, ts.URL+"/collection", ClientOptions[*wiretest.Obj]{
			PrepareRequest: bearer,
			ListRequest: func(req *OutgoingRequest, _ informer.ListOptions) error {
				req.Method, req.Body = http.MethodPost, []byte("page-1")
				return nil
			},
		})
		l, err := c.List(context.Background(), informer.ListOptions{})
		if err != nil || wiretest.State(l.Items) != "here=page-1 auth=Bearer secret" {
			t.Fatalf("%s %v", wiretest.State(l.Items), err)
		}
	})
}

func mustParse(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// One Content-Type rule for lists and watches: a response is read if it has no
// Content-Type or the media type the request asked for (JSON: application/json, or a name
// of newline-delimited JSON), parameters ignored; anything else is bad input.
func TestClientContentTypeRule(t *testing.T) {
	for _, tc := range []struct {
		contentType string
		ok          bool
	}{
		{"", true},
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"Application/JSON", true},
		{"application/x-ndjson", true},
		{"application/vnd.api+json", true},
		{"text/html; charset=utf-8", false},
		{"text/plain", false},
		{"application/octet-stream", false},
	} {
		for _, op := range []string{"list", "watch"} {
			t.Run(op+" "+tc.contentType, func(t *testing.T) {
				ts := wiretest.ServeFunc(t, func(w http.ResponseWriter, r *http.Request) {
					w.Header()["Content-Type"] = []string{tc.contentType} // set even when empty: no sniffing
					if r.URL.Query().Get("watch") != "" {
						_, _ = io.WriteString(w, ev("ADDED", "2", o("a", "1")))
						return
					}
					_, _ = io.WriteString(w, listBody("1", o("a", "1")))
				})
				c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})
				var err error
				if op == "list" {
					_, err = c.List(context.Background(), informer.ListOptions{})
				} else {
					var w informer.Watch[*wiretest.Obj]
					if w, err = c.Watch(context.Background(), informer.WatchOptions{}); err == nil {
						_, err = w.Next()
						w.Stop()
					}
				}
				if tc.ok {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				wantError(t, err, fmt.Sprintf("Content-Type %q, want \"application/json\"", wire.MediaType(tc.contentType)), informer.ErrBadInput)
			})
		}
	}
}

// A request on a kept-alive connection that the server closed as the request went out
// fails with net/http's "server closed idle connection": a broken connection, retried,
// not a reason to list again.
func TestTransportErrorServerClosedIdleIsRetryable(t *testing.T) {
	err := transportError(context.Background(), "GET http://127.0.0.1:1/items",
		&url.Error{Op: "Get", URL: "http://127.0.0.1:1/items", Err: errors.New("http: server closed idle connection")})
	if !errors.Is(err, informer.ErrRetryable) {
		t.Fatalf("transportError = %v, want an error matching informer.ErrRetryable", err)
	}
}
