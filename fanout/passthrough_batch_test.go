package fanout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/informer-go/informer/internal/wiretest"

	"github.com/informer-go/informer"
	httpsource "github.com/informer-go/informer/source/http"
)

// batchedSource is a ListerWatcher whose one watch delivers events and says, as
// source/etcd's does for a transaction, which of them are followed by more at their
// revision.
type batchedSource struct {
	events []informer.Event[*wiretest.Obj]
	more   []bool
}

func (s *batchedSource) List(context.Context, informer.ListOptions) (informer.List[*wiretest.Obj], error) {
	return informer.List[*wiretest.Obj]{Revision: "4"}, nil
}

func (s *batchedSource) Watch(ctx context.Context, _ informer.WatchOptions) (informer.Watch[*wiretest.Obj], error) {
	return &batchedWatch{s: s, ctx: ctx, i: -1}, nil
}

type batchedWatch struct {
	s   *batchedSource
	ctx context.Context
	i   int
}

func (w *batchedWatch) Next() (informer.Event[*wiretest.Obj], error) {
	if w.i+1 >= len(w.s.events) {
		<-w.ctx.Done()
		return informer.Event[*wiretest.Obj]{}, w.ctx.Err()
	}
	w.i++
	return w.s.events[w.i], nil
}

func (w *batchedWatch) MoreAtRevision() bool { return w.i >= 0 && w.s.more[w.i] }
func (w *batchedWatch) Stop()                {}

// A PassThrough over a source whose watch groups the changes of one revision (an etcd
// transaction) sends them as a batch, every change but the last with the partial mark,
// so that a Client's WaitForRevision does not count the revision reached halfway.
func TestPassThroughSendsSourceBatches(t *testing.T) {
	ev := func(name, rev string) informer.Event[*wiretest.Obj] {
		return informer.Event[*wiretest.Obj]{Type: informer.Modified, Object: &wiretest.Obj{Name: name, Val: "v"}, Revision: rev}
	}
	src := &batchedSource{
		events: []informer.Event[*wiretest.Obj]{ev("a", "5"), ev("b", "5"), ev("c", "5"), ev("d", "6"), ev("e", "7"), ev("f", "7")},
		more:   []bool{true, true, false, false, true, false},
	}
	ts := httptest.NewServer(NewPassThrough[*wiretest.Obj](src, PassThroughOptions[*wiretest.Obj]{}))
	t.Cleanup(ts.Close)
	st := openBounded(t, ts.URL+"?watch=1&resourceVersion=4")
	defer st.Close()
	for i, want := range []string{"a@5~", "b@5~", "c@5", "d@6", "e@7~", "f@7"} {
		var name, rev string
		fmt.Sscanf(want, "%1s@%s", &name, &rev)
		frame := fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q,"object":{"name":%q,"val":"v"}}`, rev, name)
		if got := st.Line(t); got != frame {
			t.Fatalf("frame %d:\n got %s\nwant %s", i, got, frame)
		}
	}
}

// A PassThrough in front of a Client of a fan-out Server (a proxy tier) passes the Server's
// batches on as batches: the Client's watch says which events share a revision, and the
// PassThrough marks them again.
func TestPassThroughPassesClientBatchesOn(t *testing.T) {
	frame := func(name, rev string) string {
		return fmt.Sprintf(`{"type":"MODIFIED","resourceVersion":%q,"object":{"name":%q,"val":"v"}}`, rev, name)
	}
	upstream := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for _, l := range []string{frame("a", "5~"), frame("b", "5~"), frame("c", "5"), frame("d", "6")} {
			fmt.Fprintln(w, l)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	client, err := httpsource.NewClient[*wiretest.Obj](upstream.URL, httpsource.ClientOptions[*wiretest.Obj]{})
	if err != nil {
		t.Fatal(err)
	}
	ts := serveFunc(t, NewPassThrough[*wiretest.Obj](client, PassThroughOptions[*wiretest.Obj]{}).ServeHTTP)
	st := openBounded(t, ts.URL+"?watch=1&resourceVersion=4")
	defer st.Close()
	for i, want := range []string{frame("a", "5~"), frame("b", "5~"), frame("c", "5"), frame("d", "6")} {
		if got := st.Line(t); got != want {
			t.Fatalf("frame %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
