package kubernetes_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestMain(m *testing.M) {
	// klog starts its flush daemon in init; it is client-go's, not ours.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}

func cm(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
}

func newConfigMaps(t *testing.T, c *fake.Clientset, ns string, opts kubernetes.Options) *kubernetes.Source[*corev1.ConfigMap] {
	t.Helper()
	s, err := kubernetes.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestListOptions checks the resourceVersion, selectors, limit and continue token each
// kind of informer list maps to.
func TestListOptions(t *testing.T) {
	tests := []struct {
		name string
		in   informer.ListOptions
		want metav1.ListOptions
	}{
		{"first list reads the watch cache", informer.ListOptions{Limit: 500},
			metav1.ListOptions{ResourceVersion: "0", Limit: 500}},
		{"consistent list after expiry", informer.ListOptions{Consistent: true, Revision: "7"},
			metav1.ListOptions{ResourceVersion: ""}},
		{"relist at a known revision", informer.ListOptions{Revision: "42", Limit: 10},
			metav1.ListOptions{ResourceVersion: "42", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 10}},
		{"later page carries only the token", informer.ListOptions{Revision: "42", Limit: 10, Continue: "tok"},
			metav1.ListOptions{Limit: 10, Continue: "tok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset()
			var got metav1.ListOptions
			c.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
				got = a.(k8stesting.ListActionImpl).ListOptions
				return false, nil, nil
			})
			s := newConfigMaps(t, c, "ns", kubernetes.Options{LabelSelector: "app=web", FieldSelector: "metadata.name!=x"})
			if _, err := s.List(context.Background(), tt.in); err != nil {
				t.Fatal(err)
			}
			tt.want.LabelSelector, tt.want.FieldSelector = "app=web", "metadata.name!=x"
			if got.String() != tt.want.String() {
				t.Errorf("ListOptions = %v, want %v", got.String(), tt.want.String())
			}
		})
	}
}

// TestListItems checks that a page's objects, revision and continue token come through,
// and that each object is a copy of its own (the list can be dropped).
func TestListItems(t *testing.T) {
	c := fake.NewClientset()
	list := &corev1.ConfigMapList{
		ListMeta: metav1.ListMeta{ResourceVersion: "17", Continue: "next"},
		Items:    []corev1.ConfigMap{*cm("ns", "a", nil), *cm("ns", "b", nil)},
	}
	c.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, list, nil
	})
	s := newConfigMaps(t, c, "ns", kubernetes.Options{})
	got, err := s.List(context.Background(), informer.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != "17" || got.Continue != "next" || len(got.Items) != 2 ||
		got.Items[0].Name != "a" || got.Items[1].Name != "b" {
		t.Fatalf("List = %+v", got)
	}
	if got.Items[0] == &list.Items[0] {
		t.Error("List returned a pointer into the list's Items; want a copy per object")
	}
}

// TestWatchOptions checks revision, timeout, bookmarks, selectors and the streaming-list
// parameters of a watch.
func TestWatchOptions(t *testing.T) {
	secs := func(n int64) *int64 { return &n }
	yes := true
	tests := []struct {
		name string
		in   informer.WatchOptions
		want metav1.ListOptions
	}{
		{"watch from a revision", informer.WatchOptions{Revision: "9", Timeout: 1500 * time.Millisecond, AllowBookmarks: true},
			metav1.ListOptions{ResourceVersion: "9", TimeoutSeconds: secs(2), AllowWatchBookmarks: true}},
		{"no timeout, no bookmarks", informer.WatchOptions{Revision: "9"},
			metav1.ListOptions{ResourceVersion: "9"}},
		{"streaming list", informer.WatchOptions{SendInitialEvents: true, Timeout: time.Minute},
			metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
				AllowWatchBookmarks: true, TimeoutSeconds: secs(60)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got metav1.ListOptions
			client := &scriptedClient{watch: func(opts metav1.ListOptions) (watch.Interface, error) {
				got = opts
				return watch.NewEmptyWatch(), nil
			}}
			s, err := kubernetes.New[*corev1.ConfigMap](client, kubernetes.Options{LabelSelector: "a in (b,c)"})
			if err != nil {
				t.Fatal(err)
			}
			w, err := s.Watch(context.Background(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			w.Stop()
			tt.want.LabelSelector = "a in (b,c)"
			if got.String() != tt.want.String() {
				t.Errorf("ListOptions = %v, want %v", got.String(), tt.want.String())
			}
		})
	}
}

// scriptedClient is a Client[*corev1.ConfigMapList] whose answers a test chooses. With no
// list function, List answers an empty list at resourceVersion 1000 (a server ahead of
// the revisions the tests watch from).
type scriptedClient struct {
	list  func(metav1.ListOptions) (*corev1.ConfigMapList, error)
	watch func(metav1.ListOptions) (watch.Interface, error)
}

func (c *scriptedClient) List(_ context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	if c.list == nil {
		return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1000"}}, nil
	}
	return c.list(opts)
}

func (c *scriptedClient) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.watch(opts)
}

// TestErrorClasses checks that each kind of failure matches its informer error class and
// still matches client-go's own predicates.
func TestErrorClasses(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:1", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	tests := []struct {
		name       string
		err        error
		class      error // nil: no class
		retryAfter time.Duration
	}{
		{"410 expired", apierrors.NewResourceExpired("too old resource version: 1 (20)"), informer.ErrExpired, 0},
		{"410 gone", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonGone}}, informer.ErrExpired, 0},
		{"429 with Retry-After", apierrors.NewTooManyRequests("slow down", 7), informer.ErrTooManyRequests, 7 * time.Second},
		{"429 without", apierrors.NewTooManyRequests("slow down", 0), informer.ErrTooManyRequests, 0},
		{"503", apierrors.NewServiceUnavailable("down"), informer.ErrUnavailable, 0},
		{"500 relists", apierrors.NewInternalError(errors.New("boom")), nil, 0},
		{"504 timeout", apierrors.NewTimeoutError("slow", 3), informer.ErrRetryable, 3 * time.Second},
		{"server timeout", apierrors.NewServerTimeout(gr, "list", 2), informer.ErrRetryable, 2 * time.Second},
		{"502 unexpected", apierrors.NewGenericServerResponse(502, "GET", gr, "", "bad gateway", 0, true), informer.ErrRetryable, 0},
		{"connection refused", refused, informer.ErrConnectionRefused, 0},
		{"unexpected EOF", &url.Error{Op: "Get", URL: "https://x", Err: io.ErrUnexpectedEOF}, informer.ErrRetryable, 0},
		{"connection reset", &url.Error{Op: "Get", URL: "https://x", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, informer.ErrRetryable, 0},
		{"403", apierrors.NewForbidden(gr, "", errors.New("no")), nil, 0},
		{"404", apierrors.NewNotFound(gr, "x"), nil, 0},
	}
	classes := []error{informer.ErrExpired, informer.ErrRetryable, informer.ErrNotSupported, informer.ErrBadInput}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset()
			c.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			c.PrependWatchReactor("configmaps", func(k8stesting.Action) (bool, watch.Interface, error) {
				return true, nil, tt.err
			})
			s := newConfigMaps(t, c, "ns", kubernetes.Options{})
			_, listErr := s.List(context.Background(), informer.ListOptions{})
			// No revision: the watch asks nothing before (see TestWatchAheadOfServer).
			_, watchErr := s.Watch(context.Background(), informer.WatchOptions{})
			for op, err := range map[string]error{"list": listErr, "watch": watchErr} {
				if err == nil {
					t.Fatalf("%s: no error", op)
				}
				if !errors.Is(err, tt.err) {
					t.Errorf("%s: %v does not wrap the client-go error", op, err)
				}
				for _, class := range classes {
					want := tt.class != nil && (errors.Is(tt.class, class))
					if got := errors.Is(err, class); got != want {
						t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", op, err, class, got, want)
					}
				}
				if tt.class != nil && !errors.Is(err, tt.class) {
					t.Errorf("%s: %v does not match %v", op, err, tt.class)
				}
				ra, ok := informer.RetryAfterOf(err)
				if ok != (tt.retryAfter > 0) || ra != tt.retryAfter {
					t.Errorf("%s: RetryAfterOf = %v, %v; want %v", op, ra, ok, tt.retryAfter)
				}
			}
		})
	}
}

// fakeWatch opens a watch of a Source over a client whose watches are one fake watcher
// buffering size events; the watch is stopped when the test ends.
func fakeWatch(tb testing.TB, size int, opts informer.WatchOptions) (*watch.FakeWatcher, informer.Watch[*corev1.ConfigMap]) {
	tb.Helper()
	fw := watch.NewFakeWithChanSize(size, false)
	client := &scriptedClient{watch: func(metav1.ListOptions) (watch.Interface, error) { return fw, nil }}
	s, err := kubernetes.New[*corev1.ConfigMap](client, kubernetes.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := s.Watch(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Stop)
	return fw, w
}

// TestWatchEvents checks the mapping of every kind of watch event.
func TestWatchEvents(t *testing.T) {
	fw, w := fakeWatch(t, 16, informer.WatchOptions{Revision: "1", AllowBookmarks: true})
	withRV := func(c *corev1.ConfigMap, rv string) *corev1.ConfigMap { c.ResourceVersion = rv; return c }
	fw.Add(withRV(cm("ns", "a", nil), "2"))
	fw.Modify(withRV(cm("ns", "a", nil), "3"))
	fw.Action(watch.Bookmark, withRV(&corev1.ConfigMap{}, "4"))
	fw.Delete(withRV(cm("ns", "a", nil), "5"))
	end := withRV(&corev1.ConfigMap{}, "6")
	end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	fw.Action(watch.Bookmark, end)
	want := []string{"Added ns/a 2 false", "Modified ns/a 3 false", "Bookmark  4 false", "Deleted ns/a 5 false", "Bookmark  6 true"}
	for i, w0 := range want {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		key := ""
		if ev.Object != nil {
			key, _ = kubernetes.Key(ev.Object)
		}
		if got := fmt.Sprintf("%v %s %s %v", ev.Type, key, ev.Revision, ev.EndOfInitialEvents); got != w0 {
			t.Errorf("event %d = %q, want %q", i, got, w0)
		}
	}

	// An error event ends the stream with the classified error.
	fw.Error(&apierrors.NewResourceExpired("too old resource version: 1 (9)").ErrStatus)
	if _, err := w.Next(); !errors.Is(err, informer.ErrExpired) || !apierrors.IsResourceExpired(err) {
		t.Errorf("Next after an Expired error event = %v, want ErrExpired", err)
	}
}

func TestWatchBadInput(t *testing.T) {
	tests := []struct {
		name string
		send func(*watch.FakeWatcher)
	}{
		{"wrong object type", func(fw *watch.FakeWatcher) { fw.Add(&corev1.Secret{}) }},
		{"unknown event type", func(fw *watch.FakeWatcher) { fw.Action("SURPRISE", cm("ns", "a", nil)) }},
		{"error event without a Status", func(fw *watch.FakeWatcher) { fw.Error(cm("ns", "a", nil)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fw := watch.NewFakeWithChanSize(1, false)
			client := &scriptedClient{watch: func(metav1.ListOptions) (watch.Interface, error) { return fw, nil }}
			s, _ := kubernetes.New[*corev1.ConfigMap](client, kubernetes.Options{})
			w, err := s.Watch(context.Background(), informer.WatchOptions{Revision: "1"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			tt.send(fw)
			if _, err := w.Next(); !errors.Is(err, informer.ErrBadInput) {
				t.Errorf("Next = %v, want ErrBadInput", err)
			}
			if !fw.IsStopped() {
				t.Error("the client-go watch was not stopped after the error")
			}
		})
	}
}

// TestWatchEnd checks how a watch ends: server close (io.EOF), Stop, context cancel.
func TestWatchEnd(t *testing.T) {
	open := func(ctx context.Context) (informer.Watch[*corev1.ConfigMap], *watch.FakeWatcher) {
		fw := watch.NewFake()
		client := &scriptedClient{watch: func(metav1.ListOptions) (watch.Interface, error) { return fw, nil }}
		s, _ := kubernetes.New[*corev1.ConfigMap](client, kubernetes.Options{})
		w, err := s.Watch(ctx, informer.WatchOptions{Revision: "1"})
		if err != nil {
			t.Fatal(err)
		}
		return w, fw
	}
	t.Run("server closes", func(t *testing.T) {
		w, fw := open(context.Background())
		fw.Stop()
		if _, err := w.Next(); err != io.EOF {
			t.Errorf("Next = %v, want io.EOF", err)
		}
		w.Stop()
	})
	t.Run("stop", func(t *testing.T) {
		w, fw := open(context.Background())
		w.Stop()
		w.Stop()
		if _, err := w.Next(); err == nil || err == io.EOF {
			t.Errorf("Next after Stop = %v, want an error other than io.EOF", err)
		}
		if !fw.IsStopped() {
			t.Error("client-go watch not stopped")
		}
	})
	t.Run("context cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		w, _ := open(ctx)
		defer w.Stop()
		cancel()
		if _, err := w.Next(); !errors.Is(err, context.Canceled) {
			t.Errorf("Next = %v, want context.Canceled", err)
		}
	})
}

// TestStreamingList checks when a Source offers streaming lists and how a refusal maps.
func TestStreamingList(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "",
		field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")})
	tests := []struct {
		name         string
		err          error
		notSupported bool
	}{
		{"422 invalid", invalid, true},
		{"400 bad request", apierrors.NewBadRequest("sendInitialEvents"), true},
		{"405", apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "configmaps"}, "watch"), true},
		{"503 is transient", apierrors.NewServiceUnavailable("later"), false},
		{"410 is an expiry", apierrors.NewResourceExpired("old"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := &scriptedClient{watch: func(metav1.ListOptions) (watch.Interface, error) { return nil, tt.err }}
			s, _ := kubernetes.New[*corev1.ConfigMap](client, kubernetes.Options{})
			if !s.StreamingList() {
				t.Fatal("StreamingList() = false for a real client")
			}
			_, err := s.Watch(context.Background(), informer.WatchOptions{SendInitialEvents: true})
			if got := errors.Is(err, informer.ErrNotSupported); got != tt.notSupported {
				t.Errorf("errors.Is(%v, ErrNotSupported) = %v, want %v", err, got, tt.notSupported)
			}
			// Outside a streaming list nothing is "not supported".
			_, err = s.Watch(context.Background(), informer.WatchOptions{Revision: "3"})
			if errors.Is(err, informer.ErrNotSupported) {
				t.Errorf("plain watch: %v matches ErrNotSupported", err)
			}
		})
	}

	t.Run("disabled", func(t *testing.T) {
		called := false
		client := &scriptedClient{watch: func(metav1.ListOptions) (watch.Interface, error) { called = true; return watch.NewEmptyWatch(), nil }}
		s, _ := kubernetes.New[*corev1.ConfigMap](client, kubernetes.Options{DisableStreamingList: true})
		if s.StreamingList() {
			t.Error("StreamingList() = true with DisableStreamingList")
		}
		if _, err := s.Watch(context.Background(), informer.WatchOptions{SendInitialEvents: true}); !errors.Is(err, informer.ErrNotSupported) || called {
			t.Errorf("Watch = %v (client called: %v), want ErrNotSupported without a request", err, called)
		}
	})
	t.Run("fake clients say they cannot", func(t *testing.T) {
		dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
		s, err := kubernetes.New[*unstructured.Unstructured](markedClient{dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})}, kubernetes.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if s.StreamingList() {
			t.Error("StreamingList() = true for a client marked IsWatchListSemanticsUnSupported")
		}
	})
}

// markedClient carries client-go's marker for clients without streaming lists.
type markedClient struct {
	client kubernetes.Client[*unstructured.UnstructuredList]
}

func (m markedClient) List(ctx context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return m.client.List(ctx, opts)
}

func (m markedClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return m.client.Watch(ctx, opts)
}

func (markedClient) IsWatchListSemanticsUnSupported() bool { return true }

// TestNewRejects checks the constructor's errors.
func TestNewRejects(t *testing.T) {
	c := fake.NewClientset()
	if _, err := kubernetes.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(""), kubernetes.Options{LabelSelector: "a in (b"}); err == nil {
		t.Error("bad label selector accepted")
	}
	if _, err := kubernetes.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(""), kubernetes.Options{FieldSelector: "a=b=c,"}); err == nil {
		t.Error("bad field selector accepted")
	}
	// A client whose list type holds other objects than V.
	if _, err := kubernetes.New[*corev1.Secret](c.CoreV1().ConfigMaps(""), kubernetes.Options{}); err == nil {
		t.Error("ConfigMapList accepted as a list of Secrets")
	}
	var nilClient kubernetes.Client[*corev1.ConfigMapList]
	if _, err := kubernetes.New[*corev1.ConfigMap](nilClient, kubernetes.Options{}); err == nil {
		t.Error("nil client accepted")
	}
}

func TestCompareRevisions(t *testing.T) {
	s, _ := kubernetes.New[*corev1.ConfigMap](fake.NewClientset().CoreV1().ConfigMaps(""), kubernetes.Options{})
	tests := []struct {
		a, b string
		want int
		bad  bool
	}{
		{"9", "10", -1, false},
		{"10", "9", 1, false},
		{"123", "123", 0, false},
		{"18446744073709551616", "9", 1, false}, // larger than uint64: still ordered
		{"", "1", 0, true},
		{"0", "1", 0, true},
		{"01", "1", 0, true},
		{"abc", "1", 0, true},
	}
	for _, tt := range tests {
		got, err := s.CompareRevisions(tt.a, tt.b)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("CompareRevisions(%q, %q) = %d, %v; want %d, error %v", tt.a, tt.b, got, err, tt.want, tt.bad)
		}
	}
	var lw informer.ListerWatcher[*corev1.ConfigMap] = s.Unordered()
	if _, ok := lw.(informer.RevisionComparer); ok {
		t.Error("Unordered() still implements RevisionComparer")
	}
	if sl, ok := lw.(informer.StreamingLister); !ok || !sl.StreamingList() {
		t.Error("Unordered() lost StreamingList")
	}
}
