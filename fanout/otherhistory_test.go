package fanout

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// restorable is an ordered source that can be swapped for a backup of itself, as an etcd
// restored from a snapshot is: the same identity, an older revision, and a history that
// goes on from there apart from the one the informer followed.
type restorable struct {
	cur atomic.Pointer[memory.Source[string, *wiretest.Obj]]
}

func (r *restorable) List(ctx context.Context, opts informer.ListOptions) (informer.List[*wiretest.Obj], error) {
	return r.cur.Load().List(ctx, opts)
}

func (r *restorable) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*wiretest.Obj], error) {
	return r.cur.Load().Watch(ctx, opts)
}

func (r *restorable) CompareRevisions(a, b string) (int, error) {
	return r.cur.Load().CompareRevisions(a, b)
}

// restore puts backup in the place of the current source and ends the watches of the
// current one as a source that sees its revision go back does.
func (r *restorable) restore(backup *memory.Source[string, *wiretest.Obj]) {
	old := r.cur.Swap(backup)
	old.DropWatches(fmt.Errorf("%w: the source went back to revision %d", informer.ErrOtherHistory, backup.Revision()))
}

// A Server whose informer lists again into another history of its source (restored from a
// backup, its revisions back behind those served) ends every watch, filtered or not, with
// 410, before it sends anything of the new history: its clients list again and carry the
// new history's revisions, never a state of the new history under a revision of the old.
func TestServerEndsWatchesOnAnotherHistory(t *testing.T) {
	current := memory.New(wiretest.ObjName, memory.Options{})
	backup := memory.New(wiretest.ObjName, memory.Options{})
	for _, src := range []*memory.Source[string, *wiretest.Obj]{current, backup} {
		wiretest.Put(src, "a", "payments:1")
		wiretest.Put(src, "b", "search:1") // both at revision 2: the backup's
	}
	wiretest.Put(current, "a", "payments:2")
	wiretest.Put(current, "c", "payments:1")
	wiretest.Put(current, "b", "search:2")
	wiretest.Put(current, "d", "payments:1") // revision 6: the history the backup loses

	lw := &restorable{}
	lw.cur.Store(current)
	withIndexes := func(o *informer.Options[string, *wiretest.Obj]) { o.Indexers = testIndexes() }
	up := &upstream{Mirror: wiretest.NewMirror(t, lw, "upstream", withIndexes), src: current}
	up.settle(t)
	opts := filterOptions()
	opts.CatchUpWait = time.Hour // a request for a revision of the old history must not wait for it
	srv, ts, _ := startReplica(t, up, opts)
	wiretest.Eventually(t, "the server at revision 6", func() bool { return srv.Revision() == "6" })
	client := wiretest.NewMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "client", nil)
	mirrorConverge(t, client, current)
	plain := openBounded(t, ts.URL+"?watch=true&resourceVersion=6")
	filtered := openBounded(t, ts.URL+"?watch=true&resourceVersion=6&index=team&value=payments")

	lw.restore(backup)
	wiretest.Put(backup, "e", "payments:1") // revision 3 of the new history

	// Both watches end the same way, and say why.
	for name, st := range map[string]*wiretest.Stream{"unfiltered": plain, "filtered": filtered} {
		line := st.Line(t)
		if !strings.Contains(line, `"type":"ERROR"`) || !strings.Contains(line, `"code":410`) || !strings.Contains(line, "listed another history of its source") {
			t.Errorf("%s watch from revision 6 of the old history: first line %s, want an ERROR 410 that says the informer listed another history", name, line)
		}
		if line := st.Line(t); line != "EOF" {
			t.Errorf("%s watch: after the ERROR: %s, want the end of the stream", name, line)
		}
	}
	// A list at least as new as a revision of the old history is answered at once.
	resp := wiretest.Get(t, &http.Client{Timeout: wiretest.WaitTimeout}, ts.URL+"?resourceVersion=6", nil)
	if body := wiretest.Body(t, resp); resp.StatusCode != http.StatusGone || !strings.Contains(body, "another history") {
		t.Errorf("list at least as new as revision 6 of the old history: %d %s, want 410 that says the history changed", resp.StatusCode, body)
	}
	mirrorConverge(t, client, backup)
	wiretest.Eventually(t, "the client at the new history's revision", func() bool {
		return httpsource.PlainRevision(client.Inf.Snapshot().Revision()) == "3"
	})
	if got := srv.Revision(); got != "3" {
		t.Errorf("server at %q after the restore, want 3", got)
	}
}
