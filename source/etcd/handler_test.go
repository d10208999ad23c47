package etcd_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer/fanout"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/etcd"
	httpsource "github.com/informer-go/informer/source/http"
)

// An etcd transaction served through a fanout.PassThrough reaches a client whole: right
// after WaitForRevision of the transaction's revision returns, the client's cache holds
// every change of it. (source/etcd's watch gives a transaction's changes but the last the
// revision before it, so no client counts the revision reached halfway; the Handler also
// marks them as a batch.)
func TestPassThroughServesTransactionsWhole(t *testing.T) {
	const prefix = "/txn/"
	_, cli := startWithClient(t)
	src, err := etcd.New(cli, prefix, func(key, value []byte) (*fanItem, error) {
		return &fanItem{Key: string(key), Val: string(value)}, nil
	}, etcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := fanout.NewPassThrough[*fanItem](src, fanout.PassThroughOptions[*fanItem]{})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	client, err := httpsource.NewClient[*fanItem](ts.URL, httpsource.ClientOptions[*fanItem]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New[string, *fanItem](client.Ordered(), informer.Options[string, *fanItem]{Key: fanKey, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	go func() { defer close(done); _ = inf.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	select {
	case <-inf.Synced():
	case <-ctx.Done():
		t.Fatal("the client's informer never synced")
	}
	state := func() string {
		var s []string
		for k, v := range inf.All() {
			s = append(s, strings.TrimPrefix(k, prefix)+"="+v.Val)
		}
		return strings.Join(s, " ")
	}
	const keys = 8
	for round := range 40 {
		ops := make([]clientv3.Op, keys)
		var want []string
		for i := range keys {
			ops[i] = clientv3.OpPut(fmt.Sprintf("%sk%d", prefix, i), fmt.Sprint(round))
			want = append(want, fmt.Sprintf("k%d=%d", i, round))
		}
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.WaitForRevision(ctx, fmt.Sprint(resp.Header.Revision)); err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		if got := state(); got != strings.Join(want, " ") {
			t.Fatalf("round %d: right after WaitForRevision(%d) the client holds\n%s\nwant\n%s", round, resp.Header.Revision, got, strings.Join(want, " "))
		}
	}
}
