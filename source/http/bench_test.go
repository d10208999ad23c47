package httpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

// pod is a Kubernetes-like object of about 700 bytes of JSON, for the decode benchmark.
type pod struct {
	Kind       string  `json:"kind"`
	APIVersion string  `json:"apiVersion"`
	Metadata   podMeta `json:"metadata"`
	Spec       struct {
		NodeName   string `json:"nodeName"`
		Containers []struct {
			Name  string `json:"name"`
			Image string `json:"image"`
			Ports []struct {
				ContainerPort int    `json:"containerPort"`
				Protocol      string `json:"protocol"`
			} `json:"ports"`
			Args []string `json:"args"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

type podMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
	Annotations     map[string]string `json:"annotations"`
}

const podJSON = `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-%d","namespace":"default","uid":"6f1c2f1e-7b5a-4d5e-9a7e-%012d","resourceVersion":"%d","labels":{"app":"web","tier":"frontend","pod-template-hash":"5d7f8c9b"},"annotations":{"kubernetes.io/psp":"restricted","prometheus.io/scrape":"true"}},"spec":{"nodeName":"node-%d","containers":[{"name":"web","image":"registry.example.com/web:1.25.3","ports":[{"containerPort":8080,"protocol":"TCP"},{"containerPort":9090,"protocol":"TCP"}],"args":["--listen=:8080","--metrics=:9090","--log-level=info"]}]},"status":{"phase":"Running","podIP":"10.1.%d.%d","conditions":[{"type":"Initialized","status":"True"},{"type":"Ready","status":"True"},{"type":"ContainersReady","status":"True"},{"type":"PodScheduled","status":"True"}]}}`

// watchStream returns n watch events as NDJSON, as a server sends them.
func watchStream(n int) []byte {
	var b bytes.Buffer
	types := []string{"ADDED", "MODIFIED", "MODIFIED", "DELETED"}
	for i := range n {
		fmt.Fprintf(&b, `{"type":%q,"object":`+podJSON+"}\n", types[i%4], i, i, 1000+i, i%50, i/250%250, i%250)
	}
	return b.Bytes()
}

// BenchmarkDecode measures decoding a watch stream into typed events: the Client's path
// (framing, envelope scan, item decoder = encoding/json into *pod) against a bare
// json.Decoder loop decoding the same bytes into {Type string; Object *pod}, the
// baseline the issue sets (goal: at least 0.8× its throughput).
func BenchmarkDecode(b *testing.B) {
	const n = 1000
	stream := watchStream(n)
	perEvent := int64(len(stream) / n)

	b.Run("client", func(b *testing.B) {
		c, err := NewClient[*pod]("http://localhost/", ClientOptions[*pod]{})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(perEvent)
		b.ReportAllocs()
		r := bytes.NewReader(stream)
		var w *watch[*pod]
		reset := func() {
			r.Reset(stream)
			w = c.newWatch(context.Background(), func() {}, io.NopCloser(r))
		}
		reset()
		events := 0
		for b.Loop() {
			ev, err := w.Next()
			if err == io.EOF {
				reset()
				ev, err = w.Next()
			}
			if err != nil || ev.Object == nil || ev.Revision == "" {
				b.Fatal(ev, err)
			}
			events++
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})

	b.Run("json.Decoder", func(b *testing.B) {
		b.SetBytes(perEvent)
		b.ReportAllocs()
		r := bytes.NewReader(stream)
		dec := json.NewDecoder(r)
		events := 0
		for b.Loop() {
			var ev struct {
				Type   string `json:"type"`
				Object *pod   `json:"object"`
			}
			err := dec.Decode(&ev)
			if err == io.EOF {
				r.Reset(stream)
				dec = json.NewDecoder(r)
				err = dec.Decode(&ev)
			}
			if err != nil || ev.Object == nil {
				b.Fatal(err)
			}
			events++
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkServerFanout measures a Server sending 100,000 changes to 100 watchers over
// loopback TCP: each iteration writes the changes into the server (as its informer
// handler does: encode once, log once) while every watcher reads its stream to the end.
// It reports changes/s (each reaching all 100 watchers), deliveries/s (changes ×
// watchers) and the allocations per change and per delivery of the whole process while the
// changes flow: the server's, since the objects are made beforehand and the watchers'
// readers allocate nothing per line.
//
// With an ordered upstream ("upstream revisions") each change is its own batch: the
// server logs it at the revision its informer reached (OnRevision), the most a batch can
// cost per change; with an unordered one ("own numbering") it logs it at once.
func BenchmarkServerFanout(b *testing.B) {
	b.Run("upstream revisions", func(b *testing.B) { benchmarkServerFanout(b, true) })
	b.Run("own numbering", func(b *testing.B) { benchmarkServerFanout(b, false) })
}

func benchmarkServerFanout(b *testing.B, ordered bool) {
	const changes, watchers = 100_000, 100
	src := memory.New(objName, memory.Options{})
	var lw informer.ListerWatcher[*obj] = src
	if !ordered {
		lw = unordered{src}
	}
	inf, err := informer.New(lw, informer.Options[string, *obj]{Key: objKey})
	if err != nil {
		b.Fatal(err)
	}
	run(b, inf)
	srv, err := NewServer(inf, objKey, ServerOptions[*obj]{HistoryLimit: changes})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer func() {
		_ = srv.Shutdown(context.Background())
		ts.Close()
	}()
	<-srv.Synced()
	addr := ts.Listener.Addr().String()

	b.ReportAllocs()
	var total time.Duration
	var mallocs uint64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		objs := make([]*obj, changes) // made beforehand: only the server's allocations count
		for c := range objs {
			objs[c] = &obj{Name: fmt.Sprintf("object-%04d", c%1000), Val: fmt.Sprint(i*changes + c)}
		}
		from := srv.Revision()
		var ready, done sync.WaitGroup
		errs := make(chan error, watchers)
		conns := make([]net.Conn, watchers)
		for w := range watchers {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			conns[w] = conn
			fmt.Fprintf(conn, "GET /?watch=1&resourceVersion=%s HTTP/1.1\r\nHost: x\r\n\r\n", from)
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				readWatch(conn, changes, &ready, errs)
			}()
		}
		ready.Wait()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		b.StartTimer()
		start := time.Now()
		for c, o := range objs {
			srv.mirror.put(o)
			if ordered {
				srv.mirror.OnRevision(strconv.Itoa(1 + i*changes + c))
			}
		}
		done.Wait()
		total += time.Since(start)
		b.StopTimer()
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - before
		for _, c := range conns {
			c.Close()
		}
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		b.StartTimer()
	}
	n := float64(b.N * changes)
	b.ReportMetric(n/total.Seconds(), "changes/s")
	b.ReportMetric(n*watchers/total.Seconds(), "deliveries/s")
	b.ReportMetric(float64(mallocs)/n, "allocs/change")
	b.ReportMetric(float64(mallocs)/(n*watchers), "allocs/delivery")
}
