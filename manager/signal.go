package manager

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// SignalContext returns a copy of parent that is cancelled on the first SIGTERM or SIGINT,
// with the signal as its cause (context.Cause), so that Start stops in order. A second
// signal exits the process at once with status 1, for an operator who will not wait. stop
// stops listening and releases the context; call it when Start has returned.
func SignalContext(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case sig := <-sigs:
			cancel(fmt.Errorf("manager: received %v", sig))
		case <-quit:
			return
		}
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "manager: received %v again: exiting now\n", sig)
			os.Exit(1)
		case <-quit:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(quit)
		<-done
		cancel(context.Canceled)
	}
}
