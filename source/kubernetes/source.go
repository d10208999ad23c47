package kubernetes

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/informer-go/informer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Client is the part of a client-go client that a Source uses: the List and Watch of one
// resource, already scoped to a namespace or to the whole cluster. Every typed client
// (clientset.CoreV1().ConfigMaps(ns), client-go's gentype.ClientWithList) and every
// dynamic.ResourceInterface has these methods. L is the list type, e.g.
// *corev1.ConfigMapList; it must be a pointer to a struct with an Items field holding the
// objects by value, as every Kubernetes list type does.
type Client[L metav1.ListInterface] interface {
	// List returns one page of the resource (the Source sets Limit and Continue in opts).
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	// Watch streams the resource's changes from opts.ResourceVersion.
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Options configures a Source. The zero value lists and watches every object the client
// can see, with streaming lists on.
type Options struct {
	// LabelSelector restricts the collection to the objects whose labels match, in the
	// syntax of metav1.ListOptions.LabelSelector ("app=web,tier!=cache"). Empty: all.
	LabelSelector string
	// FieldSelector restricts the collection by field ("metadata.name=config"), in the
	// syntax of metav1.ListOptions.FieldSelector. Empty: all.
	FieldSelector string
	// DisableStreamingList makes the Source report that it cannot stream lists, so the
	// informer always uses list+watch. Set it for servers older than Kubernetes 1.27 (they
	// ignore sendInitialEvents instead of rejecting it) and for client-go's typed fake
	// clients (fake.NewClientset().CoreV1().ConfigMaps(ns)), whose watches never send the
	// initial events: without it the informer would wait for them forever. A client with
	// client-go's IsWatchListSemanticsUnSupported marker, such as the fake dynamic client
	// given to NewDynamic, turns streaming lists off by itself.
	DisableStreamingList bool
	// Cluster names the cluster the client talks to, for the Source's identity
	// (SourceID), so that a warm restart (informer.Options.Persist) never restores a
	// cache saved from another cluster: ClusterID(restConfig) does, and for a typed
	// client scoped to a namespace add the namespace (NewDynamic adds its own). Empty:
	// the identity names the resource and the selectors only.
	Cluster string
}

// Source is an informer.ListerWatcher over one Kubernetes resource, as objects of type V
// (a pointer such as *corev1.ConfigMap, or *unstructured.Unstructured). It also implements
// informer.RevisionComparer (revisions are compared as integers, see the package
// documentation) and informer.StreamingLister. A Source holds no goroutines and no
// connections of its own; it is safe for concurrent use and may back several informers.
type Source[V metav1.Object] struct {
	list      func(ctx context.Context, opts metav1.ListOptions) ([]V, metav1.ListInterface, error)
	watch     func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	resource  string // names the resource in errors
	namespace string // NewDynamic's, for SourceID
	opts      Options
	streaming bool

	seen  atomic.Uint64          // the newest resourceVersion the server has shown; see checkReached
	ahead atomic.Pointer[string] // a resourceVersion found ahead of the server; see aheadError
}

var (
	_ informer.ListerWatcher[*unstructured.Unstructured] = (*Source[*unstructured.Unstructured])(nil)
	_ informer.RevisionComparer                          = (*Source[*unstructured.Unstructured])(nil)
	_ informer.StreamingLister                           = (*Source[*unstructured.Unstructured])(nil)
)

// ClusterID identifies the cluster cfg talks to, for Options.Cluster: its host and a
// SHA-256 of its certificate authority (CAData, or CAFile's content), so that another
// cluster behind the same address (recreated, with a new CA) is another cluster.
func ClusterID(cfg *rest.Config) string {
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return cfg.Host + " ca file " + cfg.CAFile
		}
		ca = b
	}
	if len(ca) == 0 {
		return cfg.Host
	}
	return fmt.Sprintf("%s ca sha256:%x", cfg.Host, sha256.Sum256(ca))
}

// SourceID implements informer.SourceIdentifier without a request: Options.Cluster, the
// resource, NewDynamic's namespace and the selectors.
func (s *Source[V]) SourceID(context.Context) (string, error) {
	return fmt.Sprintf("kubernetes cluster %q resource %s namespace %q labels %q fields %q",
		s.opts.Cluster, s.resource, s.namespace, s.opts.LabelSelector, s.opts.FieldSelector), nil
}

// New returns a Source over a typed client-go client, for example
//
//	kubernetes.New[*corev1.ConfigMap](clientset.CoreV1().ConfigMaps(ns), opts)
//
// V is the object type, a pointer to T; L, the client's list type, is inferred from the
// client. It fails if L has no Items field of type []T, or if a selector in opts does not
// parse. Listing costs one allocation per object (see the package documentation).
func New[V interface {
	*T
	metav1.Object
}, T any, L metav1.ListInterface](client Client[L], opts Options) (*Source[V], error) {
	var t T
	return newSource[V, T](client, reflect.TypeOf(t).Name(), opts)
}

// NewDynamic returns a Source over any resource of a dynamic client, as unstructured
// objects. An empty namespace means every namespace (or a cluster-scoped resource). It fails
// if a selector in opts does not parse.
func NewDynamic(client dynamic.Interface, gvr schema.GroupVersionResource, namespace string, opts Options) (*Source[*unstructured.Unstructured], error) {
	var rc dynamic.ResourceInterface = client.Resource(gvr)
	if namespace != "" {
		rc = client.Resource(gvr).Namespace(namespace)
	}
	name := gvr.Resource
	if gvr.Group != "" {
		name += "." + gvr.Group
	}
	if watchListUnsupported(client) {
		opts.DisableStreamingList = true
	}
	s, err := newSource[*unstructured.Unstructured, unstructured.Unstructured](rc, name, opts)
	if err != nil {
		return nil, err
	}
	s.namespace = namespace
	return s, nil
}

func newSource[V interface {
	*T
	metav1.Object
}, T any, L metav1.ListInterface](client Client[L], resource string, opts Options) (*Source[V], error) {
	if client == nil {
		return nil, errors.New("kubernetes: nil client")
	}
	if _, err := labels.Parse(opts.LabelSelector); err != nil {
		return nil, fmt.Errorf("kubernetes: label selector %q: %w", opts.LabelSelector, err)
	}
	if _, err := fields.ParseSelector(opts.FieldSelector); err != nil {
		return nil, fmt.Errorf("kubernetes: field selector %q: %w", opts.FieldSelector, err)
	}
	items, err := itemsField[T, L]()
	if err != nil {
		return nil, err
	}
	s := &Source[V]{
		watch:     client.Watch,
		resource:  resource,
		opts:      opts,
		streaming: !opts.DisableStreamingList && !watchListUnsupported(client),
	}
	s.list = func(ctx context.Context, lo metav1.ListOptions) ([]V, metav1.ListInterface, error) {
		l, err := client.List(ctx, lo)
		if err != nil {
			return nil, nil, err
		}
		v := reflect.ValueOf(l)
		if v.IsNil() {
			return nil, nil, fmt.Errorf("%w: nil list", informer.ErrBadInput)
		}
		// The one reflective step: the Items slice of this page, typed.
		in := v.Elem().FieldByIndex(items).Interface().([]T)
		out := make([]V, len(in))
		for i := range in {
			p := new(T)
			*p = in[i]
			out[i] = V(p)
		}
		return out, l, nil
	}
	return s, nil
}

// itemsField finds the Items []T field of the struct L points to.
func itemsField[T any, L any]() ([]int, error) {
	lt := reflect.TypeFor[L]()
	want := reflect.TypeFor[[]T]()
	if lt.Kind() != reflect.Pointer || lt.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("kubernetes: list type %v is not a pointer to a struct", lt)
	}
	f, ok := lt.Elem().FieldByName("Items")
	if !ok || f.Type != want {
		return nil, fmt.Errorf("kubernetes: list type %v has no field Items of type %v", lt, want)
	}
	return f.Index, nil
}

// watchListUnsupported reports whether client carries client-go's marker for clients that
// cannot stream lists (the fake clientsets and their trackers).
func watchListUnsupported(client any) bool {
	m, ok := client.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && m.IsWatchListSemanticsUnSupported()
}

// List reads one page of the resource (see the package documentation for the
// resourceVersion each kind of request maps to). Its errors match the informer's error
// classes.
//
// The page's Bytes is 0 (not known): client-go's typed and dynamic clients read and
// decode the response inside the request and do not tell its size, so the informer's
// progress log counts this source's lists in objects only.
func (s *Source[V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	lo := metav1.ListOptions{
		LabelSelector: s.opts.LabelSelector,
		FieldSelector: s.opts.FieldSelector,
		Limit:         opts.Limit,
		Continue:      opts.Continue,
	}
	switch {
	case opts.Continue != "":
		// The continue token carries the revision of the first page; the apiserver
		// refuses a resourceVersion beside it.
	case opts.Consistent:
		lo.ResourceVersion = ""
	case opts.Revision == "":
		lo.ResourceVersion = "0"
	default:
		if err := s.aheadError(opts.Revision); err != nil {
			return informer.List[V]{}, err
		}
		lo.ResourceVersion = opts.Revision
		lo.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	items, meta, err := s.list(ctx, lo)
	if err != nil {
		return informer.List[V]{}, s.errorf("list", err)
	}
	s.saw(meta.GetResourceVersion())
	return informer.List[V]{Items: items, Revision: meta.GetResourceVersion(), Continue: meta.GetContinue()}, nil
}

// Watch opens a watch on the resource from opts.Revision (see the package documentation).
// An empty Revision without SendInitialEvents follows Kubernetes' own rule: the watch
// starts with the current objects as Added events. The returned Watch ends with io.EOF
// when the server closes the stream, and with a classified error when the server sends
// an error event. If SendInitialEvents is set and the server refuses a streaming list, the
// error matches informer.ErrNotSupported.
func (s *Source[V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	if opts.SendInitialEvents && !s.streaming {
		return nil, fmt.Errorf("kubernetes: watch %s: streaming list disabled: %w", s.resource, informer.ErrNotSupported)
	}
	if !opts.SendInitialEvents && opts.Revision != "" {
		if err := s.checkReached(ctx, opts.Revision); err != nil {
			return nil, err
		}
	}
	lo := metav1.ListOptions{
		LabelSelector:       s.opts.LabelSelector,
		FieldSelector:       s.opts.FieldSelector,
		ResourceVersion:     opts.Revision,
		AllowWatchBookmarks: opts.AllowBookmarks || opts.SendInitialEvents,
	}
	if opts.Timeout > 0 {
		secs := int64((opts.Timeout + time.Second - 1) / time.Second)
		lo.TimeoutSeconds = &secs
	}
	if opts.SendInitialEvents {
		yes := true
		lo.SendInitialEvents = &yes
		lo.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	w, err := s.watch(ctx, lo)
	if err != nil {
		err = s.errorf("watch", err)
		if opts.SendInitialEvents && refusesStreaming(err) {
			err = fmt.Errorf("%w: %w", informer.ErrNotSupported, err)
		}
		return nil, err
	}
	if w == nil {
		return nil, fmt.Errorf("kubernetes: watch %s: %w: nil watch.Interface", s.resource, informer.ErrBadInput)
	}
	return newWatcher(ctx, w, s), nil
}

// StreamingList reports whether the Source asks for streaming lists: true unless
// Options.DisableStreamingList is set or the client says it cannot serve them.
func (s *Source[V]) StreamingList() bool { return s.streaming }

// CompareRevisions compares two resourceVersions as decimal integers. It fails for a
// revision that is not a positive decimal integer without leading zeros ("0" included:
// it means "any revision" in requests, never a state).
func (s *Source[V]) CompareRevisions(a, b string) (int, error) {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return 0, fmt.Errorf("kubernetes: %w", err)
	}
	return c, nil
}

// Unordered returns the Source as a ListerWatcher that does not implement
// informer.RevisionComparer, for APIs whose resourceVersions are not integers (some
// aggregated APIs). Informer.WaitForRevision is then unavailable.
func (s *Source[V]) Unordered() informer.ListerWatcher[V] {
	return unordered[V]{s}
}

// unordered hides CompareRevisions; it keeps StreamingList.
type unordered[V metav1.Object] struct{ s *Source[V] }

func (u unordered[V]) List(ctx context.Context, opts informer.ListOptions) (informer.List[V], error) {
	return u.s.List(ctx, opts)
}

func (u unordered[V]) Watch(ctx context.Context, opts informer.WatchOptions) (informer.Watch[V], error) {
	return u.s.Watch(ctx, opts)
}

func (u unordered[V]) StreamingList() bool { return u.s.streaming }
