package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/informer-go/informer"
)

// classify sorts an error of the etcd client into the informer's error classes. ctx is the
// caller's context: once it is done, the error is the context's, whatever etcd said.
func classify(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("etcd %s: %w", op, ctx.Err())
	}
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: etcd %s: %w", informer.ErrExpired, op, err)
	case errors.Is(err, rpctypes.ErrTooManyRequests):
		return fmt.Errorf("%w: etcd %s: %w", informer.ErrTooManyRequests, op, err)
	case errors.Is(err, context.DeadlineExceeded):
		// The request timeout ran out (ctx itself is not done).
		return fmt.Errorf("%w: etcd %s: %w", informer.ErrUnavailable, op, err)
	}
	switch grpcCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		// No leader, leader changed, timeouts inside etcd, a member stopping, no connection.
		return fmt.Errorf("%w: etcd %s: %w", informer.ErrUnavailable, op, err)
	}
	return fmt.Errorf("etcd %s: %w", op, err)
}

// grpcCode returns the gRPC code of an etcd client error, or codes.Unknown.
func grpcCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Unknown
}
