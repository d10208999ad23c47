package httpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
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
