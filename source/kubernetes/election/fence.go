package election

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/informer-go/informer/manager"
)

// TermAnnotation is the annotation in which FencedUpdate keeps the term of an object's
// last fenced write.
const TermAnnotation = "informer-go.dev/term"

// ErrStaleTerm is returned by FencedUpdate when the object was last written under a
// higher term: the caller's term is over. Do not retry under it.
var ErrStaleTerm = errors.New("election: stale term: the write was refused")

// ErrNoTerm is returned by FencedUpdate when ctx carries no term (manager.TermFrom).
var ErrNoTerm = errors.New("election: no term in the context: fenced writes belong to leader-only runnables")

// FencedUpdate reads an object with get, refuses to write it if its TermAnnotation holds
// a term above the one ctx carries, lets mutate change it, sets TermAnnotation to ctx's
// term and writes it with update, which must send the resourceVersion read (a typed
// client's Update does). The API server then refuses the write if anything wrote the
// object since the read. So, per object, a write under an older term never lands after a
// write under a newer one: the newer leader's writes raise the annotation, and a stale
// leader's write racing with them fails on the resourceVersion. It returns the updated
// object; ErrStaleTerm (wrapped); ErrNoTerm; or get's, mutate's or update's error. On a
// conflict (apierrors.IsConflict) read again and retry: a newer term's write then shows
// in the annotation.
//
// Fencing is per object: the Lease itself cannot be part of the condition, as Kubernetes
// has no transaction across objects. Objects that several leaders' terms write must all
// go through FencedUpdate (or keep the annotation the same way).
func FencedUpdate[T metav1.Object](ctx context.Context, get func(context.Context) (T, error), mutate func(T) error, update func(context.Context, T) (T, error)) (T, error) {
	var zero T
	term, ok := manager.TermFrom(ctx)
	if !ok || term.IsZero() {
		return zero, ErrNoTerm
	}
	obj, err := get(ctx)
	if err != nil {
		return zero, err
	}
	if s, ok := obj.GetAnnotations()[TermAnnotation]; ok {
		if last, err := strconv.ParseInt(s, 10, 64); err == nil && last > term.Value {
			return zero, fmt.Errorf("%w: %s was written under term %d, above %d", ErrStaleTerm, obj.GetName(), last, term.Value)
		}
	}
	if err := mutate(obj); err != nil {
		return zero, err
	}
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[TermAnnotation] = strconv.FormatInt(term.Value, 10)
	obj.SetAnnotations(ann)
	return update(ctx, obj)
}
