package httpsource

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
)

// A Client outlives the informers built over it: a program keeps one per URL and builds
// an informer over it again (each term of a leader, say). An informer that stopped, once
// the program drops it, is collected with its cache while another runs over the same
// Client; its watch is over at the server, and an object that does not decode reaches
// the running informer alone.
func TestClientDoesNotKeepStoppedInformers(t *testing.T) {
	var open, lists atomic.Int64
	lines := make(chan string) // what the open watch sends next
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "" {
			if lists.Add(1) == 1 {
				_, _ = io.WriteString(w, listBody("1", o("a", "1"), o("b", "1")))
			} else { // the second informer's: one object does not decode
				_, _ = io.WriteString(w, listBody("1", o("a", "1"), o("b", "1"), `{"name":7}`))
			}
			return
		}
		open.Add(1)
		defer open.Add(-1)
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		for {
			select {
			case l := <-lines:
				_, _ = io.WriteString(w, l)
				http.NewResponseController(w).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close() })
	c := newTestClient(t, ts.URL, ClientOptions[*wiretest.Obj]{})

	first, firstRec := wiretest.SyncedThenStopped(t, c, "a=1 b=1")
	testkit.Until(t, "the stopped informer's watch to end at the server", time.Millisecond, func() bool { return open.Load() == 0 })
	second := wiretest.NewMirror(t, c, "second", nil)
	if !testkit.Collected(first) {
		t.Fatal("the stopped informer is still reachable after the program dropped it, while another runs over its Client: the Client keeps it")
	}
	second.Rec.ExpectNextUnordered(t, "add*a=1", "add*b=1")
	testkit.Until(t, "the running informer's watch", time.Millisecond, func() bool { return open.Load() == 1 })
	lines <- ev("ADDED", "2", o("c", "1"))
	second.Rec.ExpectNext(t, "add c=1")
	var decode *DecodeError
	if errs := second.Rec.Errors(); len(errs) != 1 || !errors.As(errs[0], &decode) {
		t.Fatalf("the running informer got errors %v, want the decode error of its list", errs)
	}
	if errs := firstRec.Errors(); len(errs) != 0 {
		t.Fatalf("the stopped informer's error handler was called: %v", errs)
	}
}
