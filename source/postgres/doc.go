// Package postgres mirrors a PostgreSQL table into an informer through logical
// replication: Source[V] is an informer.ListerWatcher[V] over one table, rows decoded
// into V by column name (struct tags) or by a Decoder you supply. It is its own Go module,
// so that only programs that use it pull in pgx.
//
//	src, err := postgres.New(postgres.Config[*Setting]{
//		ConnString: "postgres://informer@db/app",
//		Table:      "settings", // and, once: CREATE PUBLICATION informer_settings FOR TABLE settings
//	})
//	defer src.Close()
//	inf, err := informer.New(src, informer.Options[string, *Setting]{
//		Key: func(s *Setting) (string, error) { return s.Name, nil },
//	})
//
// # What the informer gets
//
// List opens one replication connection, used by the list and by the watch that follows
// it, and creates a replication slot on it (temporary: PostgreSQL drops it with its
// connection) inside a REPEATABLE READ transaction, whose snapshot is the database at the
// slot's consistent point; the list reads the table in that transaction, one SELECT whose rows the
// source reads and decodes a page ahead of the informer (the server copies no page aside,
// a page costs no round trip, and the informer takes in a page while the next is read),
// and reports the consistent point as its revision; each page's
// List.Bytes is the size of its row data, for the informer's progress log. Watch then
// streams the slot's changes with pgoutput over the table's publication: an INSERT is an
// Added event, an UPDATE Modified, a DELETE Deleted. Revisions are LSNs ("0/16B3748"), compared as
// such (Source implements informer.RevisionComparer, so WaitForRevision with
// pg_current_wal_insert_lsn() after a write gives read-your-writes). A transaction's
// events all carry the LSN of its commit's end, and the watch implements
// informer.BatchedWatch: the informer counts that revision as reached only once the
// transaction is whole in the cache. A TRUNCATE makes the informer list again.
//
// The watch reports what it has delivered to the server every Config.StatusInterval (a
// standby status update), so that the server recycles the WAL before it; with bookmarks
// allowed, the server's answer becomes a Bookmark at its WAL position, so the informer's
// revision keeps up with writes to other tables.
//
// # Rows
//
// Rows arrive in PostgreSQL's text format and are decoded through pgx's type map: a
// column of any type pgx knows decodes into the Go types pgx scans it into (a nullable
// column into a pointer). Relation messages carry the table's shape as it changes: a
// column added or dropped while the informer runs is decoded by name from then on.
//
// A DELETE carries only the table's replica identity, by default its primary key: the
// Deleted event's object has the key columns set and the other fields zero (enough for the
// informer's key function), and the event says so (informer.Event.LastStateUnknown), so
// OnDelete receives the state the informer held for the row, the last one its handlers
// were given, finalStateUnknown false. With REPLICA IDENTITY FULL the DELETE carries the
// whole row, and OnDelete receives that. An UPDATE that changes the key is a Deleted
// event for the old key and a Modified one for the new.
//
// An UPDATE that leaves a TOASTed column (a large value stored out of its row) unchanged
// does not send that value. The source keeps a copy of every value of at least 2,000
// bytes it received (the memory of those values, a second time) and supplies it; a value
// it did not keep is read back from the table, which may give a newer value that the
// stream then delivers too.
//
// # Errors
//
// A row that cannot be decoded is reported as a *DecodeError naming the table and the
// row's key (informer.ErrDecode), to every informer built over the source and to
// Config.OnDecodeError, and left out of the cache: a listed or inserted row is skipped,
// an updated one is deleted from the cache, so that the cache never keeps a state the
// table no longer has. It enters the cache once a later change decodes.
//
// wal_level below logical, a missing table, and a publication that is missing or does
// not publish the table fail List with an error that says what to run.
//
// A watch on a temporary slot whose connection fails (the server restarted, the backend
// terminated) loses the slot: the error matches informer.ErrExpired and the informer
// lists again, delivering only the differences when informer.Options.Revision tells
// changed rows from unchanged ones (an updated_at or version column, or the row's
// content).
//
// # Identity and warm restarts
//
// SourceID is the server's system identifier and timeline, the database and the table:
// a cache saved from another server, or from before a point-in-time restore or a
// promotion (a new timeline), is not restored; a watch that finds the server on another
// timeline (a failover to a promoted standby, say, reached through a connection string
// that names several hosts with target_session_attrs=read-write) fails with
// informer.ErrOtherHistory, which matches ErrExpired: the informer reports it and lists
// again, and its handlers hear only the rows that differ.
//
// A point-in-time restore (a base backup restored, its recovery ended, the server
// promoted) starts a new timeline from a position behind the writes it lost. A running
// informer's stream breaks with the old server (a retryable error: its temporary slot is
// gone, but the watch that follows first identifies the server); watching again finds the
// new timeline and fails with informer.ErrOtherHistory, reported, and the informer lists
// the restored server. While the restored server is still in recovery, on the old
// timeline and short of the watch's revision, the watch fails with
// informer.ErrUnavailable and is tried again: a standby that lags may yet reach it, and a
// restore that promotes does so onto a new timeline. From that error until the list is in, WaitForRevision waits: the
// cache's revision, of the lost writes, says nothing about the restored server's
// positions, which reach it again. A copy of the data directory restored as
// it was (a disk snapshot, no recovery) keeps the timeline and the named slot as they
// were: the source cannot tell it from the history it left, and a warm restart resumes
// on the saved cache. After such a restore, drop the named slot (DropSlot) and delete
// the saved cache.
//
// A warm restart (informer.Options.Persist) needs a slot that outlives the process:
// Config.Slot names one. The source then watches from the saved revision on that slot,
// and fails with ErrExpired, so that the informer lists, if the slot is gone, has lost
// its WAL, or has confirmed a position past the revision. A named slot keeps the WAL it
// has not confirmed while no informer reads it: set the server's max_slot_wal_keep_size
// to bound it (the slot is invalidated past it, and the source lists again), and drop a
// slot no longer used with DropSlot.
package postgres
