package httpsource

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

// unordered hides a source's RevisionComparer: an upstream whose revisions the informer
// (and so a Server over it) cannot order.
type unordered struct {
	informer.ListerWatcher[*obj]
}

// startUpstream starts an informer over a memory source, hiding the source's order
// unless ordered.
func startUpstream(t testing.TB, src *memory.Source[string, *obj], name string, ordered bool) *upstream {
	t.Helper()
	u := &upstream{src: src, rec: newRecorder()}
	var lw informer.ListerWatcher[*obj] = src
	if !ordered {
		lw = unordered{src}
	}
	inf, err := informer.New(lw, informer.Options[string, *obj]{
		Key: objKey, Name: name, Backoff: testBackoff, ErrorHandler: u.rec.onError,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddHandler(u.rec, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	u.inf = inf
	run(t, inf)
	return u
}

// startServer serves u's informer on a loopback server; kill stops both at once, as a
// crashed process would (open watches are cut).
func startReplica(t testing.TB, u *upstream, opts ServerOptions[*obj]) (srv *Server[string, *obj], ts *httptest.Server, kill func()) {
	t.Helper()
	srv, err := NewServer(u.inf, objKey, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts = httptest.NewServer(srv)
	killed := false
	kill = func() {
		if killed {
			return
		}
		killed = true
		ts.CloseClientConnections()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		ts.Close()
	}
	t.Cleanup(kill)
	waitSynced(t, srv)
	return srv, ts, kill
}

// Read-your-writes through the fan-out tier: a client informer that waits for the
// revision of a write to the upstream source sees the write.
func TestFanoutReadYourWrites(t *testing.T) {
	src := memory.New(objName, memory.Options{})
	put(src, "a", "1")
	up := startUpstream(t, src, "upstream", true)
	_, ts, _ := startReplica(t, up, ServerOptions[*obj]{})
	d := newDownstream(t, newTestClient(t, ts.URL, ClientOptions[*obj]{StreamingList: true}).Ordered(), "mirror", nil)
	converge(t, d, func() string { return state(src.Items()) })
	for i := range 20 {
		r := strconv.FormatInt(put(src, "k", fmt.Sprint(i)), 10)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		err := d.inf.WaitForRevision(ctx, r)
		cancel()
		if err != nil {
			t.Fatalf("WaitForRevision(%s): %v", r, err)
		}
		if got, ok := d.inf.Get("k"); !ok || got.Val != fmt.Sprint(i) {
			t.Fatalf("after WaitForRevision(%s) of the write k=%d the mirror reads %v: a stale read", r, i, got)
		}
	}
	// The mirror's revision is the upstream's own.
	until(t, "the mirror at the upstream's revision", func() bool {
		return d.inf.LastSyncRevision() == strconv.FormatInt(src.Revision(), 10)
	}, d.rec.ch)
}

// A Server over an upstream whose revisions are not ordered numbers them itself; a
// client's WaitForRevision refuses a revision of another numbering (the upstream's) with
// an error rather than return at once as if it were reached.
func TestFanoutOwnNumberingRefusesForeignRevision(t *testing.T) {
	src := memory.New(objName, memory.Options{})
	put(src, "a", "1")
	up := startUpstream(t, src, "upstream", false)
	srv, ts, _ := startReplica(t, up, ServerOptions[*obj]{})
	d := newDownstream(t, newTestClient(t, ts.URL, ClientOptions[*obj]{}).Ordered(), "mirror", nil)
	converge(t, d, func() string { return state(src.Items()) })
	r := strconv.FormatInt(put(src, "a", "2"), 10)
	err := d.inf.WaitForRevision(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "numbering") {
		t.Fatalf("WaitForRevision(%s) of the upstream's numbering: %v, want an error naming the other numbering", r, err)
	}
	// Its own revisions are fine.
	until(t, "the mirror to see a=2", func() bool { o, _ := d.inf.Get("a"); return o != nil && o.Val == "2" }, d.rec.ch)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := d.inf.WaitForRevision(ctx, srv.Revision()); err != nil {
		t.Fatalf("WaitForRevision(%s) of the server's own numbering: %v", srv.Revision(), err)
	}
}

// Two Servers over two informers of one ordered upstream serve the same revisions, so a
// watch started at one resumes at the other from any revision within its history.
func TestFanoutReplicasShareRevisions(t *testing.T) {
	src := memory.New(objName, memory.Options{})
	put(src, "a", "1")
	srvA, tsA, _ := startReplica(t, startUpstream(t, src, "a", true), ServerOptions[*obj]{})
	srvB, tsB, _ := startReplica(t, startUpstream(t, src, "b", true), ServerOptions[*obj]{})
	// One change at a time, so that each is a revision of both servers.
	r1 := put(src, "b", "1")
	eventually(t, "both servers at the upstream's revision", func() bool {
		return srvA.Revision() == fmt.Sprint(r1) && srvB.Revision() == fmt.Sprint(r1)
	})
	put(src, "a", "2")
	want := strconv.FormatInt(src.Revision(), 10)
	eventually(t, "both servers at the upstream's revision", func() bool {
		return srvA.Revision() == want && srvB.Revision() == want
	})
	// A watch at B from a revision A served: the changes after it, no 410.
	resp := rawGet(t, nil, fmt.Sprintf("%s?watch=1&resourceVersion=%d", tsB.URL, r1), nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch at replica B from revision %d: %d %s", r1, resp.StatusCode, b)
	}
	st := &rawStream{resp: resp, r: bufio.NewReader(resp.Body)}
	if got, want := st.line(t), fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q,"object":{"name":"a","val":"2"}}`, want); got != want {
		t.Fatalf("watch at replica B: %s, want %s", got, want)
	}
	_ = tsA
}
