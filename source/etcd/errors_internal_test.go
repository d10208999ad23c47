package etcd

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/informer-go/informer"
)

// classify sorts the etcd client's errors into the informer's classes.
func TestClassify(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want []error // classes the result must match
		not  []error // classes it must not
	}{
		{"compacted", context.Background(), rpctypes.ErrCompacted, []error{informer.ErrExpired, rpctypes.ErrCompacted}, []error{informer.ErrRetryable}},
		{"no leader", context.Background(), rpctypes.ErrNoLeader, []error{informer.ErrUnavailable, informer.ErrRetryable}, []error{informer.ErrExpired}},
		{"leader changed", context.Background(), rpctypes.ErrLeaderChanged, []error{informer.ErrUnavailable}, nil},
		{"etcd timeout", context.Background(), rpctypes.ErrTimeout, []error{informer.ErrUnavailable}, nil},
		{"connection lost", context.Background(), rpctypes.ErrTimeoutDueToConnectionLost, []error{informer.ErrUnavailable}, nil},
		{"grpc unavailable", context.Background(), status.Error(codes.Unavailable, "connection refused"), []error{informer.ErrUnavailable}, nil},
		{"request timeout", context.Background(), context.DeadlineExceeded, []error{informer.ErrUnavailable}, nil},
		{"grpc deadline", context.Background(), status.Error(codes.DeadlineExceeded, "deadline"), []error{informer.ErrUnavailable}, nil},
		{"too many requests", context.Background(), rpctypes.ErrTooManyRequests, []error{informer.ErrTooManyRequests, informer.ErrRetryable}, nil},
		{"permission denied", context.Background(), rpctypes.ErrPermissionDenied, []error{rpctypes.ErrPermissionDenied}, []error{informer.ErrRetryable, informer.ErrExpired}},
		{"cancelled", cancelled, rpctypes.ErrNoLeader, []error{context.Canceled}, []error{informer.ErrRetryable}},
	}
	for _, tc := range tests {
		got := classify(tc.ctx, "op", tc.err)
		for _, w := range tc.want {
			if !errors.Is(got, w) {
				t.Errorf("%s: %v does not match %v", tc.name, got, w)
			}
		}
		for _, n := range tc.not {
			if errors.Is(got, n) {
				t.Errorf("%s: %v matches %v", tc.name, got, n)
			}
		}
	}
}
