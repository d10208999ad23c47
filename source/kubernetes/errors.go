package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/informer-go/informer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// errorf wraps err, from the request op on s's resource, with the informer error class it
// belongs to. The result matches both the class and the original error.
func (s *Source[V]) errorf(op string, err error) error {
	if e := s.tooLarge(op, err); e != nil {
		return e
	}
	return fmt.Errorf("kubernetes: %s %s: %w", op, s.resource, classify(err))
}

// classify returns err joined with its informer error class, if it has one.
func classify(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err // the caller's context, not the server
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		switch {
		case st.Code == http.StatusGone || st.Reason == metav1.StatusReasonExpired || st.Reason == metav1.StatusReasonGone:
			return fmt.Errorf("%w: %w", informer.ErrExpired, err)
		case st.Code == http.StatusTooManyRequests || st.Reason == metav1.StatusReasonTooManyRequests:
			return withRetryAfter(fmt.Errorf("%w: %w", informer.ErrTooManyRequests, err), err)
		case st.Code == http.StatusServiceUnavailable || st.Reason == metav1.StatusReasonServiceUnavailable:
			return withRetryAfter(fmt.Errorf("%w: %w", informer.ErrUnavailable, err), err)
		case st.Reason == metav1.StatusReasonServerTimeout || st.Reason == metav1.StatusReasonTimeout:
			return withRetryAfter(fmt.Errorf("%w: %w", informer.ErrRetryable, err), err)
		case st.Code == http.StatusInternalServerError:
			// Not retried from the same revision: a 500 can be tied to that revision (a
			// watch just above a compaction, an event the client could not decode), and
			// would then fail the same way forever. The informer lists again, as
			// client-go's reflector does.
			return err
		case st.Code > 500:
			return withRetryAfter(fmt.Errorf("%w: %w", informer.ErrRetryable, err), err)
		}
		return err
	}
	switch {
	case utilnet.IsConnectionRefused(err):
		return fmt.Errorf("%w: %w", informer.ErrConnectionRefused, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err),
		utilnet.IsHTTP2ConnectionLost(err), isNetTimeout(err):
		return fmt.Errorf("%w: %w", informer.ErrRetryable, err)
	}
	return err
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// withRetryAfter attaches the delay the server asked for (Retry-After, or a status's
// retryAfterSeconds), if any.
func withRetryAfter(classified, apiErr error) error {
	if secs, ok := apierrors.SuggestsClientDelay(apiErr); ok && secs > 0 {
		return informer.RetryAfter(classified, time.Duration(secs)*time.Second)
	}
	return classified
}

// refusesStreaming reports whether err, the answer to a streaming-list watch, means that
// the server will not serve streaming lists (as opposed to a transient failure): the
// request was rejected as invalid, or the method is not supported.
func refusesStreaming(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsMethodNotSupported(err) || apierrors.IsNotAcceptable(err)
}
