package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/informertest"
	"github.com/informer-go/informer/persist"
	"github.com/informer-go/informer/source/etcd"
)

// replace stops the server and starts a fresh one, with an empty data directory, on the
// same URLs: another cluster at the same endpoints, with token as its cluster token (the
// same token gives the same cluster ID).
func (s *server) replace(token string) {
	s.t.Helper()
	s.Stop()
	s.dir, s.token = s.t.TempDir(), token
	e, err := startEmbedded(s.dir, s.clientURL, s.peerURL, s.progressNotification, s.token)
	if err != nil {
		s.t.Fatalf("starting the new etcd: %v", err)
	}
	s.e = e
}

// putRetrying is put that retries while the client reconnects to a replaced server.
func putRetrying(t *testing.T, c *clientv3.Client, key, value string) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Put(context.Background(), key, value)
		if err == nil {
			return resp.Header.Revision
		}
		if time.Now().After(deadline) {
			t.Fatalf("put %s: %v", key, err)
		}
		time.Sleep(20 * time.Millisecond) // a retry interval, not a synchronisation
	}
}

// cacheState returns the informer's cache as key → value.
func cacheState(inf *informer.Informer[string, *item]) map[string]string {
	m := map[string]string{}
	for k, v := range inf.All() {
		m[k] = v.Value
	}
	return m
}

// waitCache waits until the informer's cache is want and no longer the restored state.
func waitCache(t *testing.T, inf *informer.Informer[string, *item], want map[string]string) {
	t.Helper()
	informertest.Eventually(t, 30*time.Second, func() bool {
		return !inf.Stats().Restored && maps.Equal(cacheState(inf), want)
	}, "the cache did not become the source's state: restored %v, %d objects", inf.Stats().Restored, len(cacheState(inf)))
}

// A watch from a revision the cluster has not reached is refused as expired, as a list at
// such a revision is: it is a revision of another history (a replaced cluster).
func TestWatchRefusesUnreachedRevision(t *testing.T) {
	_, c := startWithClient(t)
	rev := put(t, c, "/fw/a", "1")
	src := newSource(t, c, "/fw/", etcd.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ahead := range []int64{1, 1000} {
		w, err := src.Watch(ctx, informer.WatchOptions{Revision: etcd.FormatRevision(rev + ahead)})
		if err == nil {
			_, err = w.Next()
			w.Stop()
		}
		if !errors.Is(err, informer.ErrExpired) || !strings.Contains(err.Error(), "newer than the cluster's") {
			t.Fatalf("watch from %d, the cluster at %d: got %v, want ErrExpired", rev+ahead, rev, err)
		}
	}
	// The cluster's own revision is fine: the watch waits for the next change.
	w, err := src.Watch(ctx, informer.WatchOptions{Revision: etcd.FormatRevision(rev)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := put(t, c, "/fw/b", "1")
	ev, err := w.Next()
	if err != nil || ev.Revision != etcd.FormatRevision(next) {
		t.Fatalf("watch from the current revision: %v %v, want the put at %d", ev, err, next)
	}
}

// firstEtcdLife runs an informer over prefix of c persisting to dir until it reached rev,
// then stops it.
func firstEtcdLife(t *testing.T, c *clientv3.Client, prefix, dir string, rev int64) {
	t.Helper()
	f := newPersistFile(t, dir)
	errs := newErrorLog()
	inf, _, stop := warmLife(t, newSource(t, c, prefix, etcd.Options{}), f, errs)
	waitRev(t, inf, rev)
	stop()
	if e := errs.all(); len(e) != 0 {
		t.Fatalf("first life reported %v", e)
	}
}

func newPersistFile(t *testing.T, dir string) *persist.File[string, *item] {
	t.Helper()
	f, err := persist.New[string, *item](dir, persist.Options[*item]{Schema: "v1", Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A warm restart against another etcd cluster on the same endpoints ends with the new
// cluster's state, having listed: a new cluster behind the saved revision with the same
// cluster ID (the same URLs, name and token) is refused by the watch; one with another
// cluster ID, behind or ahead, by the snapshot's source identity.
func TestWarmRestartReplacedEtcd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new int    // puts in the old and the new cluster, over 50 keys
		token    string // the new cluster's token
	}{
		{"behind, same cluster ID", 300, 5, ""},
		{"behind", 300, 5, "replaced"},
		{"ahead", 5, 300, "replaced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := startWithClient(t)
			const p = "/rs/"
			var rev int64
			for i := range tc.old {
				rev = put(t, c, fmt.Sprintf("%sk%02d", p, i%50), fmt.Sprintf("a%d", i))
			}
			dir := t.TempDir()
			firstEtcdLife(t, c, p, dir, rev)

			srv.replace(tc.token)
			want := map[string]string{}
			for i := range tc.new {
				key, value := fmt.Sprintf("%sk%02d", p, i%50), fmt.Sprintf("b%d", i)
				putRetrying(t, c, key, value)
				want[key] = value
			}
			errs := newErrorLog()
			inf, _, _ := warmLife(t, newSource(t, c, p, etcd.Options{}), newPersistFile(t, dir), errs)
			waitCache(t, inf, want)
			st := inf.Stats()
			if st.Lists == 0 {
				t.Fatal("no list after a restart against another cluster")
			}
			e := errs.all()
			if tc.token == "" && (st.Expirations == 0 || len(errorsNot(e, informer.ErrExpired)) != 0) ||
				tc.token != "" && (len(e) != 1 || !errors.Is(e[0], persist.ErrIncompatible)) {
				t.Fatalf("%d expirations, reported %v; want an expiry (same cluster ID) or one ErrIncompatible (another)", st.Expirations, e)
			}
		})
	}
}

// errorsNot returns the errors that do not match target.
func errorsNot(errs []error, target error) []error {
	var out []error
	for _, err := range errs {
		if !errors.Is(err, target) {
			out = append(out, err)
		}
	}
	return out
}

// A warm restart with another prefix and the same state directory does not keep the old
// prefix's keys.
func TestWarmRestartNewPrefix(t *testing.T) {
	_, c := startWithClient(t)
	put(t, c, "/p1/a", "1")
	rev := put(t, c, "/p1/b", "1")
	dir := t.TempDir()
	firstEtcdLife(t, c, "/p1/", dir, rev)
	put(t, c, "/p2/x", "2")
	errs := newErrorLog()
	inf, _, _ := warmLife(t, newSource(t, c, "/p2/", etcd.Options{}), newPersistFile(t, dir), errs)
	waitCache(t, inf, map[string]string{"/p2/x": "2"})
	e := errs.all()
	if len(e) != 1 || !errors.Is(e[0], persist.ErrIncompatible) || !strings.Contains(e[0].Error(), "/p1/") || !strings.Contains(e[0].Error(), "/p2/") {
		t.Fatalf("reported %v, want one ErrIncompatible naming both prefixes", e)
	}
}
