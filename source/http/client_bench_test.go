package httpsource

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/informer-go/informer"
)

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
