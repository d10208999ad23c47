package fanout

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// keyOnlyDeletes is a source/memory Source whose watches send a delete with the key
// alone and say so (informer.Event.LastStateUnknown), as source/etcd does for a delete
// behind a compaction and source/postgres for a row deleted under the default replica
// identity.
type keyOnlyDeletes struct {
	*memory.Source[string, *wiretest.Obj]
}

func (s keyOnlyDeletes) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[*wiretest.Obj], error) {
	w, err := s.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return informer.FuncWatch(func() (informer.Event[*wiretest.Obj], error) {
		ev, err := w.Next()
		if err == nil && ev.Type == informer.Deleted {
			ev.Object, ev.LastStateUnknown = &wiretest.Obj{Name: ev.Object.Name}, true
		}
		return ev, err
	}, w.Stop), nil
}

// lastStateSource returns a source of key-only deletes that holds a=1 (revision 1).
func lastStateSource() keyOnlyDeletes {
	src := keyOnlyDeletes{memory.New(wiretest.ObjName, memory.Options{})}
	wiretest.Put(src.Source, "a", "1")
	return src
}

// updateA updates a to 2 (revision 2) and waits until each mirror's handler had the
// update: a Server over an ordered upstream may otherwise log the update and the delete
// after it as one batch, the delete alone.
func updateA(t *testing.T, src keyOnlyDeletes, mirrors ...*wiretest.Mirror) {
	t.Helper()
	wiretest.Put(src.Source, "a", "2")
	for _, m := range mirrors {
		m.Rec.Expect(t, "add*a=1", "update a=1→2")
	}
}

// deleteA deletes a (revision 3) and checks that each mirror's handler was given a's
// last state, as an observed delete; then it adds b=1 (4), alone in its revision, the
// barrier after which nothing else may have come.
func deleteA(t *testing.T, src keyOnlyDeletes, mirrors ...*wiretest.Mirror) {
	t.Helper()
	src.Delete("a")
	for _, m := range mirrors {
		m.Rec.ExpectNext(t, "delete a=2")
	}
	wiretest.Put(src.Source, "b", "1")
	for _, m := range mirrors {
		m.Rec.ExpectNext(t, "add b=1")
		m.Rec.ExpectNoMore(t)
		if errs := m.Rec.Errors(); len(errs) > 0 {
			t.Errorf("%s reported %v", m.Inf.Name(), errs)
		}
	}
}

// passThroughOf serves lw with a PassThrough on loopback until the test ends.
func passThroughOf(t *testing.T, lw informer.ListerWatcher[*wiretest.Obj]) *httptest.Server {
	t.Helper()
	pt := NewPassThrough(lw, PassThroughOptions[*wiretest.Obj]{})
	ts := httptest.NewServer(pt)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
		defer cancel()
		_ = pt.Shutdown(ctx)
		ts.Close()
	})
	return ts
}

// A PassThrough over a source that sends a delete's key alone says so on the wire (the
// frame's lastStateUnknown), and a Client passes it on: a client informer's OnDelete gets
// the state its cache held, as the upstream informer's would, directly and through a
// second PassThrough over a Client of the first.
func TestPassThroughDeleteOfKeyAloneSaysSo(t *testing.T) {
	t.Run("frame", func(t *testing.T) {
		src := lastStateSource()
		ts := passThroughOf(t, src)
		wiretest.Put(src.Source, "a", "2")
		src.Delete("a")
		st := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion=2")
		want := `{"type":"DELETED","resourceVersion":"3","lastStateUnknown":true,"object":{"name":"a","val":""}}`
		if got := st.Line(t); got != want {
			t.Fatalf("the delete's frame:\n got %s\nwant %s", got, want)
		}
	})
	for name, framing := range map[string]httpsource.Framing{"ndjson": httpsource.NDJSON, "sse": httpsource.ServerSentEvents} {
		t.Run("client "+name, func(t *testing.T) {
			src := lastStateSource()
			ts := passThroughOf(t, src)
			client := syncedMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{Framing: framing}).Ordered(), "client")
			updateA(t, src, client)
			deleteA(t, src, client)
		})
	}
	t.Run("two pass-throughs", func(t *testing.T) {
		src := lastStateSource()
		first := passThroughOf(t, src)
		second := passThroughOf(t, newTestClient(t, first.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered())
		client := syncedMirror(t, newTestClient(t, second.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "client")
		updateA(t, src, client)
		deleteA(t, src, client)
	})
}

// A Server whose informer's source sends a delete's key alone sends the last state its
// informer held (the state its own log holds), with no mark: a client, old or new, gets
// it whole. Over an ordered upstream and an unordered one, through a PassThrough over a
// Client of the Server, and down a chain whose first link is a PassThrough (the informer
// in the middle reads the mark from the wire).
func TestServerDeleteOfKeyAloneSendsTheLastState(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		name := "upstream revisions"
		if !ordered {
			name = "own numbering"
		}
		t.Run(name, func(t *testing.T) {
			src := lastStateSource()
			var lw informer.ListerWatcher[*wiretest.Obj] = src
			if !ordered {
				lw = unordered{src}
			}
			up := &upstream{Mirror: syncedMirror(t, lw, "upstream"), src: src.Source}
			_, ts := serve(t, up, ServerOptions[*wiretest.Obj]{})
			client := syncedMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}), "client")
			updateA(t, src, up.Mirror, client)
			deleteA(t, src, up.Mirror, client)
			if ordered {
				st := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion=2")
				want := `{"type":"DELETED","resourceVersion":"3","object":{"name":"a","val":"2"}}`
				if got := st.Line(t); got != want {
					t.Fatalf("the delete's frame:\n got %s\nwant %s", got, want)
				}
			}
		})
	}
	t.Run("before a PassThrough", func(t *testing.T) {
		src := lastStateSource()
		up := &upstream{Mirror: syncedMirror(t, src, "upstream"), src: src.Source}
		_, ts := serve(t, up, ServerOptions[*wiretest.Obj]{})
		pt := passThroughOf(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered())
		client := syncedMirror(t, newTestClient(t, pt.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "client")
		updateA(t, src, up.Mirror, client)
		deleteA(t, src, up.Mirror, client)
	})
	t.Run("after a PassThrough", func(t *testing.T) {
		src := lastStateSource()
		pt := passThroughOf(t, src)
		middle := syncedMirror(t, newTestClient(t, pt.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "middle")
		_, ts := serve(t, &upstream{Mirror: middle, src: src.Source}, ServerOptions[*wiretest.Obj]{})
		client := syncedMirror(t, newTestClient(t, ts.URL, httpsource.ClientOptions[*wiretest.Obj]{}).Ordered(), "client")
		updateA(t, src, middle, client)
		deleteA(t, src, middle, client)
	})
}
