package informer

import "context"

// ProgressRequester is implemented by a source that can be asked for progress: a Bookmark
// at its current revision on its open watches, as soon as they have delivered every event
// before it (source/etcd's Source is one). A source cut off from its informer answers
// nothing, so a caller that asks and sees no bookmark within a bound knows the informer is
// not seeing its source, even while the source's client retries silently.
type ProgressRequester interface {
	// RequestProgress asks for a Bookmark on the open watches; it does not wait for it.
	RequestProgress(ctx context.Context) error
}
