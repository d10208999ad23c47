package httpsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// InstanceHeader is the response header in which a Server names its instance: its
// revisions and continue tokens mean something to that instance only. A Client's SourceID
// includes it, so that a cache saved from one instance is not restored over another.
const InstanceHeader = wire.HeaderInstance

// HistoryHeader is the request header by which a Client asks a fan-out Server for
// revisions that carry the tag of their history ("42@k3j9x"; see PlainRevision). A Client
// sends it on every request; a server that does not know it ignores it.
const HistoryHeader = wire.HeaderHistory

// StatusError is a failure reported by the server, either as an HTTP response with a
// non-200 status or as an ERROR event in a watch stream. Its body is a Kubernetes Status
// object: {"kind":"Status","status":"Failure","message":…,"reason":…,"code":…}.
//
// It matches the informer error classes with errors.Is, so that an informer reacts as the
// protocol intends: code 410 (or reason "Expired"/"Gone") matches informer.ErrExpired and
// makes the informer list again; 429 matches informer.ErrTooManyRequests, 503
// informer.ErrUnavailable, and every other 5xx informer.ErrRetryable, which make it back off
// and watch again from the same revision. Any other code (400, 401, 403, 404, …) matches no
// class: the informer reports it, backs off and lists again. ClientOptions.Classify may
// set another class (Class) for an API whose codes mean something else. A Retry-After
// header (or details.retryAfterSeconds), capped by ClientOptions.MaxRetryAfter, is
// attached with informer.RetryAfter around the StatusError.
type StatusError struct {
	// Code is the HTTP status code (from the response, or the Status object's code).
	Code int `json:"code,omitempty"`
	// Reason is a machine-readable word, as in Kubernetes: "Expired", "TooManyRequests",
	// "BadRequest", "Unauthorized", "Forbidden", "InternalError", …
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable description.
	Message string `json:"message,omitempty"`
	// Details carries the server's retry hint, if any.
	Details *StatusDetails `json:"details,omitempty"`

	// Body is the body of a non-200 response as a Client read it (at most 64 KiB), for
	// ClientOptions.Classify to read an API's own error shape; nil for an in-stream error.
	Body []byte `json:"-"`
	// Class, when set (by ClientOptions.Classify), is the informer error class the status
	// matches, in place of the one its code gives.
	Class error `json:"-"`
	// Request names the request that failed ("GET http://host/path?query"), when a Client
	// made the error; it starts the message.
	Request string `json:"-"`
}

// StatusDetails is the part of a Kubernetes Status's details this package reads.
type StatusDetails struct {
	// RetryAfterSeconds is how long the client should wait before it retries.
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
}

// Error returns "httpsource <request>: server said <code> <reason>: <message>".
func (e *StatusError) Error() string {
	var b strings.Builder
	b.WriteString("httpsource")
	if e.Request != "" {
		b.WriteByte(' ')
		b.WriteString(e.Request)
	}
	b.WriteString(": server said ")
	b.WriteString(strconv.Itoa(e.Code))
	if e.Reason != "" {
		b.WriteByte(' ')
		b.WriteString(e.Reason)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is matches the informer error class of the status (see StatusError).
func (e *StatusError) Is(target error) bool {
	class := e.class()
	return class != nil && (target == class || errors.Is(class, target))
}

// Unwrap returns the failure as the protocol carries it (code, reason, message), so that
// a fan-out server whose source is a Client passes the status on to its own clients.
func (e *StatusError) Unwrap() error {
	return &wire.Status{Code: e.Code, Reason: e.Reason, Message: e.Message}
}

// class returns the informer error class of the status, nil for none.
func (e *StatusError) class() error {
	if e.Class != nil {
		return e.Class
	}
	switch {
	case e.Code == http.StatusGone || (e.Code == 0 && (e.Reason == "Expired" || e.Reason == "Gone")):
		return informer.ErrExpired
	case e.Code == http.StatusTooManyRequests || (e.Code == 0 && e.Reason == "TooManyRequests"):
		return informer.ErrTooManyRequests
	case e.Code == http.StatusServiceUnavailable || (e.Code == 0 && e.Reason == "ServiceUnavailable"):
		return informer.ErrUnavailable
	case e.Code >= 500 && e.Code <= 599 || (e.Code == 0 && e.Reason == "InternalError"):
		return informer.ErrRetryable
	}
	return nil
}

// withRetryAfter wraps err with informer.RetryAfter when a delay is known.
func withRetryAfter(err error, d time.Duration) error {
	if d > 0 {
		return informer.RetryAfter(err, d)
	}
	return err
}

// statusFromResponse reads the status of a response whose status is not 200, and its
// retry delay capped at maxRetryAfter. It reads at most 64 KiB of the body and uses it as
// a Status object if it is one, else as the message.
func statusFromResponse(resp *http.Response, maxRetryAfter time.Duration) (*StatusError, time.Duration) {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	se := &StatusError{}
	if json.Unmarshal(body, se) != nil || (se.Code == 0 && se.Reason == "" && se.Message == "") {
		se = &StatusError{Message: strings.TrimSpace(string(body))}
	}
	se.Code = resp.StatusCode // the HTTP status is authoritative
	if se.Reason == "" {
		se.Reason = wire.Reason(resp.StatusCode)
	}
	se.Body = body
	d, _ := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	if d == 0 && se.Details != nil && se.Details.RetryAfterSeconds > 0 {
		d = secondsUpTo(se.Details.RetryAfterSeconds, maxRetryAfter)
	}
	return se, min(d, maxRetryAfter)
}

// secondsUpTo is n seconds (n > 0), or limit if that is longer, without overflow.
func secondsUpTo(n int, limit time.Duration) time.Duration {
	if int64(n) > int64(limit/time.Second) {
		return limit
	}
	return min(time.Duration(n)*time.Second, limit)
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(h string, now time.Time) (time.Duration, bool) {
	if h == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > math.MaxInt64/int64(time.Second) {
			n = math.MaxInt64 / int64(time.Second)
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// badInput wraps an error about what the server sent so that it matches
// informer.ErrBadInput.
func badInput(format string, args ...any) error {
	return fmt.Errorf("httpsource: %w: "+format, append([]any{informer.ErrBadInput}, args...)...)
}
