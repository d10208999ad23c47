package persist_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/informer-go/informer/fanout"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/persist"
	httpsource "github.com/informer-go/informer/source/http"
	"github.com/informer-go/informer/source/memory"
)

// benchObjects is the number of objects of the benchmarks: PERSIST_BENCH_OBJECTS, default
// 20,000 (seconds per benchmark). The figures are for 1,000,000:
//
//	PERSIST_BENCH_OBJECTS=1000000 go test -run '^$' -bench 'Load|ListMemory|WarmStart' -benchtime 1x ./persist/
func benchObjects(b *testing.B) int {
	if s := os.Getenv("PERSIST_BENCH_OBJECTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("PERSIST_BENCH_OBJECTS=%q: want a positive number", s)
		}
		return n
	}
	return 20_000
}

// benchItem returns object i, of about 1 KiB of JSON.
func benchItem(i int) *item {
	var sb strings.Builder
	for sb.Len() < 960 {
		fmt.Fprintf(&sb, "%08x", uint32(i)*2654435761+uint32(sb.Len()))
	}
	return &item{Name: fmt.Sprintf("obj-%08d", i), Group: "g" + strconv.Itoa(i%100), Value: sb.String()}
}

var (
	benchMu  sync.Mutex
	benchSrc = map[int]*memory.Source[string, *item]{}
)

// benchSource returns a memory source holding n benchmark objects, made once per n.
func benchSource(n int) *memory.Source[string, *item] {
	benchMu.Lock()
	defer benchMu.Unlock()
	if src, ok := benchSrc[n]; ok {
		return src
	}
	src := newSource()
	for i := range n {
		src.Put(benchItem(i))
	}
	benchSrc[n] = src
	return src
}

func benchOpts(f informer.Persister[string, *item]) informer.Options[string, *item] {
	return informer.Options[string, *item]{
		Key:     func(it *item) (string, error) { return it.Name, nil },
		Persist: f,
		Logger:  slog.New(slog.DiscardHandler),
		Indexers: informer.Indexers[*item]{
			"group": informer.IndexBy(func(it *item) (string, error) { return it.Group, nil }),
		},
	}
}

// saved returns a File in a new directory holding a snapshot of src, read through lw
// (src itself when nil): the snapshot records lw's identity.
func saved(b *testing.B, src *memory.Source[string, *item], lw informer.ListerWatcher[*item], codec persist.Codec[*item]) *persist.File[string, *item] {
	b.Helper()
	f, err := persist.New[string, *item](b.TempDir(), persist.Options[*item]{Interval: -1, Codec: codec})
	if err != nil {
		b.Fatal(err)
	}
	if lw == nil {
		lw = src
	}
	inf, err := informer.New(lw, benchOpts(f))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	if err := inf.WaitForRevision(context.Background(), strconv.FormatInt(src.Revision(), 10)); err != nil {
		b.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return f
}

// binaryCodec encodes an item as three length-prefixed strings: what a hand-written or
// generated codec costs, against the default JSON.
var binaryCodec = persist.CodecFuncs[*item]{
	CodecName: "item-binary",
	EncodeFunc: func(it *item) ([]byte, error) {
		var b []byte
		for _, s := range []string{it.Name, it.Group, it.Value} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		return b, nil
	},
	DecodeFunc: func(data []byte) (*item, error) {
		var f [3]string
		for i := range f {
			n, k := binary.Uvarint(data)
			if k <= 0 || n > uint64(len(data)-k) {
				return nil, errors.New("malformed item")
			}
			f[i] = string(data[k : k+int(n)])
			data = data[k+int(n):]
		}
		return &item{Name: f[0], Group: f[1], Value: f[2]}, nil
	},
}

// BenchmarkLoad reads a snapshot of the benchmark's objects into a slice, with the
// default codec (Binary, the item being plain), JSON and a hand-written binary one: the
// disk side of a warm start, without the cache.
func BenchmarkLoad(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchLoad(b, nil) })
	b.Run("json", func(b *testing.B) { benchLoad(b, persist.JSON[*item]()) })
	b.Run("binary", func(b *testing.B) { benchLoad(b, binaryCodec) })
}

func benchLoad(b *testing.B, codec persist.Codec[*item]) {
	n := benchObjects(b)
	src := benchSource(n)
	f := saved(b, src, nil, codec)
	id, _ := src.SourceID(context.Background())
	desc := informer.PersistedCache{Informer: "informer", Type: "*github.com/informer-go/informer/persist_test.item", Source: id, Indexes: []string{"group"}}
	st, _ := os.Stat(f.Path(desc))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		objs := make([]*item, 0, n)
		if _, err := f.Load(context.Background(), desc, func(it *item) { objs = append(objs, it) }); err != nil {
			b.Fatal(err)
		}
		if len(objs) != n {
			b.Fatalf("loaded %d objects, want %d", len(objs), n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
	b.ReportMetric(float64(st.Size())/float64(n), "file-bytes/object")
}

// BenchmarkSave writes a snapshot of the benchmark's objects with the default codec
// (Binary, the item being plain; the header records its shape, computed once in New) and
// JSON: the cost of a periodic save.
func BenchmarkSave(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchSave(b, nil) })
	b.Run("json", func(b *testing.B) { benchSave(b, persist.JSON[*item]()) })
}

func benchSave(b *testing.B, codec persist.Codec[*item]) {
	n := benchObjects(b)
	src := benchSource(n)
	inf, err := informer.New(src, benchOpts(nil))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	if err := inf.WaitForRevision(ctx, strconv.FormatInt(src.Revision(), 10)); err != nil {
		b.Fatal(err)
	}
	state := inf.Snapshot()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	f, err := persist.New[string, *item](b.TempDir(), persist.Options[*item]{Interval: -1, Codec: codec})
	if err != nil {
		b.Fatal(err)
	}
	desc := informer.PersistedCache{Informer: "informer", Type: "*github.com/informer-go/informer/persist_test.item"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := f.Save(context.Background(), desc, state); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
}

// BenchmarkListMemory lists the benchmark's objects from source/memory in pages of 500,
// as the informer does: no network and no decoding, the cheapest list there is.
func BenchmarkListMemory(b *testing.B) {
	n := benchObjects(b)
	src := benchSource(n)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		objs := make([]*item, 0, n)
		opts := informer.ListOptions{Limit: 500}
		for {
			l, err := src.List(context.Background(), opts)
			if err != nil {
				b.Fatal(err)
			}
			objs = append(objs, l.Items...)
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		if len(objs) != n {
			b.Fatalf("listed %d objects, want %d", len(objs), n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
}

// countingTransport counts the response bytes the client reads.
type countingTransport struct {
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// BenchmarkWarmStart starts an informer over an HTTP source on loopback (source/http's
// Handler over source/memory, JSON on the wire) with 100 changes made since the snapshot
// was saved, cold (a list) and warm (the snapshot and a resumed watch; a snapshot in
// the default codec, in JSON, and with a hand-written binary codec), and measures the
// time until the cache holds the source's current revision, the bytes read from the
// source, and the peak heap (sampled each millisecond; the source's own objects included).
func BenchmarkWarmStart(b *testing.B) {
	n := benchObjects(b)
	src := benchSource(n)
	srv := httptest.NewServer(fanout.NewPassThrough[*item](src, fanout.PassThroughOptions[*item]{}))
	defer srv.Close()
	client, err := httpsource.NewClient[*item](srv.URL, httpsource.ClientOptions[*item]{})
	if err != nil {
		b.Fatal(err)
	}
	files := map[string]*persist.File[string, *item]{ // saved ordered, for WaitForRevision
		"warm":        saved(b, src, client.Ordered(), nil),
		"warm-json":   saved(b, src, client.Ordered(), persist.JSON[*item]()),
		"warm-binary": saved(b, src, client.Ordered(), binaryCodec),
	}
	for i := range 100 { // changes while the process was down
		it := *benchItem(i)
		it.Group = "changed"
		src.Put(&it)
	}
	defer func() { // leave the shared source as it was
		for i := range 100 {
			src.Put(benchItem(i))
		}
	}()
	ct := &countingTransport{}
	last := benchItem(99).Name

	for _, mode := range []string{"cold", "warm", "warm-json", "warm-binary"} {
		b.Run(mode, func(b *testing.B) {
			var bytes, peak uint64
			b.ReportAllocs()
			for b.Loop() {
				client, err := httpsource.NewClient[*item](srv.URL, httpsource.ClientOptions[*item]{HTTPClient: &http.Client{Transport: ct}})
				if err != nil {
					b.Fatal(err)
				}
				var p informer.Persister[string, *item]
				if f, ok := files[mode]; ok {
					p = f
				}
				b.StopTimer()
				runtime.GC()
				ct.read.Store(0)
				b.StartTimer()
				stopPeak := testkit.PeakHeap()
				inf, err := informer.New[string, *item](client, benchOpts(p))
				if err != nil {
					b.Fatal(err)
				}
				current := make(chan struct{}) // the last change made is in the cache
				var once sync.Once
				seen := func(it *item) {
					if it.Name == last && it.Group == "changed" {
						once.Do(func() { close(current) })
					}
				}
				inf.AddHandler(informer.HandlerFuncs[*item]{
					AddFunc:    func(it *item, _ bool) { seen(it) },
					UpdateFunc: func(_, it *item) { seen(it) },
				}, informer.HandlerOptions{})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- inf.Run(ctx) }()
				select {
				case <-current:
				case <-time.After(5 * time.Minute):
					b.Fatal("the informer did not reach the source's last change")
				}
				<-inf.Synced() // a cold start sees the change in the list's first batch
				b.StopTimer()
				bytes += uint64(ct.read.Load())
				peak = max(peak, stopPeak())
				if inf.Len() != n {
					b.Fatalf("%d objects, want %d", inf.Len(), n)
				}
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms-to-current")
			b.ReportMetric(float64(bytes)/float64(b.N), "source-bytes/op")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}
