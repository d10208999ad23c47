package informer_test

import (
	"context"
	"log/slog"
	"sync"

	"github.com/informer-go/informer"
)

// quiet is a logger that drops everything: the tests below provoke failures on purpose.
var quiet = slog.New(slog.DiscardHandler)

// chanWatch is a Watch whose Next returns what is sent on next, until it is stopped or
// its context ends.
type chanWatch struct {
	ctx      context.Context
	next     chan watchResult
	stopOnce sync.Once
	stopped  chan struct{}
}

type watchResult struct {
	ev  informer.Event[*obj]
	err error
}

func newChanWatch(ctx context.Context, next chan watchResult) *chanWatch {
	return &chanWatch{ctx: ctx, next: next, stopped: make(chan struct{})}
}

func (w *chanWatch) Next() (informer.Event[*obj], error) {
	select {
	case r := <-w.next:
		return r.ev, r.err
	case <-w.ctx.Done():
		return informer.Event[*obj]{}, w.ctx.Err()
	case <-w.stopped:
		return informer.Event[*obj]{}, context.Canceled
	}
}

func (w *chanWatch) Stop() { w.stopOnce.Do(func() { close(w.stopped) }) }
