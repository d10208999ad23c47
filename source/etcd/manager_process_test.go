package etcd_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/manager"
)

// Replicas of examples/leaderelection, OS processes, each reaching etcd through a proxy of
// its own. A follower cut off from etcd (a partition: nothing passes, nothing fails)
// turns not ready within the default progress bound and, on SIGTERM, exits within 2 s
// with its snapshot saved. A leader stopped with SIGTERM, at TTL 2 s and at 15 s, stops
// without OnLeaderStuck and keeps its snapshot.
func TestManagerProcessesStop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs OS processes")
	}
	bin := buildExample(t)
	srv := startServer(t, serverOptions{})
	ps := newProcs(t, bin, srv.Endpoint())
	type replica struct {
		p     *proc
		proxy *proxy
		dir   string
	}
	start := func(name string, more ...string) replica {
		r := replica{proxy: startProxy(t, srv.Endpoint()), dir: t.TempDir()}
		r.p = ps.startWith(name, testkit.StableAddr(t), r.proxy.Addr(), append([]string{"--snapshot-dir", r.dir, "--careless-heartbeat=false"}, more...)...)
		return r
	}
	stop := func(r replica) time.Duration {
		t.Helper()
		t0 := time.Now()
		ps.kill(r.p, syscall.SIGTERM)
		took := time.Since(t0)
		log, _ := os.ReadFile(r.p.stderr)
		if r.p.err != nil || strings.Contains(string(log), "exiting") {
			t.Errorf("%s exited with %v after SIGTERM; its log:\n%s", r.p.name, r.p.err, log)
		}
		files, _ := os.ReadDir(r.dir)
		saved := 0
		for _, f := range files {
			if info, err := f.Info(); err == nil && info.Size() > 0 && filepath.Ext(f.Name()) != ".tmp" {
				saved++
			}
		}
		if saved == 0 {
			t.Errorf("%s left no snapshot in %s (%d files)", r.p.name, r.dir, len(files))
		}
		return took
	}

	leader := start("p0")
	ps.leader()
	follower := start("p1")
	waitReady(t, follower.p, 200)
	follower.proxy.Pause()
	cut := time.Now()
	waitReady(t, follower.p, 503)
	notReady := time.Since(cut)
	if notReady > manager.DefaultSourceProgressBound+5*time.Second {
		t.Errorf("the cut-off follower turned not ready %v after the cut; want within the bound %v", notReady, manager.DefaultSourceProgressBound)
	}
	followerStop := stop(follower)
	if followerStop > 2*time.Second {
		t.Errorf("SIGTERM of the cut-off follower took %v; want within 2s", followerStop)
	}
	leaderStop := stop(leader)
	slow := start("p2", "--ttl", "15s", "--prefix", "/proc15/")
	ps.leader()
	slowStop := stop(slow)
	t.Logf("cut-off follower: not ready after %v (bound %v), SIGTERM to exit %v; leader at TTL 2s: SIGTERM to exit %v; at TTL 15s: %v; each kept its snapshot",
		notReady.Round(time.Millisecond), manager.DefaultSourceProgressBound, followerStop.Round(time.Millisecond),
		leaderStop.Round(time.Millisecond), slowStop.Round(time.Millisecond))
}

// waitReady polls p's /readyz until it answers code, for at most a minute.
func waitReady(t *testing.T, p *proc, code int) {
	t.Helper()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get("http://" + p.health + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == code {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's /readyz did not answer %d within a minute (%v)", p.name, code, err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}
