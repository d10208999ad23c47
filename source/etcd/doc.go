// Package etcd mirrors an etcd v3 key prefix into an informer: Source[V] is an
// informer.ListerWatcher[V] over every key under a prefix, decoded into typed values by a
// function you supply. It is its own Go module, so that only programs that use it pull in
// the etcd client and gRPC.
//
//	src, err := etcd.New(client, "/config/", func(key, value []byte) (*Config, error) {
//		c := &Config{Name: string(key)}
//		if value == nil { // a delete whose last value etcd no longer has
//			return c, nil
//		}
//		return c, json.Unmarshal(value, c)
//	}, etcd.Options{})
//	inf, err := informer.New(src, informer.Options[string, *Config]{
//		Key:          func(c *Config) (string, error) { return c.Name, nil },
//		ErrorHandler: report,
//	})
//
// # What the informer gets
//
// List reads the prefix with paged Gets sorted by key (pages of up to 50,000 keys for an
// informer left at its default page size, each within Options.PageBytes, 8 MiB, of
// key-values; see Source.DefaultPageSize); every page after the first is read
// at the first page's revision (etcd's MVCC keeps it), so the pages together are one
// consistent state, and the list reports that revision. Watch streams the prefix's changes
// after a revision with etcd's watch, opened with WithRequireLeader and WithPrevKV: a
// put of a new key is an Added event, a put of an existing key Modified, a delete
// (including a lease expiry) Deleted. Progress notifications become Bookmark events when
// the watch allows bookmarks, so the informer's revision keeps up with writes outside the
// prefix; RequestProgress asks for one at once.
//
// Revisions are etcd's store revisions as decimal strings ("42"), and Source implements
// informer.RevisionComparer, so Informer.WaitForRevision gives read-your-writes: take the
// revision from a write's response header (resp.Header.Revision), wait for it, read the
// cache. The revision of a write outside the prefix is reached only with the next progress
// notification (etcd sends one every 10 minutes by default; see
// --watch-progress-notify-interval), or at once after RequestProgress.
//
// # What OnDelete receives
//
// A Deleted event carries the key's last value, decoded: etcd sends it along with the
// delete (WithPrevKV), so OnDelete normally receives the last state, finalStateUnknown
// false. There are two exceptions:
//
//   - The last value is gone: etcd cannot send it when the previous revision was compacted
//     away before the watch delivered the delete (a watch that fell behind a compaction).
//     etcd may also leave it out of an event it sends as the watch starts: the server
//     turns the watch's previous values on only after it has started the watch.
//   - The last value does not decode (it was skipped when it was written).
//
// In both, the decoder is called with the key and a nil value, and the event is marked
// informer.Event.LastStateUnknown: the object carries the key alone, so a decoder should
// return, for a nil value, an object from which the informer's key function computes the
// key. The informer then hands OnDelete the state its cache holds for the key, the last
// one its handlers were given, finalStateUnknown still false: the delete was observed at
// its revision, and the watch delivered every change before it, so that state is the
// key's last (in the second case, the last that decoded; the value that did not was
// reported when it was written). If the decoder fails on the nil value, the error is
// reported like any decode error and the watch ends with an error that matches
// informer.ErrExpired: the informer lists again, and the vanished key reaches OnDelete as
// a tombstone, finalStateUnknown true, with the last state the informer knew. A delete
// is never dropped.
//
// # Restores from a backup
//
// An etcd restored from a backup (etcdutl snapshot restore with the cluster's own name,
// peer URLs and token, etcd's disaster recovery) keeps its cluster ID, so SourceID does
// not change, but its history after the backup's revision is another one. Two checks
// keep an informer from trusting the old one:
//
//   - At a warm restart, Source.ProveHistory (informer.HistoryProver) reads the prefix at
//     the saved revision without values and compares the number of keys and their
//     ModRevisions with the saved state's; if they differ, the informer lists. For the
//     ModRevisions, decode with NewKV, keep kv.ModRevision in the object and return it
//     from informer.Options.Revision; without it only the number of keys is compared.
//   - On a running watch, every response's header and every reconnection of the client
//     (which resumes the watch without telling) are checked: a cluster behind the
//     revision the watch has seen, or another cluster ID, ends the watch with an error
//     that matches informer.ErrOtherHistory (and so informer.ErrExpired); the informer
//     reports it and relists, and handlers hear only the differences. Each watch holds
//     one goroutine that waits for the connection's state to change.
//
// Restoring with --bump-revision N --mark-compacted (etcd's advice when clients watch)
// makes every earlier revision compacted: warm starts and running informers relist at
// once, with no proof needed.
//
// # Errors
//
// Every error names what failed and, for a request to etcd, the endpoints of the client
// ("etcd list at 127.0.0.1:2379: unavailable: …"); it matches the informer's error class
// with errors.Is without repeating the class's text, so that the informer's report reads
// once: `informer "config": list: etcd list at 127.0.0.1:2379: unavailable: …`.
//
//   - A compacted revision (a list page or a watch older than etcd's history) is an error
//     that matches informer.ErrExpired; the informer lists again.
//   - No leader, an unreachable or overloaded cluster, a request that timed out
//     (Options.RequestTimeout) and a watch that could not be opened in time match
//     informer.ErrUnavailable and so informer.ErrRetryable; the informer backs off and
//     watches again from the same revision. While a watch is open, the etcd client hides
//     short disconnections: it reconnects and resumes the watch where it stopped.
//   - A malformed revision, continue token or option matches informer.ErrBadInput.
//   - Authentication and permission errors are returned as they are (not retryable
//     classes); the informer reports them and lists again after a backoff.
//   - A value the decoder rejects is reported as a *DecodeError (which matches
//     informer.ErrDecode and informer.ErrBadInput) to every informer built over the source
//     (informer.New hands the source its error sink: the error reaches the informer's
//     ErrorHandler, its log and Stats.DecodeErrors, and the "decode" kind of its metrics),
//     to Options.OnDecodeError if set, counted by DecodeErrors, and skipped: a list leaves
//     the key out (the informer then treats it as absent), a watch leaves the cache's
//     previous state of the key in place, and a later value that decodes is applied as
//     usual.
//
// # Costs
//
// One Get per page (etcd counts the rest of the range on every page, so a list of n keys
// in pages of p costs the server O(n²/p) index steps, as any paged etcd read does: hence
// the large default pages, bounded in bytes rather than keys); pages
// after the first are serializable reads at the pinned revision, which any member can
// serve without a round trip to the leader. One watch per informer on the client's shared
// gRPC watch stream. The etcd client buffers watch responses that the informer has not
// read yet without a bound (a client-side property of etcd's watch).
//
// TLS, username and password, endpoints and keep-alives are all configured in the
// clientv3.Config of the client you pass; the Source never closes that client.
package etcd
