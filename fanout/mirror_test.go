package fanout

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wire"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// The history is bounded in bytes as well as in changes: one large object updated many
// times does not pile up its versions.
func TestServerHistoryBytes(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "0")
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{HistoryBytes: 1 << 20})
	big := strings.Repeat("x", 100<<10)
	const n = 50 // 5 MB of versions of one 100 KiB object
	for i := range n {
		wiretest.Put(up.src, "a", fmt.Sprint(i)+big)
	}
	// The log compacts right after it appends: wait for both.
	wiretest.Eventually(t, "the server to take the changes and drop the old ones", func() bool {
		return srv.src.Revision() == n+1 && srv.src.Revision()-srv.src.CompactedRevision() <= 10
	})
	kept := srv.src.Revision() - srv.src.CompactedRevision()
	if kept < 9 || kept > 10 {
		t.Errorf("the server keeps %d versions of 100 KiB, want the 9 or 10 that fit in 1 MiB", kept)
	}
	// A watch from a revision that has left the history: 410; from one within it: served.
	resp := wiretest.Get(t, nil, ts.URL+"?watch=1&resourceVersion="+rev(srv, 2), nil)
	if b := wiretest.Body(t, resp); resp.StatusCode != 410 {
		t.Errorf("watch from a dropped revision: %d %.100s", resp.StatusCode, b)
	}
	st := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion="+rev(srv, n))
	if l := st.Line(t); !strings.HasPrefix(l, fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q`, rev(srv, n+1))) {
		t.Errorf("watch from a kept revision: %.80s", l)
	}
}

// An object larger than MaxObjectSize is refused, reported and counted; clients keep its
// previous state and everything else is served.
func TestServerObjectTooLarge(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	reported := make(chan error, 4)
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{MaxObjectSize: 1000, ServeOptions: ServeOptions{ErrorHandler: func(err error) { reported <- err }}})
	st := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion="+rev(srv, 1))
	wiretest.Put(up.src, "a", strings.Repeat("x", 2000))
	wiretest.Put(up.src, "b", "1")
	if l := st.Line(t); !strings.HasPrefix(l, `{"type":"ADDED"`) || !strings.Contains(l, `"name":"b"`) {
		t.Errorf("after a refused object: %.80s, want b's ADDED", l)
	}
	if err := testkit.Recv(t, reported, "the refused object's error"); !strings.Contains(err.Error(), "object a is 2") || !strings.Contains(err.Error(), "MaxObjectSize (1000)") {
		t.Errorf("reported %v", err)
	}
	if n := srv.Stats().TooLarge; n != 1 {
		t.Errorf("Stats.TooLarge = %d, want 1", n)
	}
	if b := wiretest.Body(t, wiretest.Get(t, nil, ts.URL, nil)); !strings.Contains(b, `{"name":"a","val":"1"}`) {
		t.Errorf("list after a refused object: %.200s, want a's previous state", b)
	}
}

// The largest object a Server serves by default reaches a Client with default options:
// its frame fits the Client's frame limit.
func TestServerLargestObjectReachesClient(t *testing.T) {
	if DefaultMaxObjectSize+wire.MaxEnvelope > httpsource.DefaultMaxFrameSize {
		t.Fatalf("DefaultMaxObjectSize %d + envelope %d > DefaultMaxFrameSize %d", DefaultMaxObjectSize, wire.MaxEnvelope, httpsource.DefaultMaxFrameSize)
	}
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	srv, ts := serve(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{ErrorHandler: func(err error) { t.Error(err) }}})
	w, err := newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Watch(context.Background(), informer.WatchOptions{Revision: rev(srv, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	val := strings.Repeat("x", DefaultMaxObjectSize-len(`{"name":"a","val":""}`)) // exactly the limit
	wiretest.Put(up.src, "a", val)
	ev, err := w.Next()
	if err != nil || ev.Type != informer.Modified || len(ev.Object.Val) != len(val) {
		t.Fatalf("the largest object: %v %v", ev.Type, err)
	}
	if n := srv.Stats().TooLarge; n != 0 {
		t.Errorf("Stats.TooLarge = %d", n)
	}
}

// After a burst that overflows the Server's handler queue, then quiet, a client reaches
// the burst's last revision: an overflow never loses the revision marker the Server
// waits for before it logs the changes it holds.
func TestServerBurstThenQuiet(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	wiretest.Put(src, "a", "0")
	up := startUpstream(t, src, "upstream", true)
	_, ts, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{QueueLength: 8})
	d := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{StreamingList: true}).Ordered(), "mirror", nil)
	var last int64
	for i := range 200 {
		last = wiretest.Put(src, fmt.Sprintf("k%03d", i%50), fmt.Sprint(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := d.Inf.WaitForRevision(ctx, fmt.Sprint(last)); err != nil {
		t.Fatalf("WaitForRevision(%d) after a burst then quiet: %v", last, err)
	}
}
