package httpsource

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
)

// TestMain checks that no goroutine is left when the tests end, with patience.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

func newTestClient(t testing.TB, url string, opts ClientOptions[*wiretest.Obj]) *Client[*wiretest.Obj] {
	t.Helper()
	c, err := NewClient(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

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
