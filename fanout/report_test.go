package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/clock"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
	"github.com/informer-go/informer/source/memory"
)

// warns returns the Warn lines logged to log so far.
func warns(log *testkit.LogBuffer) []string {
	var ws []string
	for l := range strings.Lines(log.String()) {
		if strings.Contains(l, "level=WARN") {
			ws = append(ws, strings.TrimSpace(l))
		}
	}
	return ws
}

// waitWarns waits until n Warn lines are logged to log and returns them.
func waitWarns(t *testing.T, log *testkit.LogBuffer, n int) []string {
	t.Helper()
	testkit.Until(t, fmt.Sprintf("%d Warn lines", n), time.Millisecond, func() bool { return len(warns(log)) >= n })
	return warns(log)
}

// failBad is an Encode that fails for an object whose value starts with "bad".
func failBad(o *wiretest.Obj) ([]byte, error) {
	if strings.HasPrefix(o.Val, "bad") {
		return nil, errors.New("cannot encode a bad value")
	}
	return json.Marshal(o)
}

// With no ErrorHandler a Server's failures show at the default level: a Warn line that
// names the informer, the object and what to do, at most one per kind per 10 s, which
// counts the ones left out.
func TestServerWarnsWithoutErrorHandler(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	var log testkit.LogBuffer
	clk := clock.NewFake(time.Unix(1000, 0))
	srv, _ := serve(t, up, ServerOptions[*wiretest.Obj]{
		Encode: failBad, MaxObjectSize: 1000, Clock: clk,
		ServeOptions: ServeOptions{Logger: log.Logger(slog.LevelInfo)},
	})
	wiretest.Put(up.src, "x1", "bad")
	first := waitWarns(t, &log, 1)[0]
	for _, want := range []string{
		`msg="fanout error (set ServeOptions.ErrorHandler to handle these)"`, "kind=encode",
		`fanout: server for informer \"upstream\": encoding object x1: cannot encode a bad value`,
		"fix the object or ServerOptions.Encode", "suppressed=0",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("first Warn line lacks %s:\n%s", want, first)
		}
	}
	for i := 2; i <= 20; i++ {
		wiretest.Put(up.src, fmt.Sprintf("x%d", i), "bad")
	}
	// Another kind has its own limit; its line also says the ones before it are done.
	wiretest.Put(up.src, "big", strings.Repeat("x", 2000))
	ws := waitWarns(t, &log, 2)
	if len(ws) != 2 || !strings.Contains(ws[1], "kind=too_large") || !strings.Contains(ws[1], "object big is 2") ||
		!strings.Contains(ws[1], "raise MaxObjectSize") {
		t.Fatalf("after 19 more encode errors and a too large object, Warn lines:\n%s", strings.Join(ws, "\n"))
	}
	if n := srv.Stats().EncodeErrors; n != 20 {
		t.Errorf("Stats.EncodeErrors = %d, want 20", n)
	}
	clk.Step(10 * time.Second)
	wiretest.Put(up.src, "x21", "bad")
	ws = waitWarns(t, &log, 3)
	if len(ws) != 3 || !strings.Contains(ws[2], "kind=encode") || !strings.Contains(ws[2], "object x21") || !strings.HasSuffix(ws[2], "suppressed=19") {
		t.Errorf("after the interval, Warn lines:\n%s", strings.Join(ws, "\n"))
	}
}

// With an ErrorHandler, the handler gets each error, which names the informer and the
// object, and nothing is logged at Warn.
func TestServerErrorHandlerGetsEachError(t *testing.T) {
	up := newUpstream(t, memory.Options{})
	wiretest.Put(up.src, "a", "1")
	var log testkit.LogBuffer
	reported := make(chan error, 8)
	serve(t, up, ServerOptions[*wiretest.Obj]{
		Encode: failBad,
		ServeOptions: ServeOptions{
			Logger: log.Logger(slog.LevelInfo), ErrorHandler: reportTo(reported),
		},
	})
	for i := range 3 {
		wiretest.Put(up.src, fmt.Sprintf("x%d", i), "bad")
	}
	for i := range 3 {
		err := testkit.Recv(t, reported, "an encode error")
		want := fmt.Sprintf(`fanout: server for informer "upstream": encoding object x%d: cannot encode a bad value (not served: clients keep its previous state; fix the object or ServerOptions.Encode)`, i)
		if err.Error() != want {
			t.Errorf("reported:\n%v\nwant:\n%s", err, want)
		}
	}
	if ws := warns(&log); len(ws) != 0 {
		t.Errorf("Warn lines with an ErrorHandler set:\n%s", strings.Join(ws, "\n"))
	}
}

// A key function that answers differently for an object it keyed before (the informer
// keyed it, then the server fails to) is reported with the informer's name and the
// object; the object is not served.
func TestServerReportsAKeyFunctionThatChangesItsMind(t *testing.T) {
	src := memory.New(wiretest.ObjName, memory.Options{})
	var mu sync.Mutex
	calls := map[string]int{}
	up := &upstream{src: src, Mirror: wiretest.NewMirror(t, unordered{src}, "upstream", func(o *informer.Options[string, *wiretest.Obj]) {
		o.Key = func(obj *wiretest.Obj) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			calls[obj.Name]++
			if obj.Name == "flaky" && calls[obj.Name] > 1 {
				return "", errors.New("no key today")
			}
			return obj.Name, nil
		}
	})}
	wiretest.Put(src, "a", "1")
	reported := make(chan error, 8)
	srv, _ := serve(t, up, ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{ErrorHandler: reportTo(reported)}})
	wiretest.Put(src, "flaky", "1")
	err := testkit.Recv(t, reported, "the key error")
	want := `fanout: server for informer "upstream": key of object &{Name:flaky Val:1}: no key today (not served; the informer keyed it before: a key function must answer the same for the same object)`
	if err.Error() != want {
		t.Errorf("reported:\n%v\nwant:\n%s", err, want)
	}
	if n := srv.Stats().EncodeErrors; n != 1 {
		t.Errorf("Stats.EncodeErrors = %d, want 1", n)
	}
}

// unknownEvents is a source whose watches send an event of a type no one knows.
type unknownEvents struct {
	*memory.Source[string, *wiretest.Obj]
}

func (unknownEvents) Watch(context.Context, informer.WatchOptions) (informer.Watch[*wiretest.Obj], error) {
	return informer.FuncWatch(func() (informer.Event[*wiretest.Obj], error) {
		return informer.Event[*wiretest.Obj]{Type: 99}, nil
	}, nil), nil
}

// A PassThrough whose source sends an event of an unknown type ends the watch with an
// ERROR event and, with no ErrorHandler, says so at Warn: which server, which client,
// and whose bug it is.
func TestPassThroughWarnsOfAnUnknownEvent(t *testing.T) {
	var log testkit.LogBuffer
	pt := NewPassThrough[*wiretest.Obj](unknownEvents{memory.New(wiretest.ObjName, memory.Options{})},
		PassThroughOptions[*wiretest.Obj]{ServeOptions: ServeOptions{Logger: log.Logger(slog.LevelInfo)}})
	ts := httptest.NewServer(pt)
	t.Cleanup(func() {
		_ = pt.Shutdown(context.Background())
		ts.Close()
	})
	st := wiretest.Open(t, ts.URL+"?watch=1&resourceVersion=1")
	if l := st.Line(t); !strings.Contains(l, `"type":"ERROR"`) || !strings.Contains(l, "fanout: watch: the source sent an event of unknown type EventType(99)") {
		t.Errorf("the watch's last line: %.200s", l)
	}
	w := waitWarns(t, &log, 1)[0]
	for _, want := range []string{"kind=unknown_event", `fanout: pass-through: watch of 127.0.0.1:`, ": the source sent an event of unknown type EventType(99) (the watch is ended with an ERROR event", "a bug of the source"} {
		if !strings.Contains(w, want) {
			t.Errorf("Warn line lacks %s:\n%s", want, w)
		}
	}
}
