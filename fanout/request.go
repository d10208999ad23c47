package fanout

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/internal/wire"
)

// maxTimeoutSeconds bounds timeoutSeconds (about 68 years).
const maxTimeoutSeconds = 1<<31 - 1

// request is a validated query.
type request struct {
	watch     bool
	rv        string // "" when absent
	limit     int64
	cont      string
	timeout   time.Duration
	bookmarks bool
	initial   bool
	sse       bool
	filter    valueFilter // index= and value=; zero for none
	tagged    bool        // the client asks for revisions with their history's tag (wire.HeaderHistory); see Tagged
}

// Tagged reports whether the client asks for revisions with the tag of their history
// (wire.HeaderHistory); without it, tags are left out.
func (r request) Tagged() bool { return r.tagged }

// knownParams are the query parameters the protocol defines; any other is refused.
var knownParams = map[string]bool{
	wire.ParamWatch: true, wire.ParamResourceVersion: true, wire.ParamRVMatch: true, wire.ParamLimit: true,
	wire.ParamContinue: true, wire.ParamTimeoutSeconds: true, wire.ParamAllowBookmarks: true,
	wire.ParamSendInitialEvents: true, wire.ParamIndex: true, wire.ParamValue: true,
}

// parseRequest validates every query parameter and the Accept header.
func parseRequest(r *http.Request) (request, *wire.Status) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return request{}, badRequest("malformed query: %v", err)
	}
	for k, vs := range q {
		if !knownParams[k] {
			return request{}, badRequest("unknown query parameter %q (known: watch, resourceVersion, resourceVersionMatch, limit, continue, timeoutSeconds, allowWatchBookmarks, sendInitialEvents, index, value)", k)
		}
		if len(vs) != 1 {
			return request{}, badRequest("query parameter %q given %d times", k, len(vs))
		}
	}
	req, se := parseParams(q)
	if se == nil {
		se = req.check(q)
	}
	if se != nil {
		return request{}, se
	}
	sse, acceptable := negotiate(r.Header.Values("Accept"))
	if !acceptable {
		return request{}, &wire.Status{Code: http.StatusNotAcceptable, Reason: "NotAcceptable", Message: "this server sends application/json (NDJSON watch streams) or text/event-stream"}
	}
	req.sse = sse && req.watch
	req.tagged = r.Header.Get(wire.HeaderHistory) == "1"
	return req, nil
}

// badRequest is the status of a malformed request (400).
func badRequest(format string, args ...any) *wire.Status {
	return &wire.Status{Code: http.StatusBadRequest, Reason: "BadRequest", Message: fmt.Sprintf(format, args...)}
}

// parseParams reads each query parameter, given at most once, into a request.
func parseParams(q url.Values) (request, *wire.Status) {
	var req request
	var se *wire.Status
	if req.filter, se = parseFilter(q); se != nil {
		return request{}, se
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{wire.ParamWatch, &req.watch}, {wire.ParamAllowBookmarks, &req.bookmarks}, {wire.ParamSendInitialEvents, &req.initial}} {
		if v, ok := q[b.name]; ok {
			var err error
			if *b.dst, err = strconv.ParseBool(v[0]); err != nil {
				return request{}, badRequest("%s=%q is not a boolean", b.name, v[0])
			}
		}
	}
	req.rv = q.Get(wire.ParamResourceVersion)
	if len(req.rv) > 256 {
		return request{}, badRequest("%s is longer than 256 bytes", wire.ParamResourceVersion)
	}
	switch m := q.Get(wire.ParamRVMatch); m {
	case "", wire.RVMatchNotOlderThan:
	case "Exact":
		return request{}, badRequest("%s=Exact is not supported: this server serves only its current state", wire.ParamRVMatch)
	default:
		return request{}, badRequest("%s=%q: want NotOlderThan", wire.ParamRVMatch, m)
	}
	if v, ok := q[wire.ParamLimit]; ok {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || n < 0 {
			return request{}, badRequest("%s=%q is not a non-negative integer", wire.ParamLimit, v[0])
		}
		req.limit = n
	}
	if v, ok := q[wire.ParamContinue]; ok {
		if v[0] == "" {
			return request{}, badRequest("%s is empty", wire.ParamContinue)
		}
		req.cont = v[0]
	}
	if v, ok := q[wire.ParamTimeoutSeconds]; ok {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || n < 0 || n > maxTimeoutSeconds {
			return request{}, badRequest("%s=%q is not an integer in [0, %d]", wire.ParamTimeoutSeconds, v[0], maxTimeoutSeconds)
		}
		req.timeout = time.Duration(n) * time.Second
	}
	return req, nil
}

// IsWatch reports whether the request is a watch (watch=true); otherwise it is a list.
func (req *request) IsWatch() bool { return req.watch }

// Filter returns the filter the request asks for; zero for none.
func (req *request) Filter() valueFilter { return req.filter }

// List returns what a list request asks for: a revision ("" for none), a continue
// token, a page size (0: all) and a timeout (0: none).
func (req *request) List() (rev, cont string, limit int64, timeout time.Duration) {
	return req.rv, req.cont, req.limit, req.timeout
}

// Watch returns what a watch request asks for: the revision to watch from ("" for none:
// "" and "0" both), and the options of the watch. With replayOnEmpty a watch from no
// revision starts with the current state, as Kubernetes does (replay: initial events the
// client did not ask for by name).
func (req *request) Watch(replayOnEmpty bool) (rev string, opts informer.WatchOptions, replay bool) {
	opts = informer.WatchOptions{Timeout: req.timeout, AllowBookmarks: req.bookmarks, SendInitialEvents: req.initial}
	switch {
	case req.rv == "" || req.rv == "0":
		if replayOnEmpty && !req.initial {
			opts.SendInitialEvents, replay = true, true
		}
	default:
		rev = req.rv
	}
	return rev, opts, replay
}

// Stream returns how a watch is sent: as Server-Sent Events, and with bookmarks.
func (req *request) Stream() (sse, bookmarks bool) { return req.sse, req.bookmarks }

// check refuses the parameters that do not go together.
func (req *request) check(q url.Values) *wire.Status {
	switch {
	case req.watch && q.Has(wire.ParamLimit):
		return badRequest("%s applies to lists, not watches", wire.ParamLimit)
	case req.watch && req.cont != "":
		return badRequest("%s applies to lists, not watches", wire.ParamContinue)
	case !req.watch && req.initial:
		return badRequest("%s applies to watches only", wire.ParamSendInitialEvents)
	case req.cont != "" && req.rv != "" && req.rv != "0":
		return badRequest("%s cannot be combined with %s: the token pins the list's revision", wire.ParamResourceVersion, wire.ParamContinue)
	}
	return nil
}

// negotiate reads Accept headers: whether Server-Sent Events are asked for, and whether
// anything this server sends is acceptable.
func negotiate(accepts []string) (sse, ok bool) {
	if len(accepts) == 0 {
		return false, true
	}
	for _, h := range accepts {
		for part := range strings.SplitSeq(h, ",") {
			switch wire.MediaType(part) {
			case "text/event-stream":
				sse, ok = true, true
			case "", "*/*", "application/*", "application/json", "application/x-ndjson", "application/jsonl", "application/json-seq", "application/stream+json":
				ok = true
			}
		}
	}
	return sse, ok
}
