// Package kubernetes turns a Kubernetes resource, read through client-go, into an
// informer.ListerWatcher: the source an informer.Informer lists and watches. It is the
// counterpart of client-go's cache.ListWatch, generic over the object type, so handlers and
// readers get *corev1.ConfigMap (or *unstructured.Unstructured) instead of interface{}.
//
// One constructor serves every typed client: New accepts anything with client-go's
// List(ctx, metav1.ListOptions) and Watch(ctx, metav1.ListOptions) methods, such as
// clientset.CoreV1().ConfigMaps(namespace), and needs no per-resource code. NewDynamic
// does the same over dynamic.Interface for any GroupVersionResource.
//
//	cms, err := kubernetes.New[*corev1.ConfigMap](clientset.CoreV1().ConfigMaps("default"), kubernetes.Options{})
//	if err != nil { ... }
//	inf, err := informer.New(cms, informer.Options[string, *corev1.ConfigMap]{
//		Key:       kubernetes.Key[*corev1.ConfigMap],
//		Transform: kubernetes.StripManagedFields[*corev1.ConfigMap],
//		Revision:  kubernetes.ResourceVersion[*corev1.ConfigMap],
//		Indexers:  informer.Indexers[*corev1.ConfigMap]{kubernetes.NamespaceIndexName: kubernetes.NamespaceIndex[*corev1.ConfigMap]()},
//	})
//
// # How the informer's requests map to the Kubernetes API
//
//   - The first list (no revision) reads at resourceVersion "0": the apiserver answers from
//     its watch cache, cheaply, possibly a little stale. A consistent list (after an expired
//     revision) reads at resourceVersion "": the newest state, as of a quorum read of etcd.
//     A list at a known revision reads at that resourceVersion with
//     resourceVersionMatch=NotOlderThan. Pages after the first carry only the continue
//     token, which encodes the revision.
//   - A watch starts at the revision it is given; bookmarks (allowWatchBookmarks) are
//     passed on as informer.Bookmark events, and a watch timeout becomes timeoutSeconds.
//   - A streaming list (informer.StreamingLister) is a watch with sendInitialEvents=true and
//     resourceVersionMatch=NotOlderThan; the bookmark annotated k8s.io/initial-events-end
//     becomes an informer.Bookmark with EndOfInitialEvents set. A server that rejects the
//     request (the WatchList feature off, or an API that cannot stream a list) yields an
//     error matching informer.ErrNotSupported, and the informer falls back to list+watch.
//     Servers older than Kubernetes 1.27 ignore the parameter instead of rejecting it; set
//     Options.DisableStreamingList for them.
//   - Label and field selectors (Options) restrict every list and watch; the namespace is
//     the client's (ConfigMaps(ns)) or NewDynamic's namespace argument.
//
// # Errors
//
// Errors keep the client-go error (match it with the k8s.io/apimachinery/pkg/api/errors
// predicates) and also match one informer error class:
//
//   - 410 Gone, or any status with reason Expired ("too old resource version", an expired
//     continue token): informer.ErrExpired, so the informer lists again.
//   - 429 Too Many Requests: informer.ErrTooManyRequests, carrying the server's Retry-After
//     (informer.RetryAfterOf) when it sent one. client-go's REST client already retries a
//     429 with Retry-After several times before the error reaches the informer.
//   - 503: informer.ErrUnavailable; 502, 504 and other 5xx but 500, server and network
//     timeouts, connection resets and unexpected EOFs: informer.ErrRetryable; connection
//     refused: informer.ErrConnectionRefused. The informer backs off and watches again from
//     the same revision.
//   - 500 Internal Error has no class: it can be tied to the revision asked for (a watch
//     just above an etcd compaction gets one), so the informer lists again rather than
//     retrying the same request, as client-go's reflector does.
//   - A watch stream that ends (a server timeout, the connection closed) returns io.EOF
//     from Next, and the informer watches again from the last revision it saw.
//   - A watch event whose object is not a V, or a type the adapter does not know:
//     informer.ErrBadInput.
//   - 504 "Too large resource version" (the server has not reached the resourceVersion
//     asked for): informer.ErrExpired from a list, so the informer lists the current state
//     instead of retrying a list that waits each time; informer.ErrBadInput from a watch.
//
// Anything else (403, 404, a bad selector the server refuses) is returned as it is, and the
// informer backs off and lists again.
//
// # Revisions
//
// A Source compares revisions as integers (informer.RevisionComparer), which turns on
// Informer.WaitForRevision and the check that a stream never goes back in time. This relies
// on resourceVersions being decimal etcd revisions, which kube-apiserver guarantees for the
// resources it stores itself since Kubernetes 1.35 (KEP-5504, comparable resource
// versions; apimachinery's resourceversion.CompareResourceVersion). Aggregated APIs served
// by other servers may use revisions of another shape: use Source.Unordered for them.
//
// A Source's identity (informer.SourceIdentifier, used by warm restarts) is
// Options.Cluster, the resource, NewDynamic's namespace and the selectors; set
// Options.Cluster with ClusterID so that a cache saved from one cluster is never
// restored over another.
//
// A cluster whose etcd was restored from an older backup keeps its identity, and its
// resourceVersions go back: a restored cache's revision may be ahead of the server, where
// a watch from it would wait silently forever. So a watch from a revision the server has
// never shown the Source (a restored one; not those of a running informer) first lists one
// object at the current revision, one request; if the server is behind, the watch fails
// with an informer.ErrBadInput error saying so, which the informer reports (its
// ErrorHandler, Stats.SourceErrors) before it lists the current state afresh.
//
// # Memory
//
// Objects from a list are copied out of the list's Items slice one by one, so that the
// cache holds each object on its own and an updated object frees its old copy; the list
// itself is garbage once List returns. StripManagedFields, used as informer.Options.
// Transform, drops metadata.managedFields, often the largest part of a small object.
// StripAndIntern drops them too and makes objects share what they have in common
// (interned strings, equal labels, annotations and resource maps): 50,000 Pods from 400
// Deployments take half the heap client-go's informer needs for them (W6 in bench/).
package kubernetes
