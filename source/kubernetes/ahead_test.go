package kubernetes_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// tooLargeRV is the apiserver's answer to a request from a resourceVersion it has not
// reached.
func tooLargeRV(asked, current string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    504,
		Reason:  metav1.StatusReasonTimeout,
		Message: "Timeout: Too large resource version: " + asked + ", current: " + current,
		Details: &metav1.StatusDetails{
			Causes:            []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}},
			RetryAfterSeconds: 1,
		},
	}}
}

// aheadClient is a server at resourceVersion rv that records the requests it gets.
type aheadClient struct {
	rv      string
	lists   []metav1.ListOptions
	watches atomic.Int32
	fw      *watch.FakeWatcher
}

func (c *aheadClient) List(_ context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	c.lists = append(c.lists, opts)
	return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: c.rv}}, nil
}

func (c *aheadClient) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	c.watches.Add(1)
	c.fw = watch.NewFakeWithChanSize(4, false)
	return c.fw, nil
}

// TestWatchAheadOfServer checks the watch from a revision the server has not reached (a
// warm restart from a state saved before the cluster's etcd was restored from an older
// backup): one list of one object finds the server behind, the watch fails as bad input
// saying so, and the list from that revision that follows fails at once as expired. A
// watch from a revision the server has shown the Source costs no request.
func TestWatchAheadOfServer(t *testing.T) {
	ctx := context.Background()
	c := &aheadClient{rv: "100"}
	s, err := kubernetes.New[*corev1.ConfigMap](c, kubernetes.Options{LabelSelector: "a=b"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Watch(ctx, informer.WatchOptions{Revision: "5000"})
	if !errors.Is(err, informer.ErrBadInput) || errors.Is(err, informer.ErrExpired) {
		t.Fatalf("Watch from 5000 = %v; want a bad-input error", err)
	}
	for _, part := range []string{"ConfigMap", "5000", "current 100", "behind"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	if c.watches.Load() != 0 || len(c.lists) != 1 {
		t.Fatalf("watches %d, lists %v; want the one check and no watch", c.watches.Load(), c.lists)
	}
	if lo := c.lists[0]; lo.Limit != 1 || lo.ResourceVersion != "" || lo.LabelSelector != "" {
		t.Errorf("check list options = %v; want limit 1, the current revision, no selector", lo.String())
	}

	// The list from the revision the server is behind fails at once; the consistent one
	// is asked of the server.
	if _, err := s.List(ctx, informer.ListOptions{Revision: "5000"}); !errors.Is(err, informer.ErrExpired) || !strings.Contains(err.Error(), "5000") {
		t.Errorf("List from 5000 = %v; want an expired error", err)
	}
	if len(c.lists) != 1 {
		t.Fatalf("lists %v: the list from 5000 reached the server", c.lists)
	}
	got, err := s.List(ctx, informer.ListOptions{Consistent: true})
	if err != nil || got.Revision != "100" {
		t.Fatalf("consistent List = %+v, %v", got, err)
	}

	// Watches from revisions the server has shown: no check.
	w, err := s.Watch(ctx, informer.WatchOptions{Revision: "100"})
	if err != nil {
		t.Fatal(err)
	}
	c.fw.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "150"}})
	c.fw.Action(watch.Bookmark, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "170"}})
	for range 2 {
		if _, err := w.Next(); err != nil {
			t.Fatal(err)
		}
	}
	w.Stop()
	for _, rev := range []string{"150", "170", "120"} {
		w, err := s.Watch(ctx, informer.WatchOptions{Revision: rev})
		if err != nil {
			t.Fatalf("Watch from %s: %v", rev, err)
		}
		w.Stop()
	}
	if len(c.lists) != 2 || c.watches.Load() != 4 {
		t.Errorf("lists %d, watches %d; want 2 and 4: a watch from a revision seen asks nothing first", len(c.lists), c.watches.Load())
	}
	// Still behind 5000: the list from it does not reach the server. Once the server has
	// shown a newer revision, it does.
	if _, err := s.List(ctx, informer.ListOptions{Revision: "5000"}); !errors.Is(err, informer.ErrExpired) {
		t.Errorf("List from 5000 = %v; want an expired error", err)
	}
	c.rv = "6000"
	for _, opts := range []informer.ListOptions{{Consistent: true}, {Revision: "5000"}} {
		if _, err := s.List(ctx, opts); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.lists) != 4 {
		t.Errorf("lists %d; want 4", len(c.lists))
	}

	// A fresh Source behind nothing: one check, then none for the same revision.
	c = &aheadClient{rv: "100"}
	s, err = kubernetes.New[*corev1.ConfigMap](c, kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		w, err := s.Watch(ctx, informer.WatchOptions{Revision: "50"})
		if err != nil {
			t.Fatal(err)
		}
		w.Stop()
	}
	if len(c.lists) != 1 || c.watches.Load() != 2 {
		t.Errorf("lists %d, watches %d; want 1 and 2", len(c.lists), c.watches.Load())
	}
	// Revisions that are not integers are not compared: no check.
	w, err = s.Unordered().Watch(ctx, informer.WatchOptions{Revision: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if len(c.lists) != 1 {
		t.Errorf("lists %d after a watch from a non-integer revision; want 1", len(c.lists))
	}
}

// TestTooLargeResourceVersion checks the mapping of "Too large resource version": from a
// list, an expired revision (the informer lists the current state, rather than retrying
// the same list, which waits each time); from a watch, bad input that says the server is
// behind. Both still match the client-go error.
func TestTooLargeResourceVersion(t *testing.T) {
	ctx := context.Background()
	tl := tooLargeRV("5000", "100")
	var fw *watch.FakeWatcher
	client := &scriptedClient{
		list: func(metav1.ListOptions) (*corev1.ConfigMapList, error) { return nil, tl },
		watch: func(opts metav1.ListOptions) (watch.Interface, error) {
			if opts.ResourceVersion == "1" {
				fw = watch.NewFakeWithChanSize(1, false)
				return fw, nil
			}
			return nil, tl
		},
	}
	s, err := kubernetes.New[*corev1.ConfigMap](client, kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.List(ctx, informer.ListOptions{Revision: "5000"})
	if !errors.Is(err, informer.ErrExpired) || errors.Is(err, informer.ErrRetryable) || !errors.Is(err, tl) {
		t.Errorf("List = %v; want an expired error, not a retryable one", err)
	}
	if _, ok := informer.RetryAfterOf(err); ok {
		t.Errorf("List error %v carries a retry delay", err)
	}
	// The watch's check cannot list: the watch itself answers.
	_, err = s.Watch(ctx, informer.WatchOptions{SendInitialEvents: true})
	if !errors.Is(err, informer.ErrBadInput) || errors.Is(err, informer.ErrRetryable) || !errors.Is(err, tl) || !strings.Contains(err.Error(), "behind") {
		t.Errorf("Watch = %v; want a bad-input error saying the server is behind", err)
	}
	// As an error event of an open watch (from a revision the Source has seen).
	client.list = func(metav1.ListOptions) (*corev1.ConfigMapList, error) {
		return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
	}
	if _, err := s.List(ctx, informer.ListOptions{Consistent: true}); err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, informer.WatchOptions{Revision: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	st := tl.Status()
	fw.Error(&st)
	_, err = w.Next()
	if !errors.Is(err, informer.ErrBadInput) || errors.Is(err, informer.ErrRetryable) || !apierrors.IsTimeout(err) || !strings.Contains(err.Error(), "behind") {
		t.Errorf("Next = %v; want a bad-input error saying the server is behind", err)
	}
}

// BenchmarkWatchNext is the cost of one event through a Source's watch, which records
// the event's resourceVersion as seen by the server.
func BenchmarkWatchNext(b *testing.B) {
	fw, w := fakeWatch(b, 1024, informer.WatchOptions{Revision: "1"})
	objs := make([]*corev1.ConfigMap, 1024)
	for i := range objs {
		objs[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: strconv.Itoa(1_000_000 + i)}}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%1024 == 0 {
			b.StopTimer()
			for _, o := range objs {
				fw.Modify(o)
			}
			b.StartTimer()
		}
		if _, err := w.Next(); err != nil {
			b.Fatal(err)
		}
	}
}
