package etcd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/etcd"
)

// Service is a JSON document stored under /services/<name>.
type Service struct {
	Name     string `json:"-"`
	Team     string `json:"team"`
	Replicas int    `json:"replicas"`
}

// decodeService decodes a key and its JSON value. A nil value is the last value of a
// deleted key that etcd no longer has: the name alone is enough for a delete (OnDelete
// receives the state the informer held).
func decodeService(key, value []byte) (*Service, error) {
	s := &Service{Name: strings.TrimPrefix(string(key), "/services/")}
	if value == nil {
		return s, nil
	}
	return s, json.Unmarshal(value, s)
}

// Mirror the JSON documents under /services/ into typed structs indexed by team, and read
// your own writes.
func ExampleNew() {
	// A throwaway etcd server for the example; a real program passes its cluster's
	// endpoints to clientv3.New instead.
	dir, err := os.MkdirTemp("", "etcd-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	server, err := startEmbedded(dir, local, local, 0, "")
	if err != nil {
		panic(err)
	}
	defer server.Close()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{server.Clients[0].Addr().String()}, Logger: zap.NewNop()})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, doc := range map[string]string{
		"payments": `{"team":"billing","replicas":3}`,
		"invoices": `{"team":"billing","replicas":1}`,
		"search":   `{"team":"discovery","replicas":2}`,
	} {
		if _, err := client.Put(ctx, "/services/"+name, doc); err != nil {
			panic(err)
		}
	}

	report := func(err error) { fmt.Println("error:", err) }
	src, err := etcd.New(client, "/services/", decodeService, etcd.Options{}) // decode errors reach the informer
	if err != nil {
		panic(err)
	}
	inf, err := informer.New(src, informer.Options[string, *Service]{
		Key: func(s *Service) (string, error) { return s.Name, nil },
		Indexers: informer.Indexers[*Service]{
			"team": informer.IndexBy(func(s *Service) (string, error) { return s.Team, nil }),
		},
		ErrorHandler: report,
	})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	_ = informer.WaitForCacheSync(ctx, inf)
	billing, _ := inf.ByIndex("team", "billing")
	for _, s := range billing {
		fmt.Printf("billing runs %s ×%d\n", s.Name, s.Replicas)
	}

	// Read your own write: wait for the revision of the write, then read the cache.
	resp, err := client.Put(ctx, "/services/payments", `{"team":"billing","replicas":5}`)
	if err != nil {
		panic(err)
	}
	if err := inf.WaitForRevision(ctx, etcd.FormatRevision(resp.Header.Revision)); err != nil {
		panic(err)
	}
	payments, _ := inf.Get("payments")
	fmt.Println("payments now has", payments.Replicas, "replicas")

	// A document that is not JSON is reported and skipped; its revision is still reached.
	resp, err = client.Put(ctx, "/services/broken", `{"team":`)
	if err != nil {
		panic(err)
	}
	if err := inf.WaitForRevision(ctx, etcd.FormatRevision(resp.Header.Revision)); err != nil {
		panic(err)
	}
	fmt.Println(inf.Len(), "services mirrored,", src.DecodeErrors(), "decode error")

	// Output:
	// billing runs invoices ×1
	// billing runs payments ×3
	// payments now has 5 replicas
	// error: etcd: cannot decode value "/services/broken" at revision 6: unexpected end of JSON input
	// 3 services mirrored, 1 decode error
}
