package httpsource

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// serveFunc starts a loopback server with h.
func serveFunc(t testing.TB, h http.HandlerFunc) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts
}

// wantError fails unless err matches every target and its message holds text.
func wantError(t testing.TB, err error, text string, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one saying %q", text)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("error %q does not match %v", err, target)
		}
	}
	if !strings.Contains(err.Error(), text) {
		t.Errorf("error %q does not say %q", err, text)
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
	ts := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
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
	small := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
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
// Content-Length) fails the List; one at the limit is read.
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
			ts := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
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
				if err != nil || len(l.Items) != 1 {
					t.Fatalf("%d items, %v", len(l.Items), err)
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
				u = serveFunc(t, tc.h).URL
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

// A Retry-After beyond MaxRetryAfter is cut to it: the error carries the capped delay
// and the client waits no longer than that before its next request.
func TestClientRetryAfterCap(t *testing.T) {
	var mu sync.Mutex
	refuse := true
	ts := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
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

// Redirects are followed only within the origin: a redirect to another port, or from
// https to http, fails the request and the other server never sees it (nor the token).
func TestClientRedirects(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []string // requests the other origin got, with their Authorization
	other := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
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
		ts := serveFunc(t, redirector(other.URL+"/collection"))
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
		ts := serveFunc(t, redirector("/here"))
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
				ts := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
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
