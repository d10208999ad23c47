// Package httpsource carries an informer's collection over HTTP, in both directions: a
// Client is an informer.ListerWatcher for a collection served over HTTP list + chunked
// watch, and a Server serves any informer's collection the same way, so that many
// processes can mirror one source through one upstream watch (the fan-out tier). Handler
// serves a bare ListerWatcher, request for request. The protocol is the Kubernetes API's
// JSON list/watch shape, so a Client can also mirror a kube-apiserver REST endpoint
// without client-go.
//
// # Protocol
//
// A list is GET <url>?limit=N&continue=T&resourceVersion=R, answered 200 with
//
//	{"metadata":{"resourceVersion":"R","continue":"T"},"items":[…]}
//
// and pages of one list all reflect the revision of the first. A watch is
// GET <url>?watch=1&resourceVersion=R&timeoutSeconds=S&allowWatchBookmarks=true, answered
// 200 with a chunked body of one event per line (NDJSON; Content-Type application/json):
//
//	{"type":"ADDED","resourceVersion":"R","object":{…}}
//
// with type ADDED, MODIFIED, DELETED, BOOKMARK (whose object carries only
// metadata.resourceVersion) or ERROR (whose object is a Kubernetes Status with a code). A
// client that asks for Accept: text/event-stream gets the same events as Server-Sent
// Events ("data: {…}" and a blank line). The envelope's resourceVersion is this package's
// addition; without it a client takes the object's metadata.resourceVersion, as
// Kubernetes clients do. Other parameters: resourceVersionMatch=NotOlderThan, and
// sendInitialEvents=true for a streaming list (the current state as ADDED events, then a
// BOOKMARK annotated k8s.io/initial-events-end).
//
// Failures are answered with a Status body and a status code that says what to do:
//
//	410 Gone              the revision or continue token expired: list again
//	429 Too Many Requests too many watchers: wait Retry-After, watch again (no relist)
//	503, other 5xx        transient: back off, watch again from the same revision
//	400, 401, 403, 404    the request is wrong or refused: reported, backed off, relisted
//
// Client sorts these (and connection failures) into the informer's error classes; see
// StatusError. Anything malformed that a server sends — a bad list, a frame cut short, a
// line that is not JSON, an unknown event type, an object the decoder rejects — ends the
// watch with an error that matches informer.ErrBadInput; the informer reports it and lists
// again, so the cache converges and never holds half an event.
//
// # Costs
//
// The client reads a watch without a goroutine of its own: Next reads the next line from
// a 32 KiB buffer, splits the envelope with an allocation-free scanner and hands the
// object's bytes to the item decoder, so decoding an event costs about what decoding its
// object with encoding/json costs. A Server encodes each change once and every watcher
// reads the same bounded log; see Server.
package httpsource
