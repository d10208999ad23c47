package e2e

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/kubernetes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSource calls the Source directly, without an informer, to check what the real
// server sends for each kind of request.
func TestSource(t *testing.T) {
	checkLeaks(t)
	c := newClients(t, envURL)
	nc := newClients(t, envNoCache)
	ctx := testContext(t)
	ns := namespace(t, c)
	cms := c.kube.CoreV1().ConfigMaps(ns)
	var last string
	for i := range 5 {
		cm, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("cm-%d", i), nil, "x"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = cm.ResourceVersion
	}
	src, err := kubernetes.New[*corev1.ConfigMap](cms, kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nsrc, err := kubernetes.New[*corev1.ConfigMap](nc.kube.CoreV1().ConfigMaps(ns), kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("paged consistent list", func(t *testing.T) {
		// Pages of 2 from etcd (the apiserver without a watch cache), all at one revision.
		opts := informer.ListOptions{Consistent: true, Limit: 2}
		var names []string
		rev := ""
		for page := 0; ; page++ {
			l, err := nsrc.List(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Items) > 2 {
				t.Fatalf("page %d has %d items, limit 2", page, len(l.Items))
			}
			if page == 0 {
				rev = l.Revision
			} else if l.Revision != rev {
				t.Fatalf("page %d at revision %s, first page at %s", page, l.Revision, rev)
			}
			for _, cm := range l.Items {
				names = append(names, cm.Name)
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		if fmt.Sprint(names) != "[cm-0 cm-1 cm-2 cm-3 cm-4]" {
			t.Errorf("listed %v", names)
		}
		if c, err := src.CompareRevisions(rev, last); err != nil || c < 0 {
			t.Errorf("list revision %s older than the last write %s (%v)", rev, last, err)
		}
	})

	t.Run("list at a revision", func(t *testing.T) {
		l, err := src.List(ctx, informer.ListOptions{Revision: last})
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := src.CompareRevisions(l.Revision, last); len(l.Items) != 5 || c < 0 {
			t.Errorf("List(Revision %s) = %d items at %s", last, len(l.Items), l.Revision)
		}
	})

	t.Run("streaming list", func(t *testing.T) {
		w, err := src.Watch(ctx, informer.WatchOptions{SendInitialEvents: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		var added []string
		for {
			ev, err := w.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == informer.Added {
				added = append(added, ev.Object.Name)
				continue
			}
			if ev.Type != informer.Bookmark || !ev.EndOfInitialEvents {
				t.Fatalf("%v event (end of initial events %v) in the initial events", ev.Type, ev.EndOfInitialEvents)
			}
			if c, err := src.CompareRevisions(ev.Revision, last); err != nil || c < 0 {
				t.Errorf("end-of-initial-events bookmark at %q, before the last write %s (%v)", ev.Revision, last, err)
			}
			break
		}
		if len(added) != 5 {
			t.Errorf("initial events: %v", added)
		}
	})

	t.Run("streaming list refused", func(t *testing.T) {
		_, err := nsrc.Watch(ctx, informer.WatchOptions{SendInitialEvents: true})
		if !errors.Is(err, informer.ErrNotSupported) || !apierrors.IsInvalid(err) {
			t.Errorf("Watch(SendInitialEvents) on a server without WatchList = %v, want ErrNotSupported and 422 Invalid", err)
		}
	})

	t.Run("watch with a timeout", func(t *testing.T) {
		w, err := src.Watch(ctx, informer.WatchOptions{Revision: last, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		// timeoutSeconds=1: the server ends the stream cleanly.
		if ev, err := w.Next(); err != io.EOF {
			t.Errorf("Next = %v, %v; want io.EOF", ev, err)
		}
	})

	t.Run("watch from a compacted revision", func(t *testing.T) {
		first := last
		for i := range 3 {
			cm, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("later-%d", i), nil, "x"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			last = cm.ResourceVersion
		}
		servers(t, "compact")
		w, err := nsrc.Watch(ctx, informer.WatchOptions{Revision: first})
		if err == nil {
			defer w.Stop()
			_, err = w.Next()
		}
		if !errors.Is(err, informer.ErrExpired) || !apierrors.IsResourceExpired(err) {
			t.Errorf("watch from %s after compaction: %v; want ErrExpired (410 Expired)", first, err)
		}
	})
}
