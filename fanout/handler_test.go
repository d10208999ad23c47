package fanout

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

func TestServerQueryValidation(t *testing.T) {
	_, srv, ts := withObjects(t, ServerOptions[*wiretest.Obj]{}, "a")
	for _, q := range []string{
		"labelSelector=x",
		"limit=-1",
		"limit=ten",
		"limit=1&limit=2",
		"watch=maybe",
		"watch=1&limit=5",
		"watch=1&continue=abc",
		"continue=",
		"continue=abc&resourceVersion=5",
		"timeoutSeconds=-3",
		"timeoutSeconds=1e3",
		"allowWatchBookmarks=yes",
		"sendInitialEvents=true",
		"sendInitialEvents=perhaps&watch=1",
		"resourceVersionMatch=Exact&resourceVersion=1",
		"resourceVersionMatch=Newest",
		"resourceVersion=abc",
		"resourceVersion=007",
		"watch=1&resourceVersion=-5",
		"%zz",
	} {
		resp := wiretest.Get(t, nil, ts.URL+"?"+q, nil)
		b := wiretest.Body(t, resp)
		var se struct {
			Kind, Status, Reason, Message string
			Code                          int
		}
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(b), &se) != nil ||
			se.Kind != "Status" || se.Status != "Failure" || se.Code != 400 || se.Reason != "BadRequest" || se.Message == "" {
			t.Errorf("?%s: %d %s", q, resp.StatusCode, b)
		}
	}
	// Not GET: 405. Only protobuf acceptable: 406.
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if wiretest.Body(t, resp); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	resp = wiretest.Get(t, nil, ts.URL, http.Header{"Accept": {"application/vnd.kubernetes.protobuf"}})
	if wiretest.Body(t, resp); resp.StatusCode != 406 {
		t.Errorf("protobuf only: %d", resp.StatusCode)
	}
	if n := srv.Stats().BadRequests; n != 22 {
		t.Errorf("Stats.BadRequests = %d, want 22", n)
	}
}

func TestServerAuthorize(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		Authorize: func(r *http.Request) error {
			switch r.Header.Get("Authorization") {
			case "":
				return fmt.Errorf("no token: %w", ErrUnauthorized)
			case "Bearer good":
				return nil
			case "Bearer reader":
				return fmt.Errorf("reader may not watch: %w", ErrForbidden)
			}
			return errors.New("unknown token")
		},
	}})
	for _, tc := range []struct {
		token  string
		code   int
		reason string
	}{
		{"", 401, "Unauthorized"},
		{"Bearer reader", 403, "Forbidden"},
		{"Bearer bogus", 403, "Forbidden"},
		{"Bearer good", 200, ""},
	} {
		c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{PrepareRequest: func(r *http.Request) error {
			if tc.token != "" {
				r.Header.Set("Authorization", tc.token)
			}
			return nil
		}})
		_, err := c.List(context.Background(), informer.ListOptions{})
		var se *httpsource.StatusError
		switch {
		case tc.code == 200 && err != nil:
			t.Errorf("%q: %v", tc.token, err)
		case tc.code != 200 && (!errors.As(err, &se) || se.Code != tc.code || se.Reason != tc.reason):
			t.Errorf("%q: %v, want %d %s", tc.token, err, tc.code, tc.reason)
		case tc.code != 200 && (errors.Is(err, informer.ErrRetryable) || errors.Is(err, informer.ErrExpired)):
			t.Errorf("%q: %v is classified; a refusal must not be", tc.token, err)
		}
	}
	if n := srv.Stats().Denied; n != 3 {
		t.Errorf("Stats.Denied = %d, want 3", n)
	}
}

// Before the informer has delivered its initial state, the server answers 503 with a
// Retry-After, which a client classifies as ErrUnavailable.
func TestServerNotSynced(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	inf, err := informer.New(src, informer.Options[string, *wiretest.Obj]{Key: wiretest.ObjKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(inf, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{RetryAfter: 2500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	_, err = newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).List(context.Background(), informer.ListOptions{})
	if d, _ := informer.RetryAfterOf(err); !errors.Is(err, informer.ErrUnavailable) || d != 3*time.Second {
		t.Errorf("%v (retry after %v), want ErrUnavailable after 3s", err, d)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A refusal says only "unauthorized" or "forbidden" unless the hook chose a message;
// a 401 carries a WWW-Authenticate challenge.
func TestServerRefusalText(t *testing.T) {
	_, _, ts := withObjects(t, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{
		Authorize: func(r *http.Request) error {
			switch r.Header.Get("Authorization") {
			case "":
				return fmt.Errorf("token store at 10.0.0.7:5432 unreachable: %w", ErrUnauthorized)
			case "Bearer reader":
				return ClientMessage(ErrForbidden, "readers may not watch")
			}
			return errors.New("lookup of user 42 in ldap://internal failed")
		},
	}}, "a")
	for _, tc := range []struct {
		token, want string
		code        int
	}{
		{"", `"message":"unauthorized"`, 401},
		{"Bearer reader", `"message":"readers may not watch"`, 403},
		{"Bearer bogus", `"message":"forbidden"`, 403},
	} {
		h := http.Header{}
		if tc.token != "" {
			h.Set("Authorization", tc.token)
		}
		resp := wiretest.Get(t, nil, ts.URL, h)
		b := wiretest.Body(t, resp)
		if resp.StatusCode != tc.code || !strings.Contains(b, tc.want) || strings.Contains(b, "10.0.0.7") || strings.Contains(b, "ldap") {
			t.Errorf("%q: %d %s, want %d with %s", tc.token, resp.StatusCode, b, tc.code, tc.want)
		}
		if got := resp.Header.Get("WWW-Authenticate"); (tc.code == 401) != (got == "Bearer") {
			t.Errorf("%q: WWW-Authenticate %q", tc.token, got)
		}
	}
}

// sendEndless sends a GET of query whose body never ends (a chunked body, or a
// Content-Length that is never reached) on a bare TCP connection, and returns the
// connection with its response's status, read within limit (0 if none came).
func sendEndless(t *testing.T, addr, query string, chunked bool, limit time.Duration) (net.Conn, int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head := "Content-Length: 1000000\r\n\r\nabcd"
	if chunked {
		head = "Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n"
	}
	if _, err := fmt.Fprintf(conn, "GET /?%s HTTP/1.1\r\nHost: x\r\n%s", query, head); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return conn, 0
	}
	resp.Body.Close()
	return conn, resp.StatusCode
}

// A GET whose body never ends holds no list or watch slot: it is answered 400 at once,
// before a slot is taken, with the http.Server settings the README shows (no
// ReadTimeout), and an honest list and watch are served while such requests stay open.
func TestServerEndlessRequestBody(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv := newServer(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{MaxLists: 2, MaxWatchers: 2}})
	ts := startServer(t, srv)
	addr := ts.Listener.Addr().String()
	for _, q := range []string{"limit=0", "watch=1", "watch=1&resourceVersion=" + rev(srv, 1)} {
		for _, chunked := range []bool{true, false} {
			for range 3 {
				if _, code := sendEndless(t, addr, q, chunked, 2*time.Second); code != http.StatusBadRequest {
					t.Fatalf("GET ?%s with a body that never ends (chunked %v): status %d, want 400 at once", q, chunked, code)
				}
			}
		}
	}
	c := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	l, err := c.List(context.Background(), informer.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("an honest list: %v, %d items", err, len(l.Items))
	}
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: rev(srv, 1)})
	if err != nil {
		t.Fatalf("an honest watch: %v", err)
	}
	w.Stop()
	if n := srv.Stats().ListsRejected + srv.Stats().Rejected; n != 0 {
		t.Errorf("%d requests refused for want of a slot, want 0", n)
	}
	if n := srv.Stats().BadRequests; n != 18 {
		t.Errorf("Stats.BadRequests = %d, want 18", n)
	}
}

// A client that AuthorizeClient does not name is its IPv4 address, or its IPv6 /64: an
// IPv6 host is given a /64, so that counting its addresses one by one would let one host
// be as many clients as it likes.
func TestRemoteHostIPv6Prefix(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.2:4000":                 "127.0.0.2",
		"[2001:db8:1:2::1]:4000":         "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:1:2:3]:4001": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:4000":         "2001:db8:1:3::/64",
		"[::ffff:10.0.0.1]:80":           "10.0.0.1",
		"not an address":                 "not an address",
	} {
		if got := remoteHost(addr); got != want {
			t.Errorf("remoteHost(%q) = %q, want %q", addr, got, want)
		}
	}
}
