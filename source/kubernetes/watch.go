package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/informer-go/informer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// errWatchStopped is what Next returns after Stop.
var errWatchStopped = errors.New("kubernetes: watch stopped")

// watcher turns a client-go watch.Interface into an informer.Watch[V].
type watcher[V metav1.Object] struct {
	w    watch.Interface
	ctx  context.Context
	src  *Source[V]
	once sync.Once
	done chan struct{}
}

func newWatcher[V metav1.Object](ctx context.Context, w watch.Interface, src *Source[V]) *watcher[V] {
	return &watcher[V]{w: w, ctx: ctx, src: src, done: make(chan struct{})}
}

// Next returns the next event: Added, Modified and Deleted carry the object and its
// resourceVersion; a Bookmark carries the bookmark's resourceVersion and, for the
// k8s.io/initial-events-end bookmark of a streaming list, EndOfInitialEvents. An error
// event from the server ends the watch with the classified error.
func (w *watcher[V]) Next() (informer.Event[V], error) {
	var ev watch.Event
	var ok bool
	select {
	case <-w.done:
		return informer.Event[V]{}, errWatchStopped
	case <-w.ctx.Done():
		return informer.Event[V]{}, w.ctx.Err()
	case ev, ok = <-w.w.ResultChan():
	}
	if !ok {
		select {
		case <-w.done:
			return informer.Event[V]{}, errWatchStopped
		default:
			return informer.Event[V]{}, io.EOF
		}
	}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
		obj, ok := ev.Object.(V)
		if !ok {
			return informer.Event[V]{}, w.fail(fmt.Errorf("kubernetes: watch %s: %w: %s event with a %T, want %T",
				w.src.resource, informer.ErrBadInput, ev.Type, ev.Object, obj))
		}
		t := informer.Added
		if ev.Type == watch.Modified {
			t = informer.Modified
		} else if ev.Type == watch.Deleted {
			t = informer.Deleted
		}
		rev := obj.GetResourceVersion()
		w.src.saw(rev)
		return informer.Event[V]{Type: t, Object: obj, Revision: rev}, nil
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return informer.Event[V]{}, w.fail(fmt.Errorf("kubernetes: watch %s: %w: bookmark: %v", w.src.resource, informer.ErrBadInput, err))
		}
		w.src.saw(m.GetResourceVersion())
		return informer.Event[V]{
			Type:               informer.Bookmark,
			Revision:           m.GetResourceVersion(),
			EndOfInitialEvents: m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true",
		}, nil
	case watch.Error:
		err := apierrors.FromObject(ev.Object)
		if apierrors.IsUnexpectedObjectError(err) {
			return informer.Event[V]{}, w.fail(fmt.Errorf("kubernetes: watch %s: %w: %v", w.src.resource, informer.ErrBadInput, err))
		}
		return informer.Event[V]{}, w.fail(w.src.errorf("watch", err))
	}
	return informer.Event[V]{}, w.fail(fmt.Errorf("kubernetes: watch %s: %w: unknown event type %q", w.src.resource, informer.ErrBadInput, ev.Type))
}

// fail stops the underlying watch (an error ends the stream) and returns err.
func (w *watcher[V]) fail(err error) error {
	w.w.Stop()
	return err
}

// Stop ends the watch. It is safe to call more than once and from any goroutine.
func (w *watcher[V]) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.w.Stop()
	})
}
