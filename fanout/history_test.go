package fanout

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// history is the writes of one history of an upstream, one per revision from 1: "name=val".
type history []string

// stateAt returns the state of the history at revision rev, as wiretest.State renders it.
func (h history) stateAt(rev int) string {
	state := map[string]string{}
	for _, w := range h[:rev] {
		name, val, _ := strings.Cut(w, "=")
		state[name] = val
	}
	var s []string
	for _, name := range slices.Sorted(maps.Keys(state)) {
		s = append(s, name+"="+state[name])
	}
	return strings.Join(s, " ")
}

// write puts the writes of h from revision from on into src; with srv set, one at a
// time, each once srv has reached the one before, so that each is a revision srv held.
func (h history) write(t testing.TB, src *memory.Source[string, *wiretest.Obj], from int, srv *Server[string, *wiretest.Obj]) {
	t.Helper()
	for i, w := range h[from-1:] {
		name, val, _ := strings.Cut(w, "=")
		wiretest.Put(src, name, val)
		if srv != nil {
			want := fmt.Sprint(from + i)
			wiretest.Eventually(t, "the server at revision "+want, func() bool { return srv.Revision() == want })
		}
	}
}

// plainRevision returns a client's revision without the tag of its history.
func plainRevision(rev string) string {
	plain, _, _ := strings.Cut(rev, "@")
	return plain
}

// presented returns the state a client informer presents and its revision, from one
// snapshot.
func presented(d *wiretest.Mirror) (rev, state string) {
	sn := d.Inf.Snapshot()
	var objs []*wiretest.Obj
	for _, o := range sn.All() {
		objs = append(objs, o)
	}
	return plainRevision(sn.Revision()), wiretest.State(objs)
}

// Two histories of one upstream: the one the clients follow, and the one of a backup taken
// at revision 2 that replaces it (a restore), whose revisions 3 to 6 hold other states.
var (
	oldHistory = history{"a=payments:1", "b=search:1", "a=payments:2", "c=payments:1", "b=search:2", "d=payments:1"}
	newHistory = history{"a=payments:1", "b=search:1", "e=payments:1", "a=payments:5", "c=search:3", "f=payments:1", "b=payments:2"}
)

// A client cut off from its server while the server's upstream is restored from a backup,
// which comes back once the new history has gone past its revision, resumes from a
// revision the new history has too, naming another state: the server tells the two
// apart (by the history tag of the revision; without a tag, because the revision is at or
// before the newest the server served of the history it left) and answers 410, and the
// client lists the new history rather than hold the old state under a new revision.
func TestClientBackAfterRestoreListsTheNewHistory(t *testing.T) {
	for _, tags := range []bool{true, false} {
		t.Run(fmt.Sprintf("tags=%v", tags), func(t *testing.T) {
			current := memory.New(wiretest.ObjName, memory.Options{})
			backup := memory.New(wiretest.ObjName, memory.Options{})
			oldHistory.write(t, current, 1, nil)
			newHistory[:2].write(t, backup, 1, nil)
			lw := &restorable{}
			lw.cur.Store(current)
			up := &upstream{Mirror: wiretest.NewMirror(t, lw, "upstream", nil), src: current}
			up.settle(t)
			srv, ts, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
			proxy := testkit.NewProxy(t, ts.Listener.Addr().String())
			var copts httpsource.ClientOptions[*wiretest.Obj]
			if !tags {
				copts.PrepareRequest = withoutHistoryTags
			}
			client := wiretest.NewMirror(t, newTestClient(t, "http://"+proxy.Addr(), copts).Ordered(), "client", nil)
			mirrorConverge(t, client, current)

			proxy.Cut()
			lw.restore(backup)
			wiretest.Eventually(t, "the server at revision 2 of the new history", func() bool { return srv.Revision() == "2" })
			newHistory.write(t, backup, 3, srv) // to revision 7, past the client's 6
			proxy.Resume()

			wiretest.Until(t, "the client at revision 7", func() bool {
				rev, _ := presented(client)
				return rev == "7"
			}, client.Rec.Changed)
			if rev, state := presented(client); state != newHistory.stateAt(7) {
				t.Fatalf("the client presents %q at revision %s, want the new history's state there, %q (the old history's at 6 was %q)", state, rev, newHistory.stateAt(7), oldHistory.stateAt(6))
			}
		})
	}
}

// A client whose replica goes away while another replica has not yet noticed a restore
// of their upstream fails over to that replica from a revision of the new history, which
// the other replica's history holds too, with another state: the replica answers 410 (the
// tags differ), and the client lists there (the old history, until the replica relists)
// rather than apply the old history's changes on top of the new history's state.
func TestClientFailoverToReplicaBehindARestore(t *testing.T) {
	current := memory.New(wiretest.ObjName, memory.Options{})
	backup := memory.New(wiretest.ObjName, memory.Options{})
	oldHistory[:2].write(t, current, 1, nil)
	newHistory[:2].write(t, backup, 1, nil)
	lwA, lwB := &restorable{}, &restorable{}
	lwA.cur.Store(current)
	lwB.cur.Store(current)
	upA := &upstream{Mirror: wiretest.NewMirror(t, lwA, "upstream A", nil), src: current}
	upB := &upstream{Mirror: wiretest.NewMirror(t, lwB, "upstream B", nil), src: current}
	upA.settle(t)
	upB.settle(t)
	srvA, tsA, killA := startReplica(t, upA, ServerOptions[*wiretest.Obj]{})
	srvB, tsB, _ := startReplica(t, upB, ServerOptions[*wiretest.Obj]{})
	oldHistory.write(t, current, 3, srvB) // each of its revisions one B held
	client := wiretest.NewMirror(t, newTestClient(t, tsA.URL, httpsource.ClientOptions[*wiretest.Obj]{FailoverURLs: []string{tsB.URL}}).Ordered(), "client", nil)
	mirrorConverge(t, client, current)

	// A's informer lists the backup; B's, whose watch the restore ends too, lists the
	// old history again: B has not noticed.
	lwA.restore(backup)
	wiretest.Until(t, "the client to list the new history at A", func() bool {
		rev, _ := presented(client)
		return rev == "2"
	}, client.Rec.Changed)
	// Revision 3 of the new history, which the client's watch at A delivers.
	newHistory[:3].write(t, backup, 3, srvA)
	wiretest.Until(t, "the client at revision 3 of the new history", func() bool {
		rev, state := presented(client)
		return rev == "3" && state == newHistory.stateAt(3)
	}, client.Rec.Changed)
	wiretest.Eventually(t, "replica B at revision 6 of the old history", func() bool { return srvB.Revision() == "6" })

	killA()
	wiretest.Until(t, "the client to move from revision 3", func() bool {
		rev, _ := presented(client)
		return rev != "3"
	}, client.Rec.Changed)
	rev, state := presented(client)
	var n int
	if _, err := fmt.Sscan(rev, &n); err != nil || n < 1 || n > len(oldHistory) {
		t.Fatalf("the client presents revision %q after the failover, want one of the old history's (B's)", rev)
	}
	if state != oldHistory.stateAt(n) {
		t.Fatalf("the client presents %q at revision %s after failing over to B, a state of neither history (old: %q, new at 3: %q)", state, rev, oldHistory.stateAt(n), newHistory.stateAt(3))
	}
}

// The tag of a revision goes down a chain unchanged: a Server whose informer reads
// another Server, and a PassThrough over a Client of one, send the first Server's tagged
// revisions to a client that asks for tags, and plain ones to a client that does not; a
// resume from a revision with another tag is answered 410 all along the chain.
func TestHistoryTagsGoDownAChain(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	oldHistory.write(t, src, 1, nil)
	up := startUpstream(t, src, "upstream", true)
	_, tsTop, _ := startReplica(t, up, ServerOptions[*wiretest.Obj]{})
	mid := &upstream{Mirror: wiretest.NewMirror(t, newTestClient(t, tsTop.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "mid", nil), src: src}
	mid.settle(t)
	_, tsMid, _ := startReplica(t, mid, ServerOptions[*wiretest.Obj]{})
	pt := NewPassThrough[*wiretest.Obj](newTestClient(t, tsTop.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), PassThroughOptions[*wiretest.Obj]{})
	pass := httptest.NewServer(pt)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		defer cancel()
		_ = pt.Shutdown(ctx)
		pass.Close()
	})

	listRev := func(url string, tagged bool) string {
		t.Helper()
		h := http.Header{}
		if tagged {
			h.Set("Informer-History", "1")
		}
		resp := wiretest.Get(t, nil, url, h)
		body := wiretest.Body(t, resp)
		_, after, ok := strings.Cut(body, `"resourceVersion":"`)
		rev, _, _ := strings.Cut(after, `"`)
		if resp.StatusCode != http.StatusOK || !ok {
			t.Fatalf("list at %s: %d %s", url, resp.StatusCode, body)
		}
		return rev
	}
	tagged := listRev(tsTop.URL, true)
	if rev, tag, _ := strings.Cut(tagged, "@"); rev != "6" || tag == "" {
		t.Fatalf("list at the first Server, asking for tags: revision %q, want 6 with its history's tag", tagged)
	}
	for name, url := range map[string]string{"first server": tsTop.URL, "chained server": tsMid.URL, "pass-through": pass.URL} {
		if got := listRev(url, true); got != tagged {
			t.Errorf("list at the %s asking for tags: revision %q, want the first Server's %q", name, got, tagged)
		}
		if got := listRev(url, false); got != "6" {
			t.Errorf("list at the %s without asking for tags: revision %q, want 6", name, got)
		}
		resp := wiretest.Get(t, nil, url+"?watch=1&resourceVersion=6@0", http.Header{"Informer-History": {"1"}})
		if body := wiretest.Body(t, resp); resp.StatusCode != http.StatusGone {
			t.Errorf("watch at the %s from revision 6 of another history: %d %s, want 410", name, resp.StatusCode, body)
		}
	}
	// The chained client's cache converges, its revision tagged as the first Server's.
	d := syncedMirror(t, newTestClient(t, tsMid.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "client")
	mirrorConverge(t, d, src)
	if got := d.Inf.Snapshot().Revision(); got != tagged {
		t.Errorf("the chained client is at %q, want %q", got, tagged)
	}
}
