package etcdtest_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer/source/etcd/etcdtest"
)

// A throwaway etcd member inside the test process: start it on loopback ports the kernel
// chooses, talk to it with an ordinary client, close it. Give the client to
// source/etcd's New to test an informer over a real etcd.
func Example() {
	dir, err := os.MkdirTemp("", "etcdtest-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	member, err := etcdtest.Start(etcdtest.Config("", dir, loopback, loopback), 0)
	if err != nil {
		panic(err)
	}
	defer member.Close()

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{member.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/config/colour", "blue"); err != nil {
		panic(err)
	}
	resp, err := cli.Get(ctx, "/config/", clientv3.WithPrefix())
	if err != nil {
		panic(err)
	}
	for _, kv := range resp.Kvs {
		fmt.Printf("%s=%s\n", kv.Key, kv.Value)
	}
	// Output: /config/colour=blue
}
