package httpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/informer-go/informer"
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

// bodyTransport answers every request with the same 200 JSON body, in memory.
type bodyTransport []byte

func (b bodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
		Request:       r,
	}, nil
}

// BenchmarkListDecode measures Client.List on a page of 500 pods served from memory (no
// network): reading the body, splitting the page and decoding every item.
func BenchmarkListDecode(b *testing.B) {
	const n = 500
	var page bytes.Buffer
	page.WriteString(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"12345"},"items":[`)
	for i := range n {
		if i > 0 {
			page.WriteByte(',')
		}
		fmt.Fprintf(&page, podJSON, i, i, 1000+i, i%50, i/250%250, i%250)
	}
	page.WriteString("]}")
	c, err := NewClient("http://localhost/", ClientOptions[*pod]{HTTPClient: &http.Client{Transport: bodyTransport(page.Bytes())}})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(page.Len()))
	b.ReportAllocs()
	items := 0
	for b.Loop() {
		l, err := c.List(context.Background(), informer.ListOptions{})
		if err != nil || len(l.Items) != n {
			b.Fatal(len(l.Items), err)
		}
		items += n
	}
	b.ReportMetric(float64(items)/b.Elapsed().Seconds(), "items/s")
}
