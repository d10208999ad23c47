package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/source/postgres"
	"github.com/informer-go/informer/source/postgres/pgtest"
)

// errorLog keeps the errors an informer reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// all returns the errors reported so far.
func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// matching returns the errors that match target.
func (l *errorLog) matching(target error) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []error
	for _, err := range l.errs {
		if errors.Is(err, target) {
			out = append(out, err)
		}
	}
	return out
}

// restoreSetup starts a server of its own with a table of 20 rows, and returns it and
// the table's name.
func restoreSetup(t *testing.T) (*pgtest.Server, string) {
	t.Helper()
	connect(t) // skips without a server
	s, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	name := newTable(t, connectTo(t, s.URL))
	exec(t, connectTo(t, s.URL), "INSERT INTO "+name+" SELECT i, 'n', 'v'||i FROM generate_series(1, 20) i")
	return s, name
}

// loseWrites takes a base backup of s, then writes what the restore will lose: an
// update and a delete of rows the backup holds, and an insert.
func loseWrites(t *testing.T, s *pgtest.Server, name string) pgtest.Backup {
	t.Helper()
	b, err := s.Backup()
	if err != nil {
		t.Fatal(err)
	}
	writeLost(t, connectTo(t, s.URL), name)
	return b
}

// writeLost writes, on c, what a restore will lose: an update and a delete of rows a
// backup holds, and an insert.
func writeLost(t *testing.T, c *pgx.Conn, name string) {
	t.Helper()
	exec(t, c, "UPDATE "+name+" SET value = 'lost' WHERE id = 1")
	exec(t, c, "DELETE FROM "+name+" WHERE id = 3")
	exec(t, c, "INSERT INTO "+name+" VALUES (100, 'n', 'lost')")
}

// informerThroughLostWrites starts a server of its own (restoreSetup), runs an informer
// over it with a temporary slot, takes a base backup and writes what a restore of it
// loses (loseWrites), and waits until the informer's handlers have heard the list and
// those writes, exactly. It returns the server, the table, the backup, the informer, its
// recorder and the errors it reports.
func informerThroughLostWrites(t *testing.T) (*pgtest.Server, string, pgtest.Backup, *informer.Informer[int64, *item], *informertest.Recorder[*item], *errorLog) {
	t.Helper()
	s, name := restoreSetup(t)
	log := &errorLog{}
	src := newSource(t, name, func(cfg *postgres.Config[*item]) { cfg.ConnString = s.URL })
	inf, rec := run(t, src, byContent, func(o *informer.Options[int64, *item]) {
		o.Backoff = informer.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
		o.ErrorHandler = func(err error) { t.Logf("informer error: %v", err); log.add(err) }
	})
	rec.WaitFor(t, 20)
	b := loseWrites(t, s, name)
	rec.ExpectNextUnordered(t, "add*1=v1", "add*2=v2", "add*3=v3", "add*4=v4", "add*5=v5", "add*6=v6", "add*7=v7", "add*8=v8", "add*9=v9", "add*10=v10",
		"add*11=v11", "add*12=v12", "add*13=v13", "add*14=v14", "add*15=v15", "add*16=v16", "add*17=v17", "add*18=v18", "add*19=v19", "add*20=v20")
	rec.ExpectNextUnordered(t, "update 1=v1→lost", "delete 3=v3", "add 100=lost")
	caughtUp(t, connectTo(t, s.URL), inf, name)
	return s, name, b, inf, rec, log
}

// A point-in-time restore under a running informer (a temporary slot): the primary
// takes writes after a base backup, stops, and the backup is restored on its address,
// which ends recovery at the backup and promotes onto a new timeline. The watch ends
// with the slot's connection; watching again finds the server on a new timeline
// (ErrOtherHistory, reported); the informer lists the restored server, and its handlers
// hear exactly the rows that differ from the lost writes' state, and nothing of that
// state afterwards.
func TestRestoreFromBaseBackupRelists(t *testing.T) {
	s, name, b, inf, rec, log := informerThroughLostWrites(t)
	lostAt := inf.Snapshot().Revision()

	if err := s.Restore(b); err != nil {
		t.Fatal(err)
	}
	c := connectTo(t, s.URL)
	exec(t, c, "UPDATE "+name+" SET value = 'restored' WHERE id = 2")
	rec.ExpectNextUnordered(t, "update 1=lost→v1", "add 3=v3", "delete?100=lost", "update 2=v2→restored")
	caughtUp(t, c, inf, name)
	rec.ExpectNoMore(t)
	// The watch ended with the temporary slot's connection (reported as retryable);
	// watching again found the server on another timeline and said so, once; the
	// informer then listed the new history consistently, not asking for a list at least
	// as new as the lost writes' revision.
	other := log.matching(informer.ErrOtherHistory)
	if len(other) != 1 || !strings.Contains(other[0].Error(), "watch from "+lostAt+": the server is now system ") ||
		!strings.Contains(other[0].Error(), "timeline 2, not system ") {
		t.Fatalf("the informer reported %v, want one error of another history (timeline 2) from the watch at %s", other, lostAt)
	}
	if stale := log.matching(informer.ErrBadInput); len(stale) != 0 {
		t.Fatalf("the informer reported %v, want no list older than it asked for", stale)
	}
}

// A restore still in recovery is waited for, not taken for another history: the
// restored server accepts connections while it replays the backup's WAL, on the old
// timeline and behind the watch's revision, as a standby that lags does. The watch
// reports it unavailable and tries again; once the server promotes, onto a new
// timeline, the watch finds another history, once, and the informer lists again.
func TestRestoreInRecoveryIsWaitedFor(t *testing.T) {
	s, name, b, inf, rec, log := informerThroughLostWrites(t)

	before := len(log.all())
	if err := s.RestorePaused(b); err != nil {
		t.Fatal(err)
	}
	// Two attempts of the informer against the paused server.
	paused := len(log.all())
	informertest.Eventually(t, time.Minute, func() bool { return len(log.all()) >= paused+2 },
		"the informer did not try the paused server twice")
	for _, err := range log.all()[before:] {
		if errors.Is(err, informer.ErrOtherHistory) || !errors.Is(err, informer.ErrRetryable) {
			t.Fatalf("while the server was in recovery the informer reported %v, want it waited for as unavailable", err)
		}
	}
	rec.ExpectNoMore(t)

	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	rec.ExpectNextUnordered(t, "update 1=lost→v1", "add 3=v3", "delete?100=lost")
	caughtUp(t, connectTo(t, s.URL), inf, name)
	rec.ExpectNoMore(t)
	if other := log.matching(informer.ErrOtherHistory); len(other) != 1 || !strings.Contains(other[0].Error(), "timeline 2, not system ") {
		t.Fatalf("the informer reported %v, want one error of another history, timeline 2", other)
	}
}

// A warm restart after a point-in-time restore: the informer (a named slot, its cache
// saved) stopped after the writes the restore loses, so the saved cache holds them. The
// restored server is on a new timeline, so its SourceID is another: the saved cache is
// refused (reported once), not served even with ServeUnconfirmed, and the informer
// lists the restored table.
func TestWarmRestartAfterRestoreFromBaseBackup(t *testing.T) {
	s, name := restoreSetup(t)
	slot := "informer_restored"
	dir := t.TempDir()
	var log errorLog
	start := func() (*informer.Informer[int64, *item], *informertest.Recorder[*item], func()) {
		return warmStart(t, name, dir, func(cfg *postgres.Config[*item]) { cfg.ConnString, cfg.Slot = s.URL, slot }, true, log.add)
	}
	inf, rec, stop := start()
	rec.WaitFor(t, 20)
	b := loseWrites(t, s, name)
	rec.WaitForLine(t, "add 100=lost")
	caughtUp(t, connectTo(t, s.URL), inf, name)
	stop()

	if err := s.Restore(b); err != nil {
		t.Fatal(err)
	}
	c := connectTo(t, s.URL)
	exec(t, c, "UPDATE "+name+" SET value = 'restored' WHERE id = 2")
	inf, rec, stop = start()
	defer stop()
	caughtUp(t, c, inf, name)
	rec.ExpectNextUnordered(t, restoredAdds()...)
	rec.ExpectNoMore(t)
	if st := inf.Stats(); st.Restored || st.Unconfirmed || st.Lists != 1 {
		t.Fatalf("restored %v, unconfirmed %v, %d lists: want no restore and one list", st.Restored, st.Unconfirmed, st.Lists)
	}
	errs := log.all()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "persisted cache not used, listing instead") ||
		!strings.Contains(errs[0].Error(), "/1/postgres/"+name+`", this informer's source is "postgres:`) ||
		!strings.HasSuffix(errs[0].Error(), "/2/postgres/"+name+`" (another cluster, prefix or server: its revisions mean nothing here)`) {
		t.Fatalf("the informer reported %v, want the saved cache refused as from timeline 1, the server being on timeline 2", errs)
	}
}

// restoredAdds are the initial adds of the restored table after the write to row 2.
func restoredAdds() []string {
	adds := []string{"add*2=restored"}
	for i := 1; i <= 20; i++ {
		if i != 2 {
			adds = append(adds, fmt.Sprintf("add*%d=v%d", i, i))
		}
	}
	return adds
}

// A warm restart after a restore from a copy of the data directory (a disk snapshot):
// the server is as it was, on the same timeline, with the named slot as it was; the
// saved cache holds writes made after the copy, which the restore lost. The warm start
// must not restore them: its handlers never hear a lost state, and the cache ends equal
// to the restored table.
func TestWarmRestartAfterRestoreFromCopy(t *testing.T) {
	t.Skip("not yet detected: a copy restored keeps the system identifier, the timeline and the named slot, and the " +
		"server's position passes the saved revision, so the source resumes the watch there and the cache keeps the lost writes")
	s, name := restoreSetup(t)
	slot := "informer_copied"
	dir := t.TempDir()
	var log errorLog
	start := func() (*informer.Informer[int64, *item], *informertest.Recorder[*item], func()) {
		return warmStart(t, name, dir, func(cfg *postgres.Config[*item]) {
			cfg.ConnString, cfg.Slot = s.URL, slot
		}, true, log.add)
	}
	inf, rec, stop := start()
	rec.WaitFor(t, 20)
	caughtUp(t, connectTo(t, s.URL), inf, name)
	b, err := s.Copy()
	if err != nil {
		t.Fatal(err)
	}
	c := connectTo(t, s.URL)
	writeLost(t, c, name)
	rec.WaitForLine(t, "add 100=lost")
	caughtUp(t, c, inf, name)
	lostAt := inf.Snapshot().Revision()
	stop()

	if err := s.Restore(b); err != nil {
		t.Fatal(err)
	}
	c = connectTo(t, s.URL)
	exec(t, c, "SELECT pg_switch_wal()") // the restored server's position passes the lost writes'
	exec(t, c, "UPDATE "+name+" SET value = 'restored' WHERE id = 2")
	inf, rec, stop = start()
	defer stop()
	caughtUp(t, c, inf, name)
	for _, call := range rec.Calls() {
		if strings.HasSuffix(call, "=lost") {
			t.Fatalf("a handler received %s, a state of the writes after the copy (at %s), which the restore lost", call, lostAt)
		}
	}
}
