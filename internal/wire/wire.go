// Package wire is the list+watch protocol over HTTP, defined once for both of its sides:
// httpsource.Client reads it and fanout (the Server and the pass-through handler) writes
// it. It holds the query parameters and headers, the event types, the revision forms (a
// server's own numbering <tag>.<n>, the partial mark of a batch), the Status body of a
// failure, and the JSON envelopes of a list page and a watch event: split by an
// allocation-free scanner on the reading side, appended to a buffer on the writing side.
// The protocol itself is described in the documentation of source/http.
package wire

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The query parameters of the protocol, as the Kubernetes API spells them, and the two of
// a filter (index=<name>&value=<value>).
const (
	ParamWatch             = "watch"
	ParamResourceVersion   = "resourceVersion"
	ParamRVMatch           = "resourceVersionMatch"
	ParamLimit             = "limit"
	ParamContinue          = "continue"
	ParamTimeoutSeconds    = "timeoutSeconds"
	ParamAllowBookmarks    = "allowWatchBookmarks"
	ParamSendInitialEvents = "sendInitialEvents"
	ParamIndex             = "index"
	ParamValue             = "value"

	// RVMatchNotOlderThan is the only resourceVersionMatch sent or served.
	RVMatchNotOlderThan = "NotOlderThan"
)

// The headers of the protocol.
const (
	// HeaderBookmarkInterval is the response header of a watch by which a server tells a
	// client that asked for bookmarks how often it sends one to an idle watcher, in
	// seconds (a decimal number): a client ends the watch after two intervals without a
	// frame.
	HeaderBookmarkInterval = "Informer-Bookmark-Interval"
	// HeaderInstance is the response header in which a fan-out server names its instance:
	// its revisions and continue tokens mean something to that instance only.
	HeaderInstance = "Informer-Instance"
	// HeaderHistory is the request header by which a client asks for revisions that name
	// their history (value "1"): a fan-out Server over an ordered upstream then sends every
	// revision with the history mark and the tag of the state it names ("42@k3j9x"), and a
	// handler passes such tags on; without it they are left out, as older servers send.
	HeaderHistory = "Informer-History"
)

// The event types of a watch frame.
const (
	TypeAdded    = "ADDED"
	TypeModified = "MODIFIED"
	TypeDeleted  = "DELETED"
	TypeBookmark = "BOOKMARK"
	TypeError    = "ERROR"
)

const (
	// InitialEventsEnd is the annotation a Kubernetes API server puts on the bookmark that
	// ends the initial events of a streaming list.
	InitialEventsEnd = "k8s.io/initial-events-end"

	// PartialMark ends the revision of an event that is not the last of its batch: a
	// client applies the events of one revision all at once.
	PartialMark = '~'

	// HistoryMark separates a revision from the tag of the state it names, which tells
	// two histories of one upstream apart ("42@k3j9x"; a partial mark goes after the tag).
	HistoryMark = '@'

	// DefaultMaxFrameSize is the longest watch frame a client accepts by default: 16 MiB.
	DefaultMaxFrameSize = 16 << 20
	// MaxEnvelope is the most a watch frame adds around its object:
	// data: {"type":"MODIFIED","resourceVersion":"<19 digits>","object":…}, a blank line.
	MaxEnvelope = 1 << 10
)

// Status is a failure as the protocol carries it: the HTTP status code, the Kubernetes
// reason word and a message, sent as a Status body (AppendStatus) or in an ERROR event.
type Status struct {
	// Code is the HTTP status code.
	Code int
	// Reason is the Kubernetes reason word ("Expired", "BadRequest", …); see Reason.
	Reason string
	// Message says what happened, for a person.
	Message string
}

// Error returns "<code> <reason>: <message>".
func (s *Status) Error() string {
	return strconv.Itoa(s.Code) + " " + s.Reason + ": " + s.Message
}

// Reason returns the Kubernetes reason word for an HTTP status code.
func Reason(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "BadRequest"
	case http.StatusUnauthorized:
		return "Unauthorized"
	case http.StatusForbidden:
		return "Forbidden"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowed"
	case http.StatusNotAcceptable:
		return "NotAcceptable"
	case http.StatusGone:
		return "Expired"
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	case http.StatusGatewayTimeout:
		return "Timeout"
	}
	if code >= 500 {
		return "InternalError"
	}
	return ""
}

// AppendStatus appends the JSON of a Kubernetes Status object for a failure.
func AppendStatus(dst []byte, code int, reason, message string, retryAfter time.Duration) []byte {
	dst = append(dst, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":`...)
	dst = AppendJSONString(dst, message)
	dst = append(dst, `,"reason":`...)
	dst = AppendJSONString(dst, reason)
	if retryAfter > 0 {
		dst = append(dst, `,"details":{"retryAfterSeconds":`...)
		dst = strconv.AppendInt(dst, int64(RetrySeconds(retryAfter)), 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	return append(dst, '}')
}

// RetrySeconds rounds a delay up to whole seconds, at least 1, for a Retry-After header.
func RetrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// AppendJSONString appends s as a JSON string.
func AppendJSONString(dst []byte, s string) []byte {
	b, err := json.Marshal(s)
	if err != nil { // cannot happen for a string
		return append(dst, `""`...)
	}
	return append(dst, b...)
}

// AppendQuoted appends s as a JSON string; the common case (no character that needs an
// escape) is a plain copy.
func AppendQuoted(dst, s []byte) []byte {
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return AppendJSONString(dst, string(s))
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// MediaType returns the media type of a Content-Type header, lower case, without
// parameters; "" if there is none.
func MediaType(contentType string) string {
	if contentType == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0]))
	}
	return mt
}

// IsOwnRevision reports whether a revision has the form of a fan-out server's own
// numbering: <tag>.<n>, the tag in base 36.
func IsOwnRevision(s string) bool {
	tag, n, ok := strings.Cut(s, ".")
	return ok && tag != "" && IsCanonicalInteger(n) && strings.IndexFunc(tag, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z')
	}) < 0
}

// CutHistory splits a revision (without its partial mark) into the revision and the tag
// of its history, "" when it has none.
func CutHistory(rev string) (plain, tag string) {
	if i := strings.IndexByte(rev, HistoryMark); i >= 0 {
		return rev[:i], rev[i+1:]
	}
	return rev, ""
}

// StripHistory drops the history tag of a revision in its wire form, keeping its partial
// mark: for a client that did not ask for tags (HeaderHistory).
func StripHistory(rev []byte) []byte {
	i := bytes.IndexByte(rev, HistoryMark)
	if i < 0 {
		return rev
	}
	if rev[len(rev)-1] == PartialMark {
		return append(rev[:i], PartialMark)
	}
	return rev[:i]
}

// IsCanonicalInteger reports whether s is a non-negative decimal integer without leading
// zeros.
func IsCanonicalInteger(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}
