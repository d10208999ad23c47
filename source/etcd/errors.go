package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/informer-go/informer"
)

// sourceError is an error of the Source. It matches an informer error class (errors.Is)
// without repeating the class's own message, so that the informer's report reads once:
// `informer "config": list: etcd list at 127.0.0.1:2379: unavailable: context deadline
// exceeded`. It unwraps to the class and to the etcd client's error, if any.
type sourceError struct {
	class error  // informer.ErrExpired, …; nil for none
	msg   string // what failed, in words
	err   error  // the cause; may be nil
}

func (e *sourceError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *sourceError) Unwrap() []error {
	var out []error
	if e.class != nil {
		out = append(out, e.class)
	}
	if e.err != nil {
		out = append(out, e.err)
	}
	return out
}

// newError returns a sourceError of class (nil: none) with the formatted message and the
// cause (nil: none).
func newError(class, cause error, format string, args ...any) error {
	return &sourceError{class: class, msg: fmt.Sprintf(format, args...), err: cause}
}

// at names an operation and the endpoints of the client: "list at 127.0.0.1:2379".
func (s *Source[V]) at(op string) string {
	eps := s.client.Endpoints()
	if len(eps) == 0 {
		return op
	}
	return op + " at " + strings.Join(eps, ",")
}

// classify sorts an error of the etcd client into the informer's error classes. ctx is the
// caller's context: once it is done, the error is the context's, whatever etcd said. op
// names the operation (and where: see Source.at).
func classify(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("etcd %s: %w", op, ctx.Err())
	}
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return &sourceError{class: informer.ErrExpired, msg: "etcd " + op + ": revision compacted", err: err}
	case errors.Is(err, rpctypes.ErrTooManyRequests):
		return &sourceError{class: informer.ErrTooManyRequests, msg: "etcd " + op + ": too many requests", err: err}
	case errors.Is(err, context.DeadlineExceeded):
		// The request timeout ran out (ctx itself is not done).
		return &sourceError{class: informer.ErrUnavailable, msg: "etcd " + op + ": unavailable (request timed out)", err: err}
	}
	switch grpcCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		// No leader, leader changed, timeouts inside etcd, a member stopping, no connection.
		return &sourceError{class: informer.ErrUnavailable, msg: "etcd " + op + ": unavailable", err: err}
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
