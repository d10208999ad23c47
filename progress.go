package informer

import (
	"context"
	"fmt"
)

// ProgressRequester is implemented by a source that can be asked for progress: a Bookmark
// at its current revision on its open watches, as soon as they have delivered every event
// before it (source/etcd's Source is one). A source cut off from its informer answers
// nothing, so a caller that asks and sees no bookmark within a bound knows the informer is
// not seeing its source, even while the source's client retries silently.
type ProgressRequester interface {
	// RequestProgress asks for a Bookmark on the open watches; it does not wait for it.
	RequestProgress(ctx context.Context) error
}

// RequestProgress asks the informer's source for progress if it is a ProgressRequester;
// the bookmark that follows counts in Stats.Bookmarks and moves Stats.ReceivedRevision. It
// returns an error wrapping ErrNotSupported for a source that cannot be asked, and the
// source's error otherwise. The manager package's readiness calls it while a source is
// quiet.
func (inf *Informer[K, V]) RequestProgress(ctx context.Context) error {
	p, ok := inf.refl.lw.(ProgressRequester)
	if !ok {
		return fmt.Errorf("informer %q: requesting progress: %w", inf.opts.Name, ErrNotSupported)
	}
	if err := p.RequestProgress(ctx); err != nil {
		return fmt.Errorf("informer %q: requesting progress: %w", inf.opts.Name, err)
	}
	return nil
}
