package httpsource

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
)

// endlessBatch serves lists as empty at revision 10 and answers every watch with a batch
// at revision 11 that never ends: changes marked partial ("11~"), forever, each carrying
// an object of size bytes. lists counts the lists served.
func endlessBatch(t testing.TB, size int, lists *atomic.Int64) *httptest.Server {
	t.Helper()
	val := strings.Repeat("v", size)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "" {
			lists.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"metadata":{"resourceVersion":"10"},"items":[]}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		bw := bufio.NewWriterSize(w, 64<<10)
		for i := 0; r.Context().Err() == nil; i++ {
			if _, err := fmt.Fprintf(bw, `{"type":"ADDED","resourceVersion":"11~","object":{"name":"k%d","val":%q}}`+"\n", i, val); err != nil {
				return
			}
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

// A batch that never ends (changes marked as one revision, forever) is bounded by
// ClientOptions.MaxBatch and MaxBatchBytes: the watch ends with an error that matches
// informer.ErrBadInput and names the limit, having held no more than the limit.
func TestClientBatchBound(t *testing.T) {
	var lists atomic.Int64
	for _, tc := range []struct {
		name  string
		size  int
		opts  ClientOptions[*wiretest.Obj]
		limit string
	}{
		{"events", 10, ClientOptions[*wiretest.Obj]{MaxBatch: 1000}, "MaxBatch)"},
		{"bytes", 4 << 10, ClientOptions[*wiretest.Obj]{MaxBatchBytes: 1 << 20}, "MaxBatchBytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, endlessBatch(t, tc.size, &lists).URL, tc.opts)
			w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "10"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			ev, err := w.Next()
			if !errors.Is(err, informer.ErrBadInput) || !strings.Contains(err.Error(), tc.limit) {
				t.Fatalf("Next = %v, %v; want an error matching ErrBadInput naming %s", ev, err, tc.limit)
			}
			if held := cap(w.(*watch[*wiretest.Obj]).held); held > 2048 {
				t.Errorf("the watch held up to %d events of the batch, want at most 2048", held)
			}
		})
	}
}

// An informer over a server that streams one batch forever reports the bound's error
// and lists again, with its memory bounded.
func TestClientBatchBoundRelists(t *testing.T) {
	var lists atomic.Int64
	c := newTestClient(t, endlessBatch(t, 100, &lists).URL, ClientOptions[*wiretest.Obj]{MaxBatch: 500})
	d := wiretest.NewMirror(t, c, "endless-batch", nil)
	wiretest.Eventually(t, "the bound's error and a relist", func() bool {
		for _, err := range d.Rec.Errors() {
			if errors.Is(err, informer.ErrBadInput) && strings.Contains(err.Error(), "MaxBatch") {
				return lists.Load() >= 2
			}
		}
		return false
	})
	if n := d.Inf.Len(); n != 0 {
		t.Errorf("the cache holds %d objects of a batch that never ended, want 0", n)
	}
}

// A retryAfterSeconds too large for a time.Duration (≥ 9.22e9 s) is cut to MaxRetryAfter,
// in an ERROR event and in a response's Status body alike, never taken as no wait.
func TestRetryAfterSecondsOverflow(t *testing.T) {
	for _, secs := range []int{9_223_372_037, 1 << 62, 9_300_000_000} {
		err := statusEventError(&StatusError{Code: 429, Details: &StatusDetails{RetryAfterSeconds: secs}}, 5*time.Minute)
		if d, ok := informer.RetryAfterOf(err); !ok || d != 5*time.Minute {
			t.Errorf("ERROR event with retryAfterSeconds %d: delay %v (%v), want 5m", secs, d, ok)
		}
		resp := &http.Response{StatusCode: 429, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(fmt.Sprintf(`{"kind":"Status","code":429,"details":{"retryAfterSeconds":%d}}`, secs)))}
		if _, d := statusFromResponse(resp, 5*time.Minute); d != 5*time.Minute {
			t.Errorf("429 with retryAfterSeconds %d: delay %v, want 5m", secs, d)
		}
	}
}

// The adversarial benchmarks of the client (make adversarial) run only with -adversarial.
var adversarial = flag.Bool("adversarial", false, "run the adversarial benchmarks")

// BenchmarkAdversarialEndlessBatch: a server streams changes of 1 KiB marked as one
// revision ("11~") forever to a Client with MaxBatchBytes 16 MiB (the default is 256 MiB);
// reports the peak heap growth until the watch ends, and whether it ended with the bound's
// error.
func BenchmarkAdversarialEndlessBatch(b *testing.B) {
	if !*adversarial {
		b.Skip("run with -adversarial (make adversarial)")
	}
	const bound = 16 << 20
	var lists atomic.Int64
	c := newTestClient(b, endlessBatch(b, 1<<10, &lists).URL, ClientOptions[*wiretest.Obj]{MaxBatchBytes: bound})
	before := testkit.MemInUse()
	w, err := c.Watch(context.Background(), informer.WatchOptions{Revision: "10"})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	done := make(chan error, 1)
	go func() { _, err := w.Next(); done <- err }()
	var peak uint64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for err == nil {
		select {
		case err = <-done:
		case <-tick.C:
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}
	b.ReportMetric(float64(int64(peak)-int64(before))/(1<<20), "peak-heap-MiB@16MiB-bound")
	b.ReportMetric(float64(boolInt(errors.Is(err, informer.ErrBadInput) && strings.Contains(err.Error(), "MaxBatchBytes"))), "ended-by-bound")
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
