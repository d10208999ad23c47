// Package fanout serves informers over HTTP: a Server serves one informer's collection to
// many processes from one upstream watch (the fan-out tier: replicas, filters, limits),
// and a PassThrough serves a bare informer.ListerWatcher request for request. Both speak
// the list+watch protocol that source/http's Client reads (the Kubernetes JSON shapes;
// see that package's documentation), defined once for both sides in an internal package.
//
// The package is named for what it does to an informer rather than for its transport,
// and lives outside source/ because it is not a source: it consumes an informer and
// serves it. A program that only mirrors an API imports source/http and none of this.
//
// # Revisions
//
// A PassThrough passes its source's revisions through, and sends the changes its source's
// watch says share a revision (informer.BatchedWatch) as a batch. A Server over an
// informer whose source has ordered revisions serves the upstream's revisions too, so
// that Informer.WaitForRevision on a client gives read-your-writes for writes to the
// upstream and replicas of the Server are interchangeable (httpsource.ClientOptions'
// FailoverURLs): a client resumes at another replica without a relist. Such a Server
// sends the changes of one upstream revision as a batch whose events but the last carry
// the revision followed by '~' ("42~", "42~", "42"); a Client delivers a batch only once
// it is whole. The initial events of a watch (a replay of the state for a watch from
// resourceVersion=0 or none, or sendInitialEvents=true) are one such batch at the state's
// revision. Over an unordered source a Server numbers its changes itself, "<tag>.<n>",
// and a Client refuses to compare such a revision with one of another numbering. See
// Server.
//
// When the informer of a Server over an ordered source lists another history of it (a
// source restored from a backup: its revisions go back behind those served, or come back
// to the newest with another state), the Server ends every watch, filtered or not, with
// the same 410 before it sends anything of the new history, and answers a request for a
// revision of the old one 410 at once: its clients list again, at the new history's
// revisions.
//
// Two histories share revision numbers: a client cut off during a restore may come back
// with a revision the new history has too, naming another state. So such a Server tags
// every revision it sends with its history, to a client that asks (the request header
// Informer-History: 1, which a Client sends): "42@k3j9x" (the partial mark goes after
// the tag). The tag is a fingerprint of the state the revision names (the sum of a hash
// of each object's encoding), the same at every replica that serves the same objects, so
// replicas stay interchangeable; a Server whose upstream's revisions carry tags (a chain
// of Servers) and a PassThrough pass them on unchanged. A watch resumed from a revision
// whose state the Server held (one of its batch ends) is resumed only if the tag is that
// state's; another tag is answered 410 (a client that saw a restore this Server has not
// seen yet, or the reverse). A revision without a tag (a client that does not ask for
// them, or a revision saved before) or inside one of the Server's batches (a client of
// another replica) cannot be checked: it is answered 410 if it is at or before the
// newest revision of a history the Server left, and resumed otherwise. A client that does
// not ask gets the revisions without tags, as before.
//
// Failures are answered with a Status body and a status code that says what to do:
//
//	410 Gone              the revision or continue token expired, or a Server replica has not reached the revision within ServerOptions.CatchUpWait: list again
//	429 Too Many Requests too many watchers or lists (in all, or of this client): wait Retry-After, then retry (a watch from the same revision, no relist)
//	503, other 5xx        transient: back off, watch again from the same revision
//	400, 401, 403, 404    the request is wrong or refused (a GET with a body is answered 400): reported, backed off, relisted
//
// # Filtered lists and watches
//
// A Server configured with filter indexes (ServerOptions.Filters: the names of indexes of
// the informer it serves, whose functions it calls through informer.Index) serves the
// objects under one value of one index to a client that asks with
// index=<name>&value=<value> (httpsource.ClientOptions' Filter), as a kube-apiserver
// serves a label selector: the list holds only those objects, and the watch sends only
// their changes, with an object that moves into the value sent as ADDED and one that
// moves out as DELETED, carrying the last state the value served. A filtered client's
// cache is therefore exactly the matching
// subset, and its revisions are the server's: it resumes from any of them, gets bookmarks
// at the server's newest revision while its value is idle (within 250 ms of a change
// elsewhere, so that its WaitForRevision of a write to another value returns soon), and
// lists again (filtered) on 410. A multi-valued index puts an object under each of its
// values.
//
// The server computes an object's values once per change, outside its lock, keeps for
// each value the objects under it (a B-tree bucket: a filtered list is an O(1)
// copy-on-write clone of it) and the events of the value since the history's start, and
// wakes only the watchers of the object's old and new values: a change costs the same
// whatever the number of watchers of other values (BenchmarkFilterDispatch). An index
// the server does not have is answered 400, naming the ones it has; a PassThrough has none.
//
// # Deletes whose last state is unknown
//
// A source may know only the key of a deleted object (source/etcd, for a delete whose
// previous value was compacted away; source/postgres, for a row deleted under the default
// replica identity) and say so: informer.Event.LastStateUnknown. An informer then hands
// OnDelete the state its cache held. A Server's informer does so, and its log's delete
// carries the state the Server served, so a Server sends the object's last state, with
// nothing to mark: every client, of any version, gets it whole. A PassThrough has no
// cache: it sends the key-only object and adds "lastStateUnknown":true to the frame
// ({"type":"DELETED","resourceVersion":"42","lastStateUnknown":true,"object":{…}}),
// which a Client passes on as Event.LastStateUnknown, so that a client informer's
// OnDelete gets the state its own cache held, as the upstream informer's did; a
// PassThrough over such a Client passes the mark on in turn. No header is needed: a
// reader that does not know the field ignores it (the envelope's unknown keys are
// ignored, by a Client of before the field and by Kubernetes clients) and takes the
// key-only object for the last state, as it did; an older server sends no field.
//
// # Costs
//
// A Server encodes each change once and every watcher reads the same bounded log; an
// idle watcher holds no write buffer. See Server.
//
// # How the pieces fit
//
// One handler serves a backend, the only thing it knows of what it serves; a Server and
// a PassThrough each build their backend, then the handler over it. The rooms meet
// through methods (exported names on unexported types), never each other's fields. One
// line per file, in the order a request flows:
//
//	request.go      the query of a request: parsed, checked, and what it asks for
//	handler.go      the serving handler: accept or refuse, then a list or a watch; shutdown
//	gate.go         admission: requests in progress, watch and list slots (in all, per
//	                client), each request's context, the ServeStats counters
//	status.go       Status answers and the classes of errors
//	report.go       failures nobody else sees: to ErrorHandler, or Warn lines
//	backend.go      what a handler serves: list a page, open a watch, revisions, encode
//	list.go         a page being sent, in chunks, cut if its revision goes stale
//	watch.go        a watch being sent: frames, batches, bookmarks, the pooled buffer
//	stream.go       the write side of a response: deadlines, progress, evictions, cuts
//	takeover.go     an HTTP/1.1 watch taken over from net/http; its chunked writer
//	hangup_*.go     one epoll set noticing clients that go away
//	passthrough.go  PassThrough and its backend, a ListerWatcher request for request
//	server.go       Server and ServerOptions; NewServer builds the rooms below
//	logbackend.go   the Server's backend: snapshots, paged lists, watches of its log
//	mirror.go       the informer handler that logs each change, encoded once
//	revisions.go    the revisions served: the upstream's (batches), or the server's own
//	filter.go       the filter indexes: values of each change, batches, compaction
//	filter_value.go one value of a filter index: its objects, its events, its watches
//
// The Server's log is internal/eventlog's, the one source/memory is built on.
package fanout
