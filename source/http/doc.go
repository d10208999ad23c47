// Package httpsource reads an informer's collection over HTTP: a Client is an
// informer.ListerWatcher for a collection served over HTTP list + chunked watch — the
// Kubernetes shape by default, any list+watch API through its extension points. The
// protocol is the Kubernetes API's JSON list/watch shape, so a Client can also mirror a
// kube-apiserver REST endpoint without client-go. Its server side — a fan-out Server that
// serves one informer to many processes, and a Handler that serves a bare ListerWatcher
// request for request — is package fanout.
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
// Kubernetes clients do. A DELETED event may carry "lastStateUnknown":true, also this
// package's addition: its object carries the key alone, not the object's last state (a
// fanout PassThrough whose source did not know it); the Client sets
// informer.Event.LastStateUnknown, and the informer hands OnDelete the state its cache
// held. Without the field (a Kubernetes API server, an older server) a DELETED event's
// object is the last state. Other parameters: resourceVersionMatch=NotOlderThan, and
// sendInitialEvents=true for a streaming list (the current state as ADDED events, then a
// BOOKMARK annotated k8s.io/initial-events-end).
//
// # Revisions
//
// A server may send the changes of one revision as a batch whose events but the last carry
// the revision followed by '~' ("42~", "42~", "42"); a Client delivers a batch only once
// it is whole. A fan-out Server over an unordered source numbers its changes itself,
// "<tag>.<n>", and a Client refuses to compare such a revision with one of another
// numbering (OrderedClient). A Client asks for revisions that name their history (the
// header Informer-History: 1): a fan-out Server over an ordered source then tags each,
// "42@k3j9x", so that a watch resumed from a revision of another history of the
// upstream (one restored from a backup) is answered 410; see PlainRevision and package
// fanout.
//
// Failures are answered with a Status body and a status code that says what to do:
//
//	410 Gone              the revision or continue token expired, or a Server replica has not reached the revision within ServerOptions.CatchUpWait: list again
//	429 Too Many Requests too many watchers or lists (in all, or of this client): wait Retry-After, then retry (a watch from the same revision, no relist)
//	503, other 5xx        transient: back off, watch again from the same revision
//	400, 401, 403, 404    the request is wrong or refused (a GET with a body is answered 400): reported, backed off, relisted
//
// Client sorts these (and connection failures and timeouts) into the informer's error
// classes; see StatusError. Anything malformed that a server sends — a bad list, a frame
// cut short, a line that is not JSON, an unknown event type, a body over a limit — fails
// the call (ends the watch) with an error that matches informer.ErrBadInput; the informer
// reports it and lists again, so the cache converges and never holds half an event. An
// object that cannot be decoded is the one thing a Client skips rather than fails on, in a
// list (see "Undecodable objects" below).
//
// One rule holds for the Content-Type of lists and watches alike: a response is read if
// it has no Content-Type or has the media type the request asked for in its Accept header
// — for JSON, application/json or one of the names of newline-delimited JSON
// (application/x-ndjson, …) or a +json type, parameters ignored; for Server-Sent Events,
// text/event-stream. Anything else (an HTML page from a proxy, text/plain) is
// informer.ErrBadInput, whatever the body holds.
//
// # Filtered lists and watches
//
// A client that sets ClientOptions.Filter asks a fan-out Server for the objects under one
// value of one of its filter indexes (index=<name>&value=<value>): its cache is exactly
// the matching subset, with an object that moves into the value arriving as ADDED and one
// that moves out as DELETED. See package fanout.
//
// # Mirroring another list+watch API
//
// The Kubernetes shape is what a Client speaks with no configuration. Five extension
// points of ClientOptions adapt it to any API that can list a collection at a revision
// and stream the changes after one. The worked example is etcd's own JSON gateway, which
// lists with POST /v3/kv/range and watches with POST /v3/watch; examples/etcdgateway in
// this repository is the complete adapter (about 300 lines, no etcd client library), and
// its test converges to the same state as source/etcd through a compaction, an etcd
// restart and a value that is not JSON.
//
//  1. The requests: ListRequest and WatchRequest receive the request the Client would
//     send (an OutgoingRequest: method, URL, headers, body) with the informer's
//     ListOptions or WatchOptions, and reshape it. The gateway's are POSTs of a JSON body:
//     {"key":…,"range_end":…,"limit":500,"revision":R} for a page and
//     {"create_request":{"key":…,"start_revision":R+1,"progress_notify":true}} for a watch.
//     A same-origin redirect resends the body. PrepareRequest stays for what every
//     request needs (an Authorization header).
//
//  2. The page: DecodeList splits a list body with the options of the request that
//     fetched it, so the revision and continue token can come from the request's side. A
//     gateway page reports the store's current revision, not the one the list is pinned
//     to; the adapter keeps the pinned revision in the continue token it makes
//     ("<revision>/<next key>") and reports it on every later page. Nothing is shared
//     between calls, so concurrent lists are safe. The items it returns go to Decode one
//     by one.
//
//  3. The frames: DecodeFrame turns one watch frame into zero or more events with
//     Frame.Add — all the changes of an etcd transaction in one gateway line, a Bookmark
//     for a progress notification, nothing for the "created" line — or returns an error
//     that ends the watch: a *StatusError (classified by Classify), an error that matches
//     an informer class, or anything else, which is bad input. The frame is parsed once,
//     by the hook; Frame.Decode offers the Client's item decoder for embedded objects.
//
//  4. The classes: Classify sees every failure the server reports — a non-200 response,
//     with its body in StatusError.Body, and an in-stream error — and returns its informer
//     class. The gateway answers a compacted revision with 400 {"code":11,…"compacted"}
//     and cancels a compacted watch in the stream; both become informer.ErrExpired, so the
//     informer lists again at once instead of backing off. The gateway's watches take no
//     timeout, so the adapter also sets EndWatchAtTimeout: the Client ends each watch
//     itself, cleanly, at the informer's timeout.
//
//  5. Undecodable objects: an item that Decode rejects is left out of its page and
//     reported as a *DecodeError (matching informer.ErrDecode) to every informer built
//     over the Client — its error handler and Stats.DecodeErrors, with no wiring: see
//     Client.ReportErrorsTo — and to OnDecodeError if set, and the rest of the page is
//     used; DecodeFrame does the same for a watch with Frame.Skip, leaving the cache's
//     previous state of the object. A later fix reaches the cache as any change does: its next watch event (an Added if
//     the list left it out), or the next list. Left out of a list, the object is absent
//     from the cache, as source/etcd leaves it.
//
// # Limits
//
// A Client bounds what a server can make it hold and how long it can make it wait; each
// bound is an option of ClientOptions with a documented default: MaxListBytes (256 MiB,
// after decompression), MaxListItems (1,000,000 per page), MaxBatch and MaxBatchBytes
// (the same for the events held of one batch, which a server may never end), MaxFrameSize (16 MiB),
// ResponseHeaderTimeout (1 minute, connecting included, whatever HTTPClient is given),
// ListTimeout (5 minutes for a whole page), WatchGrace (30 seconds past the requested
// watch timeout), WatchIdleTimeout (10 minutes between frames of a watch requested
// without a timeout; any watch of a Server, twice the bookmark interval the Server tells
// in its answer) and MaxRetryAfter (5 minutes). A server that goes silent, sends
// headers and nothing more, or drips bytes that never make a frame produces a retryable
// error and a new watch, not a stale cache reported as synced. A Client follows
// redirects only within the origin of its request (scheme, host and port): a redirect
// elsewhere, or from https to http, fails, so credentials are never sent to another
// origin.
//
// # Costs
//
// The client reads a watch without a goroutine of its own: Next reads the next line from
// a 32 KiB buffer, splits the envelope with an allocation-free scanner and hands the
// object's bytes to the item decoder, so decoding an event costs about what decoding its
// object with encoding/json costs.
package httpsource
