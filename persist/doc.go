// Package persist makes an informer's restarts warm: it keeps the informer's cache in a
// snapshot file, and at the next start the informer loads it and resumes the watch from
// the snapshot's revision instead of listing the whole collection. A File implements
// informer.Persister; set it as informer.Options.Persist:
//
//	f, err := persist.New[string, *Config](dir, persist.Options[*Config]{Schema: "v1"})
//	inf, err := informer.New(src, informer.Options[string, *Config]{Key: key, Persist: f})
//
// # Guarantees
//
// Each guarantee names the tests that check it.
//
//   - A snapshot is one revision: it is written only when the cache is exactly the source's
//     state at the cache's revision (nothing queued and not yet applied, nothing applied
//     beyond it, no transaction in part: see informer.BatchedWatch), from an immutable
//     informer.Snapshot, so it is never newer or older than the revision it records
//     (TestSavedStateIsOneRevision checks every save under a stream of writes against the
//     source's history; TestTransactionsAreReadAndSavedWhole in source/etcd every save
//     under multi-key etcd transactions against etcd's state at the saved revision).
//   - Never a torn file: Save writes a temporary file, fsyncs it, renames it over the
//     snapshot and fsyncs the directory; a process killed at any byte of the write, or
//     between the steps, leaves either the previous snapshot or the new one, whole
//     (TestKilledMidWrite, which re-runs the test binary as a child and kills it at
//     random offsets). A save whose write fails at any byte (a full disk, an error of
//     Options.WrapWriter) returns the error and leaves the previous snapshot whole and
//     no temporary file (TestWrapWriterFailureKeepsPreviousSnapshot); a Load while a
//     save is in progress leaves that save's temporary file alone
//     (TestLoadDuringStalledSave).
//   - Never a damaged load: a CRC-32C over the whole file, a trailer, an object count and
//     bounds on every length refuse a truncated or corrupted file with ErrCorrupt, whatever
//     the byte (TestLoadRefusesTruncated, TestLoadRefusesCorrupted); the informer then
//     reports why through its ErrorHandler and lists, as on a first start
//     (TestWarmRestartRefusesCorrupt).
//   - Never loaded wrong: the header records Options.Schema (your version of the key
//     function, Transform and object type), the codec's name, the informer's name, the
//     objects' Go type, the source's identity (informer.SourceIdentifier: the etcd
//     cluster and prefix, the server behind a URL, …) and the index names; a snapshot
//     written with any of them different is refused with ErrIncompatible and the informer
//     starts cold (TestWarmRestartRefusesIncompatible, TestWarmRestartRefusesOtherType,
//     TestWarmRestartRefusesOtherSource).
//   - Never read into another shape: Binary writes fields by position, so the header also
//     records the object type's shape as Binary writes it (the kinds and the stored
//     fields' names in order, recursively). A new build whose type changed shape reads
//     the snapshot only if Binary reads it exactly: json tags, type names and json:"-"
//     fields changed, integers made wider of the same signedness (int32 to int64, uint8
//     to uint). Any other change (a field renamed, moved, added or removed, a kind
//     changed, int to uint, float32 to float64, also inside nested structs, maps and
//     slices) is refused with ErrIncompatible naming the first difference ("field
//     Config.Port: was int, now uint"), and the informer lists (TestShapeChangeRefused,
//     TestShapeChangeRestored, TestReadsExactly). A Binary snapshot written before the
//     shape was recorded is refused once the same way; snapshots of other codecs are read
//     (TestLoadPreviousFormat). The shape of a codec of your own is yours to version: bump
//     Options.Schema or the codec's name when its encoding changes.
//   - No silent loss: New logs the codec it chose, once, with why Binary could not serve
//     the type. The default codec falls back to JSON only for a type JSON gives back as it
//     was; New refuses a type with an unexported field, an interface (its numbers come
//     back as float64), a float (NaN and ±Inf fail every save) or a kind JSON refuses,
//     saying to give Options.Codec a codec of your own, unless Options.AllowLossyJSON
//     accepts the loss (TestNewRefusesTypesJSONLoses, TestCodecChoiceLogged). A
//     time.Time is accepted: JSON keeps its instant and offset, not its Location's name
//     nor its monotonic reading. With the default JSON codec a string that is not valid
//     UTF-8 fails the save rather than come back with U+FFFD; a save that fails for a
//     value names the object's key and why, and the previous snapshot stays
//     (TestSaveFailureNamesObject).
//   - A warm start tells handlers of each restored object once, as an initial add, then
//     only of what changed while the process was down; if the saved revision expired,
//     the informer lists and delivers only the differences: updates for changed objects,
//     adds for new ones, deletes with finalStateUnknown for missing ones, never a second
//     round of initial adds (TestWarmRestartMemory, TestWarmRestartAfterCompaction,
//     TestWarmRestartAfterCompactionWithRevision, TestWarmRestartSourceReset for a
//     snapshot newer than the source, TestRestoreIndexError for an object an index
//     function rejects; over source/http, TestWarmRestartHTTP; over a real etcd,
//     TestWarmRestartEtcd and TestWarmRestartEtcdCompacted in source/etcd;
//     examples/configmirror's TestEmbeddedWarmRestart).
//   - Changes are saved: every Interval while the informer runs, when the cache changed,
//     and once more when it stops (TestPeriodicSave).
//   - Never trusted across a restore: a source restored from a backup keeps its
//     identity but not its history, so a source that implements informer.HistoryProver
//     (source/etcd) is asked, before a loaded state is used, whether it is its own state
//     at the saved revision; if not, the informer reports an error matching
//     informer.ErrOtherHistory and lists (TestWarmRestartRestoredEtcd in source/etcd). A
//     running informer across such a restore relists the same way, delivering only the
//     differences (TestRunningInformerAcrossRestore). Restoring etcd with
//     `etcdutl snapshot restore --bump-revision N --mark-compacted` (etcd's advice when
//     clients watch) makes every saved and watched revision compacted: warm starts and
//     running informers relist at once (TestRestoreBumpRevisionRelists). Since such a
//     restore and a plain compaction look the same to the proof, a HistoryProver that
//     has compacted the saved revision proves nothing: the warm start lists as a first
//     start does, or, with informer.Options.ServeUnconfirmed, serves the saved state
//     unconfirmed until the list replaces it with only the differences
//     (TestWarmRestartEtcdCompacted in source/etcd).
//   - A source that does not answer at a warm start is named at Warn within 5 s, with
//     what to do; the informer waits for it and then uses the saved state, or, with
//     informer.Options.ServeUnconfirmed, serves the saved state at once marked
//     informer.Stats.Unconfirmed (File.SavedSource says which source it was saved from)
//     and confirms or relists when the source answers (TestWarmStartEtcdDown,
//     TestWarmStartEtcdDownServeUnconfirmed, TestWarmStartEtcdDownRestoredUnconfirmed in
//     source/etcd).
//
// # Costs and format
//
// Load is one sequential read with a reused record buffer; Save one sequential write
// from an immutable snapshot, which never blocks the informer (it pins the memory of the
// state it writes while it runs): a save stalled in the middle of its file holds up
// neither the watch, the handlers, the reads nor WaitForRevision
// (TestStalledSaveDoesNotBlockTheInformer). Options.WrapWriter sees every byte a save
// writes, in order (TestWrapWriterSeesEveryByte): to count, hash or rate-limit them, or
// to make a disk slow or full in a test. The format is length-prefixed records after a header,
// chosen for load speed (see format.go): the file is read in one pass while GOMAXPROCS
// workers decode the records, and the cache is built in one write. Decoding is most of a
// load's cost: with JSON an object of 1 KiB costs several microseconds, with Binary (the
// default for plain types) or a codec of your own (CodecFuncs over any Encode/Decode
// pair) a fraction of that; give a type that is not plain a codec of its own when its
// cache is large. Figures: BenchmarkLoad,
// BenchmarkListMemory and BenchmarkWarmStart here, BenchmarkWarmStartEtcd in
// source/etcd; for 1,000,000 objects of about 1 KiB run
//
//	PERSIST_BENCH_OBJECTS=1000000 go test -run '^$' -bench 'Load|ListMemory|WarmStart' -benchtime 1x ./persist/
//	ETCD_BENCH_OBJECTS=1000000 go test -run '^$' -bench WarmStartEtcd -benchtime 1x -timeout 60m ./source/etcd/
//
// A plain snapshot file, not an embedded database such as bbolt: the informer needs one
// whole, consistent state per revision, written in the background and read once at
// start. A full rewrite of a sequential file is the cheapest way to both (no page
// overhead, no per-key B-tree writes, no compaction, no new dependency in the root
// module); incremental writes would save disk bandwidth for huge caches saved often, at
// the price of a second store to keep consistent with the cache.
package persist
