package fanout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// tooMany answers 429 for a request beyond a limit.
func (c *core[V]) tooMany(w http.ResponseWriter, what, which string) {
	writeStatus(w, &wire.Status{Code: http.StatusTooManyRequests, Reason: "TooManyRequests",
		Message: fmt.Sprintf("too many %s (%s)", what, which)}, c.retryAfter)
}

// sourceError answers an error from the source (or from translating a request for it).
func (c *core[V]) sourceError(w http.ResponseWriter, err error) {
	se := c.statusOf(err)
	var retry time.Duration
	if se.Code == http.StatusTooManyRequests || se.Code == http.StatusServiceUnavailable {
		retry = c.retryAfter
		if d, ok := informer.RetryAfterOf(err); ok {
			retry = d
		}
	}
	writeStatus(w, se, retry)
}

// statusOf classifies an error from the source.
func (c *core[V]) statusOf(err error) *wire.Status {
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
	case errors.Is(err, informer.ErrNotSupported), c.plainIsBad:
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

// requestError is an error in a request's revision or token: answered by
// answerRequestError.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }

func (e *requestError) Unwrap() error { return e.err }

// answerRequestError answers an error from translating a revision or token: ErrExpired
// → 410 (a revision not reached within CatchUpWait too), ErrUnavailable → 503 with a
// Retry-After, the server shutting down → 503, anything else → 400.
func (c *core[V]) answerRequestError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, informer.ErrExpired):
		writeStatus(w, &wire.Status{Code: http.StatusGone, Reason: "Expired", Message: err.Error()}, 0)
		return
	case errors.Is(err, informer.ErrUnavailable):
		writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: err.Error()}, c.retryAfter)
		return
	case errors.Is(err, context.Canceled) && c.stopCtx.Err() != nil:
		c.shuttingDown(w)
		return
	}
	c.stats.BadRequests.Add(1)
	writeStatus(w, &wire.Status{Code: http.StatusBadRequest, Reason: "BadRequest", Message: err.Error()}, 0)
}

// shuttingDown answers 503 to a request that came in, or was cut, while the server shuts
// down.
func (c *core[V]) shuttingDown(w http.ResponseWriter) {
	writeStatus(w, &wire.Status{Code: http.StatusServiceUnavailable, Reason: "ServiceUnavailable", Message: "the server is shutting down"}, c.retryAfter)
}

// internalError is the status of a failure of the server's own (500).
func internalError(err error) *wire.Status {
	return &wire.Status{Code: http.StatusInternalServerError, Reason: "InternalError", Message: err.Error()}
}
