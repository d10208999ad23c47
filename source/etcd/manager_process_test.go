package etcd_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/manager"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	body := waitReady(t, follower.p, 503)
	notReady := time.Since(cut)
	// The guarantee is that it is not ready from its last progress plus the bound, so the
	// probe counts from before the cut; when the test sees it is a figure of the load.
	since, err := progressSince(body, cut)
	if err != nil {
		t.Fatalf("the cut-off follower's /readyz: %v:\n%s", err, body)
	}
	if since.After(cut) {
		t.Errorf("the cut-off follower counts no progress since %v after the cut; want from before it:\n%s", since.Sub(cut), body)
	}
	followerStop := stop(follower)
	if followerStop > 2*time.Second {
		t.Errorf("SIGTERM of the cut-off follower took %v; want within 2s", followerStop)
	}
	leaderStop := stop(leader)
	slow := start("p2", "--ttl", "15s", "--prefix", "/proc15/")
	ps.leader()
	slowStop := stop(slow)
	t.Logf("cut-off follower: not ready (no progress since %v before the cut) seen %v after the cut (bound %v), SIGTERM to exit %v; leader at TTL 2s: SIGTERM to exit %v; at TTL 15s: %v; each kept its snapshot",
		cut.Sub(since).Round(time.Millisecond), notReady.Round(time.Millisecond), manager.DefaultSourceProgressBound, followerStop.Round(time.Millisecond),
		leaderStop.Round(time.Millisecond), slowStop.Round(time.Millisecond))
}

// progressSince reads "no progress from its source for …, since <time>" from a /readyz
// body, a time of day on the day of near.
func progressSince(body string, near time.Time) (time.Time, error) {
	_, rest, ok := strings.Cut(body, "no progress from its source for ")
	if !ok {
		return time.Time{}, fmt.Errorf("no line says the source shows no progress")
	}
	_, rest, _ = strings.Cut(rest, ", since ")
	tod, err := time.Parse("15:04:05.000Z07:00", strings.Fields(rest + " ")[0])
	if err != nil {
		return time.Time{}, err
	}
	y, m, d := near.UTC().Date()
	return time.Date(y, m, d, tod.Hour(), tod.Minute(), tod.Second(), tod.Nanosecond(), time.UTC), nil
}

// waitReady polls p's /readyz?verbose until it answers code, for at most a minute, and
// returns the body.
func waitReady(t *testing.T, p *proc, code int) string {
	t.Helper()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get("http://" + p.health + "/readyz?verbose")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == code {
				return string(body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's /readyz did not answer %d within a minute (%v)", p.name, code, err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// rounds is the number of rounds of the process tests of leader election:
// TestStuckLeaderProcesses (default 2) and TestElectionProcesses (default 20, or
// ELECTION_ROUNDS).
var rounds = flag.Int("rounds", 0, "rounds of the process tests of leader election (0: each test's default)")

// Three replicas of examples/leaderelection, OS processes, against a 3-member etcd
// cluster, each with its elector behind a proxy of its own and a leader-only writer that
// ignores its context and writes without fencing (--stuck-writer). Each round the
// leader's elector is cut off (the proxy refuses, or holds every byte as a partition
// does) while its writer goes on writing to etcd: the manager's hard stop must end that
// work (the default OnLeaderStuck exits the process) before the lease may expire, so in
// etcd's order the stuck work's last accepted write comes before the next term's first.
// Timing is the second line: this is the check that it holds when the process runs.
func TestStuckLeaderProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs OS processes")
	}
	n := 2
	if *rounds > 0 {
		n = *rounds
	}
	letClusterLeftoversGo(t)
	bin := buildExample(t)
	c := startCluster(t, 3)
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL.Host)
	}
	data := newClient(t, eps[0])
	ps := newProcs(t, bin, strings.Join(eps, ","))
	proxies := map[string]*proxy{}
	health := map[string]string{}
	start := func(name string) *proc {
		return ps.startWith(name, health[name], ps.endpoints,
			"--election-endpoints", proxies[name].Addr(), "--stuck-writer", "--careless-heartbeat=false")
	}
	for i := range 3 {
		name := fmt.Sprint("p", i)
		proxies[name], health[name] = startProxy(t, eps[i]), testkit.StableAddr(t)
		start(name)
	}

	type round struct {
		term      int64
		how       string
		exitAfter time.Duration // from the cut to the hard stop's exit
		gap       time.Duration // from the stuck work's last accepted write to the next term's first
	}
	var done []round
	for i := range n {
		old, term := ps.leader()
		ps.waitFor(fmt.Sprintf("a write of %s's stuck writer in term %d", old.name, term), func(as []attempt) (attempt, bool) {
			for _, a := range as {
				if a.proc == old.name && a.term == term && strings.HasPrefix(a.seq, "stuck-") {
					return a, true
				}
			}
			return attempt{}, false
		})
		r := round{term: term, how: "cut"}
		cut := time.Now()
		if i%2 == 0 {
			proxies[old.name].Cut()
		} else {
			r.how = "blackholed"
			proxies[old.name].Blackhole()
		}
		recvOne(t, old.exited, old.name+" to exit at its hard stop")
		r.exitAfter = time.Since(cut)
		delete(ps.running, old.name)
		if log, _ := os.ReadFile(old.stderr); !strings.Contains(string(log), "did not stop before the lease could expire: exiting") {
			t.Fatalf("round %d: %s exited (%v) without its hard stop; its log:\n%s", i, old.name, old.err, log)
		}
		ps.waitAccepted(term)
		var lastStuck, nextFirst time.Time
		for _, a := range ps.all() {
			switch {
			case a.result != "accepted":
			case a.term == term && a.proc == old.name && strings.HasPrefix(a.seq, "stuck-") && a.at.After(lastStuck):
				lastStuck = a.at
			case a.term > term && (nextFirst.IsZero() || a.at.Before(nextFirst)):
				nextFirst = a.at
			}
		}
		r.gap = nextFirst.Sub(lastStuck)
		done = append(done, r)
		proxies[old.name].Resume()
		start(old.name)
	}

	// By etcd's revisions: every stuck write of a term committed before the first write of
	// any later term.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lastStuckRev := map[int64]int64{}
	firstRev := map[int64]int64{} // the first accepted write of each term, stuck or fenced
	for _, dir := range []string{"stuck/", "log/"} {
		resp, err := data.Get(ctx, "/proc/"+dir, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			term, _ := strconv.ParseInt(string(kv.Value), 10, 64)
			if dir == "stuck/" {
				lastStuckRev[term] = max(lastStuckRev[term], kv.ModRevision)
			}
			if f, ok := firstRev[term]; !ok || kv.ModRevision < f {
				firstRev[term] = kv.ModRevision
			}
		}
	}
	overlaps := 0
	var gaps, exits []time.Duration
	for i, r := range done {
		nextFirst := int64(math.MaxInt64)
		for term, rev := range firstRev {
			if term > r.term {
				nextFirst = min(nextFirst, rev)
			}
		}
		if lastStuckRev[r.term] == 0 || nextFirst == math.MaxInt64 {
			t.Fatalf("round %d: term %d: no stuck write (%d) or no later term's write in etcd", i, r.term, lastStuckRev[r.term])
		}
		if lastStuckRev[r.term] > nextFirst {
			overlaps++
			t.Errorf("round %d (%s): the stuck work of term %d wrote at revision %d, after the next term's first write at %d",
				i, r.how, r.term, lastStuckRev[r.term], nextFirst)
		}
		gaps, exits = append(gaps, r.gap), append(exits, r.exitAfter)
	}
	t.Logf("%d rounds at TTL %v (renew deadline %v): stuck work past the next term's first write in etcd: %d; "+
		"from the stuck work's last accepted write to the next term's first: %s; from the cut to the hard stop's exit: %s",
		len(done), processTTL, processTTL*2/3, overlaps, spread(gaps), spread(exits))
}

// spread renders the minimum, median and maximum of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("min %v, p50 %v, max %v", s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
