package fanout

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/wiretest"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// A replica that shuts down gracefully answers 503 with a Retry-After; a client with
// another replica to go to goes there at once, without waiting the delay, which holds
// back requests to the replica that gave it only.
func TestFanoutFailoverFromShuttingDownReplicaAtOnce(t *testing.T) {
	const retryAfter = 5 * time.Second
	src := memory.New(wiretest.ObjName, memory.Options{})
	putRound(src, 0)
	opts := ServerOptions[*wiretest.Obj]{ServeOptions: ServeOptions{RetryAfter: retryAfter}}
	srvA, tsA, _ := startReplica(t, startUpstream(t, src, "a", true), opts)
	_, tsB, _ := startReplica(t, startUpstream(t, src, "b", true), opts)
	c := newTestClient(t, tsA.URL, httpsource.ClientOptions[*wiretest.Obj]{StreamingList: true, FailoverURLs: []string{tsB.URL}})
	d := wiretest.NewMirror(t, c.Ordered(), "mirror", nil)
	mirrorConverge(t, d, src)

	ctx, cancel := context.WithTimeout(context.Background(), wiretest.WaitTimeout)
	defer cancel()
	if err := srvA.Shutdown(ctx); err != nil { // tsA stays up: it answers 503
		t.Fatal(err)
	}
	start := time.Now()
	last := putRound(src, 1)
	wctx, wcancel := context.WithTimeout(context.Background(), retryAfter/2)
	defer wcancel()
	if err := d.Inf.WaitForRevision(wctx, strconv.FormatInt(last, 10)); err != nil {
		t.Fatalf("the client had not reached the write at replica B %v after replica A shut down (its 503 asked for %v): %v", time.Since(start).Round(time.Millisecond), retryAfter, err)
	}
	if c.URL() != tsB.URL {
		t.Errorf("the client's URL is %s, want replica B's, %s", c.URL(), tsB.URL)
	}
}
