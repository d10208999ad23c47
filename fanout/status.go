package fanout

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// statusOf classifies an error from a backend; plainIsBad answers a plain
// (unclassified) error 400 rather than 500.
func statusOf(err error, plainIsBad bool) *wire.Status {
	var se *wire.Status
	if errors.As(err, &se) { // a Client as the source: pass the status on
		cp := *se
		return &cp
	}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, context.DeadlineExceeded): // timeoutSeconds of a list
		code = http.StatusGatewayTimeout
	case errors.Is(err, informer.ErrExpired):
		code = http.StatusGone
	case errors.Is(err, informer.ErrTooManyRequests):
		code = http.StatusTooManyRequests
	case errors.Is(err, informer.ErrRetryable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, informer.ErrNotSupported), plainIsBad:
		code = http.StatusBadRequest
	}
	return &wire.Status{Code: code, Reason: wire.Reason(code), Message: err.Error()}
}

// writeStatus answers with a Status body.
func writeStatus(w http.ResponseWriter, se *wire.Status, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(wire.RetrySeconds(retryAfter)))
	}
	body := wire.AppendStatus(nil, se.Code, se.Reason, se.Message, retryAfter)
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(se.Code)
	_, _ = w.Write(body)
}

// requestError is an error in a request's revision or token (the handler answers it
// 410, 503 or 400), not of the backend.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }

func (e *requestError) Unwrap() error { return e.err }

// internalError is the status of a failure of the server's own (500).
func internalError(err error) *wire.Status {
	return &wire.Status{Code: http.StatusInternalServerError, Reason: "InternalError", Message: err.Error()}
}
