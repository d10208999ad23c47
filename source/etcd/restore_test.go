package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/source/etcd"
)

// backup saves the server's state as a snapshot file (etcdctl snapshot save) and returns
// its path.
func (s *server) backup() string {
	s.t.Helper()
	path := filepath.Join(s.t.TempDir(), "backup.db")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := clientv3.Config{Endpoints: []string{s.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if _, err := snapshot.NewV3(zap.NewNop()).Save(ctx, cfg, path); err != nil {
		s.t.Fatalf("snapshot save: %v", err)
	}
	return path
}

// restore stops the server and starts it again from the backup at path, restored as
// etcd's disaster recovery says (etcdutl snapshot restore) with the member's own name,
// peer URL and cluster token, so that the cluster keeps its ID. bump > 0 restores with
// --bump-revision bump --mark-compacted.
func (s *server) restore(path string, bump uint64) {
	s.t.Helper()
	s.Stop()
	token := s.token
	if token == "" {
		token = embed.NewConfig().InitialClusterToken
	}
	dir := filepath.Join(s.t.TempDir(), "restored")
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                "test",
		OutputDataDir:       dir,
		PeerURLs:            []string{s.peerURL.String()},
		InitialCluster:      "test=" + s.peerURL.String(),
		InitialClusterToken: token,
		RevisionBump:        bump,
		MarkCompacted:       bump > 0,
	})
	if err != nil {
		s.t.Fatalf("snapshot restore: %v", err)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		s.t.Fatal(err)
	}
	s.dir = dir
	s.Restart()
}

// newKVSource is etcd.NewKV with objects that carry their ModRevision.
func newKVSource(t testing.TB, c *clientv3.Client, prefix string) *etcd.Source[*item] {
	t.Helper()
	src, err := etcd.NewKV(c, prefix, decodeKV, etcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// modRevision is informer.Options.Revision for objects decoded by decodeKV.
func modRevision(it *item) string { return etcd.FormatRevision(it.ModRevision) }

// etcdState reads prefix from etcd as key → value.
func etcdState(t testing.TB, c *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = string(kv.Value)
	}
	return m
}

// writeRounds puts n values round keys k00.. of prefix in turn, tagged with tag, and
// returns the revision of the last put.
func writeRounds(t *testing.T, c *clientv3.Client, prefix, tag string, n, keys int) int64 {
	t.Helper()
	var rev int64
	for i := range n {
		rev = putRetrying(t, c, fmt.Sprintf("%sk%02d", prefix, i%keys), fmt.Sprintf("%s%d", tag, i))
	}
	return rev
}

// behindBackup starts etcd and puts round "a" under prefix (before values over as many
// keys), backs it up, then puts round "b" (after values over keys keys), so that the
// backup is behind etcd. It returns the server, a client, the backup's path and the
// revision of the last put.
func behindBackup(t *testing.T, prefix string, before, after, keys int) (*server, *clientv3.Client, string, int64) {
	t.Helper()
	srv, c := startWithClient(t)
	writeRounds(t, c, prefix, "a", before, before)
	backup := srv.backup()
	return srv, c, backup, writeRounds(t, c, prefix, "b", after, keys)
}

// savedCache is the first half of a warm start: an informer with opts over prefix runs
// until its cache holds revision rev and stops, which saves the cache in a new directory.
// It returns opts with a Persist over that directory, for the second half.
func savedCache(t *testing.T, c *clientv3.Client, prefix string, opts informer.Options[string, *item], rev int64) informer.Options[string, *item] {
	t.Helper()
	dir := t.TempDir()
	opts.Persist = newPersistFile(t, dir)
	first, _, stop := startStoppableInformer(t, newKVSource(t, c, prefix), opts, nil)
	waitRev(t, first, rev)
	stop()
	opts.Persist = newPersistFile(t, dir)
	return opts
}

// A warm start against an etcd restored from a backup (same cluster ID) whose state at
// the saved revision is another history's is not trusted: the informer proves the saved
// state against etcd at that revision, finds it is not etcd's, reports it and lists.
func TestWarmRestartRestoredEtcd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead int // puts in the restored cluster past the saved revision
	}{{"at the saved revision", 0}, {"past the saved revision", 40}} {
		t.Run(tc.name, func(t *testing.T) {
			const p = "/rb/"
			srv, c, backup, saved := behindBackup(t, p, 50, 60, 50)

			opts := savedCache(t, c, p, informer.Options[string, *item]{Revision: modRevision}, saved)

			srv.restore(backup, 0)
			// Another workload after the backup, up to the saved revision (and past it).
			if rev := writeRounds(t, c, p, "c", 60+tc.ahead, 20); rev != saved+int64(tc.ahead) {
				t.Fatalf("the restored cluster is at %d, want %d", rev, saved+int64(tc.ahead))
			}
			want := etcdState(t, c, p)

			errs := new(testkit.Errors)
			inf, _, _ := startStoppableInformer(t, newKVSource(t, c, p), opts, errs)
			waitCache(t, inf, want)
			if st := inf.Stats(); st.Lists == 0 {
				t.Fatal("the restored cluster's state was taken without a list")
			}
			e := errs.All()
			if len(e) != 1 || !errors.Is(e[0], informer.ErrOtherHistory) {
				t.Fatalf("reported %v, want one ErrOtherHistory", e)
			}
		})
	}
}

// A running informer across a restore of etcd from a backup behind its revision: the
// etcd client resumes the watch without telling, and the informer finds the cluster
// behind the revision it has seen (after the reconnection): it relists, and handlers
// hear only the differences. Then it follows the restored cluster's changes, also past
// the revision it had before the restore.
func TestRunningInformerAcrossRestore(t *testing.T) {
	const p = "/rr/"
	srv, c, backup, last := behindBackup(t, p, 50, 40, 40)
	for i := 50; i < 90; i++ { // keys the restored cluster never had
		last = put(t, c, fmt.Sprintf("%sx%02d", p, i), "new")
	}
	errs := new(testkit.Errors)
	src := newKVSource(t, c, p)
	inf, _, _ := startStoppableInformer(t, src, informer.Options[string, *item]{
		Revision: modRevision,
		Backoff:  informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	}, errs)
	waitRev(t, inf, last)
	relists := inf.Stats().Relists

	srv.restore(backup, 0)
	want := etcdState(t, c, p)
	informertest.Eventually(t, 30*time.Second, func() bool {
		return maps.Equal(cacheState(inf), want)
	}, "the cache kept what the restored etcd no longer has: %d objects, etcd %d", len(cacheState(inf)), len(want))
	if st := inf.Stats(); st.Relists != relists+1 {
		t.Fatalf("%d relists after the restore, want 1", st.Relists-relists)
	}
	if e := errorsNot(errs.All(), informer.ErrRetryable); len(e) != 1 || !errors.Is(e[0], informer.ErrOtherHistory) {
		t.Fatalf("reported %v, want one ErrOtherHistory", e)
	}
	// Past the revision it had before the restore, it follows the restored cluster.
	after := writeRounds(t, c, p, "c", int(last)+10-int(srv.revision()), 50)
	waitRev(t, inf, after)
	if got, want := cacheState(inf), etcdState(t, c, p); !maps.Equal(got, want) {
		t.Fatalf("cache after the restored cluster passed the old revision:\n%s", mapDiff(got, want))
	}
}

// revision returns the cluster's revision.
func (s *server) revision() int64 {
	s.t.Helper()
	return s.e.Server.KV().Rev()
}

// A restore with --bump-revision and --mark-compacted (etcd's advice for clusters with
// watchers) is seen at once as a compaction: a running informer and a warm start both
// relist, and end with the restored state.
func TestRestoreBumpRevisionRelists(t *testing.T) {
	const p = "/rc/"
	srv, c, backup, last := behindBackup(t, p, 50, 40, 20)
	errs := new(testkit.Errors)
	opts := informer.Options[string, *item]{
		Revision: modRevision,
		Backoff:  informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	}
	warm := savedCache(t, c, p, opts, last) // saved at last, before the restore
	inf, _, _ := startStoppableInformer(t, newKVSource(t, c, p), opts, errs)
	waitRev(t, inf, last)
	expirations := inf.Stats().Expirations

	srv.restore(backup, 1000)
	want := etcdState(t, c, p)
	informertest.Eventually(t, 30*time.Second, func() bool {
		return maps.Equal(cacheState(inf), want) && inf.Stats().Expirations > expirations
	}, "the running informer did not relist after the restore")

	// The saved revision is compacted in the restored cluster, so the saved state cannot
	// be proven: the warm start lists, and its first published state is etcd's.
	errs = new(testkit.Errors)
	again, _, _ := startStoppableInformer(t, newKVSource(t, c, p), warm, errs)
	if got := cacheState(again); again.Stats().Restored || !maps.Equal(got, want) {
		t.Fatalf("the warm start published a state the restored etcd never had (restored %v): %d keys, etcd %d", again.Stats().Restored, len(got), len(want))
	}
	waitCache(t, again, want)
	if e := errorsNot(errs.All(), informer.ErrExpired); len(e) != 0 {
		t.Fatalf("reported %v", e)
	}
}
