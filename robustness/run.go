package robustness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/informer-go/informer"
	httpsource "github.com/informer-go/informer/source/http"
)

// The failures the suite injects.
const (
	FailRestore         = "restore"          // etcdutl snapshot restore with the cluster's own flags, to an older revision
	FailRestoreBump     = "restore-bump"     // the same with --bump-revision --mark-compacted
	FailKillMember      = "kill-member"      // kill -9 of a follower, restarted after a while
	FailKillLeader      = "kill-leader"      // kill -9 of the leader, restarted after a while
	FailCut             = "cut"              // a member's proxy closes every connection and refuses new ones
	FailBlackhole       = "blackhole"        // a member's proxy drops every byte, connections left open
	FailCompact         = "compact"          // compaction at the newest revision the history has
	FailCompactWatched  = "compact-watched"  // the informers cut off, then compaction past their watches' revision
	FailDefrag          = "defrag"           // defragmentation of every member
	FailRestartInformer = "restart-informer" // an informer stopped and started warm from its snapshot file
	FailKillReplica     = "kill-replica"     // a fan-out replica's connections cut and its informer stopped, started again later
	FailKillInformer    = "kill-informer"    // kill -9 of an informer process, started again warm from its snapshot file
	FailKillController  = "kill-controller"  // kill -9 of the leader-only controller's leader process, started again later
	FailSlowDisk        = "slow-disk"        // an informer process on a slow disk, killed -9 while a write of its snapshot stalls mid-file
	FailDiskFull        = "disk-full"        // an informer process on a disk that fills up at a random byte of random saves, then killed -9
)

// AllFailures is every failure kind, for the long runs.
var AllFailures = []string{FailRestore, FailRestoreBump, FailKillMember, FailKillLeader, FailCut, FailBlackhole,
	FailCompact, FailCompactWatched, FailDefrag, FailRestartInformer, FailKillReplica, FailKillInformer, FailKillController,
	FailSlowDisk, FailDiskFull}

// Config is one run.
type Config struct {
	// Seed makes the run's traffic and its failures' kinds and times.
	Seed int64
	// Duration is how long traffic runs.
	Duration time.Duration
	// Failures are the kinds to draw from; Count how many to inject, at random times.
	Failures []string
	// Count is how many failures to inject.
	Count int
	// SingleKey makes every change touch one key (no multi-key transaction, one key per
	// lease): a run that cannot tear a transaction, to tell the other guarantees apart.
	SingleKey bool
	// NoFanout leaves the fan-out replicas, their clients and the controllers out.
	NoFanout bool
	// Keys is the number of keys of the prefix (default 48).
	Keys int
	// Dir holds the members' data and the snapshot files.
	Dir string
	// ReportDir receives the report of a run that found a violation (default Dir).
	ReportDir string
	// Addrs are 8 loopback addresses that stay free while what listens on them restarts:
	// the members' client and peer ports, then the two fan-out replicas'.
	Addrs []string
}

// Result is what a run did and found.
type Result struct {
	// Seed is the run's seed (Config.Seed).
	Seed int64
	// Ops is the number of traffic operations sent.
	Ops int
	// OpErrors is the number of traffic operations that returned an error.
	OpErrors int
	// Failures counts the failures injected, by kind.
	Failures map[string]int
	// MidWrite counts the slow-disk failures whose kill landed while a write of the
	// snapshot file stalled mid-file.
	MidWrite    int
	Files       int            // snapshot file loads validated (at warm starts, after failed saves)
	FailedSaves int            // saves that failed (a full disk, a stop), each followed by a load
	Reads       int            // states validated: reads, saved and restored snapshots
	ReadKinds   map[string]int // the same by kind
	Notes       int            // notifications validated
	// Waits is the number of read-your-writes checks validated.
	Waits int
	// Writes is the number of leader-only writes validated.
	Writes int
	// Violations are the broken guarantees the validators found.
	Violations []Violation
	Report     string // the report's path when there were violations
	Setup      error  // a run that could not be set up or quiesced validates nothing
}

// Run starts a cluster, runs the informers against it with traffic and failures, stops
// everything, validates what was recorded and writes a report if a guarantee broke.
func Run(cfg Config) Result {
	res := Result{Seed: cfg.Seed, Failures: make(map[string]int)}
	if cfg.Keys == 0 {
		cfg.Keys = 48
	}
	r, err := newRun(cfg)
	if err != nil {
		res.Setup = err
		return res
	}
	defer r.close()
	if err := r.drive(&res); err != nil {
		res.Setup = err
	}
	r.validate(&res)
	return res
}

type run struct {
	cfg       Config
	rng       *rand.Rand
	cluster   *Cluster
	direct    *clientv3.Client // the traffic's and the bookkeeping's: members' own ports
	observer  *clientv3.Client // the informers': through the proxies
	rec       *Recording
	hist      *recorder
	traffic   *traffic
	restores  atomic.Int64
	downMu    sync.Mutex
	downAt    []int64 // when each restore had every member down (Unix ns), for the processes' writes
	parts     []*participant
	finals    []FinalState
	replicas  []*participant
	ctrl      *controllers
	child     *childInformer
	lns       []net.Listener // the replicas' first listeners
	described []string       // what each participant went through
	transport *http.Transport
	quiesce   []Violation
	history   *History
	midWrite  int // slow-disk kills that landed mid-write
}

const prefix = "/r/"

func newRun(cfg Config) (*run, error) {
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6661696c75726573)), rec: newRecording(20000)}
	// The replicas' ports are taken at once: they are known to the clients from the start.
	var lns []net.Listener
	for _, addr := range cfg.Addrs[6:8] {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	r.lns = lns
	c, err := startCluster(cfg.Dir, cfg.Addrs[:6], time.Second)
	if err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	r.cluster = c
	if r.direct, err = client(c.direct()); err != nil {
		r.close()
		return nil, err
	}
	if r.observer, err = client(c.Endpoints()); err != nil {
		r.close()
		return nil, err
	}
	r.hist = newRecorder(r.direct, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.hist.StartEpoch(ctx, 0, 0); err != nil {
		r.close()
		return nil, err
	}
	r.traffic = newTraffic(r.direct, cfg.Seed, prefix, cfg.Keys)
	r.traffic.single = cfg.SingleKey
	r.parts = []*participant{newParticipant(InformerSpec{Name: "primary", SlowTransform: 200 * time.Microsecond, PersistDir: filepath.Join(cfg.Dir, "persist")}, r.observer, r.rec, &r.restores)}
	// A fan-out replica pair, and two clients of it: one of every key, one filtered.
	a, b := "http://"+cfg.Addrs[6]+"/", "http://"+cfg.Addrs[7]+"/"
	r.transport = &http.Transport{}
	fan := []InformerSpec{
		{Name: "replica-a", Serve: cfg.Addrs[6]},
		{Name: "replica-b", Serve: cfg.Addrs[7]},
		{Name: "client", Source: r.fanClient(a, b, "")},
		{Name: "client-filtered", Source: r.fanClient(b, a, "0"), Filter: "0"},
	}
	if cfg.NoFanout {
		fan = nil
	}
	for i, spec := range fan {
		p := newParticipant(spec, r.observer, r.rec, &r.restores)
		if i < 2 {
			p.ln = lns[i]
			r.replicas = append(r.replicas, p)
		}
		r.parts = append(r.parts, p)
	}
	for _, p := range r.parts {
		if err := p.start(prefix); err != nil {
			r.close()
			return nil, err
		}
	}
	// An informer in a process of its own, for kill -9.
	r.child = newChildInformer("process", c.Endpoints(), filepath.Join(cfg.Dir, "process"), r.rec, &r.restores)
	if err := r.child.start(); err != nil {
		r.close()
		return nil, err
	}
	// Two controller processes whose leader reconciles from a cache of the fan-out tier.
	if cfg.NoFanout {
		return r, nil
	}
	if r.ctrl, err = startControllers(2, cfg.Dir, c.Endpoints(), []string{a, b}, r.rec, r.epochOf); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// fanClient returns the source of a fan-out client: home first, failover next.
func (r *run) fanClient(home, failover, filter string) func() (informer.ListerWatcher[*Item], error) {
	return func() (informer.ListerWatcher[*Item], error) {
		opts := httpsource.ClientOptions[*Item]{HTTPClient: &http.Client{Transport: r.transport}, StreamingList: true, FailoverURLs: []string{failover}}
		if filter != "" {
			opts.Filter = httpsource.Filter{Index: indexName, Value: filter}
		}
		c, err := httpsource.NewClient(home, opts)
		if err != nil {
			return nil, err
		}
		return c.Ordered(), nil
	}
}

// drive runs the traffic and the failures, then quiesces: heals everything, writes a
// last key, and waits until the history and every participant have it.
func (r *run) drive(res *Result) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.traffic.run(ctx)
	}()
	var failErr error
	go func() {
		defer wg.Done()
		failErr = r.inject(ctx, res)
	}()
	heap := time.NewTicker(time.Second)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-heap.C:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			r.rec.Heap = append(r.rec.Heap, ms.HeapAlloc)
		}
	}
	heap.Stop()
	wg.Wait()
	res.Ops, res.OpErrors, res.MidWrite = r.traffic.Ops(), r.traffic.errors, r.midWrite
	if failErr != nil {
		return failErr
	}
	return r.settle()
}

// settle heals every failure and waits until everyone has etcd's last revision.
func (r *run) settle() error {
	for _, m := range r.cluster.members {
		m.proxy.Resume()
	}
	if err := r.cluster.waitServing(90 * time.Second); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.traffic.revoke(ctx); err != nil {
		return err
	}
	resp, err := r.direct.Put(ctx, prefix+"zz-last", fmt.Sprintf("v%d.0", r.traffic.op+1))
	if err != nil {
		return fmt.Errorf("the last write: %w", err)
	}
	last := resp.Header.Revision
	if err := r.hist.WaitFor(ctx, last); err != nil {
		return err
	}
	handlers := time.Now().Add(20 * time.Second) // for every handler to converge
	for _, p := range r.parts {
		if err := p.waitFor(last, time.Minute); err != nil {
			r.quiesce = append(r.quiesce, Violation{Validator: Converged, Message: err.Error()})
			continue
		}
		p.waitHandlers(last, r.hist, handlers)
	}
	rd, err := r.child.waitFor(last, time.Minute)
	if err != nil {
		r.quiesce = append(r.quiesce, Violation{Validator: Converged, Message: err.Error()})
	} else {
		r.finals = append(r.finals, FinalState{Who: rd.Who, State: rd.State})
	}
	return nil
}

// inject injects cfg.Count failures at random times in the run's first 80%.
func (r *run) inject(ctx context.Context, res *Result) error {
	if r.cfg.Count == 0 || len(r.cfg.Failures) == 0 {
		return nil
	}
	start := time.Now()
	var at []time.Duration
	for range r.cfg.Count {
		at = append(at, time.Duration(float64(r.cfg.Duration)*(0.1+0.7*r.rng.Float64())))
	}
	slices.Sort(at)
	for _, d := range at {
		kind := r.cfg.Failures[r.rng.IntN(len(r.cfg.Failures))]
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(start.Add(d))):
		}
		if err := r.fail(ctx, kind); err != nil {
			return fmt.Errorf("injecting %s: %w", kind, err)
		}
		res.Failures[kind]++
	}
	return nil
}

// fail injects one failure and heals it.
func (r *run) fail(ctx context.Context, kind string) error {
	hold := func(d time.Duration) { // how long a failure lasts
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	lasting := time.Duration(500+r.rng.IntN(2500)) * time.Millisecond
	switch kind {
	case FailRestore, FailRestoreBump:
		return r.restore(ctx, kind == FailRestoreBump, lasting)
	case FailKillMember, FailKillLeader:
		i := r.rng.IntN(len(r.cluster.members))
		if kind == FailKillLeader {
			if i = r.cluster.leader(context.Background()); i < 0 {
				return errors.New("no leader")
			}
		} else if l := r.cluster.leader(context.Background()); l == i {
			i = (i + 1) % len(r.cluster.members)
		}
		return r.cluster.KillMember(i, lasting)
	case FailCut, FailBlackhole:
		p := r.cluster.members[r.rng.IntN(len(r.cluster.members))].proxy
		if kind == FailCut {
			p.Cut()
		} else {
			p.Blackhole()
		}
		hold(lasting)
		p.Resume()
	case FailCompact:
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := r.direct.Compact(cctx, r.hist.Seen(), clientv3.WithCompactPhysical())
		return ignoreCompacted(err)
	case FailCompactWatched:
		for _, m := range r.cluster.members {
			m.proxy.Cut()
		}
		hold(lasting)
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := r.direct.Compact(cctx, r.hist.Seen(), clientv3.WithCompactPhysical())
		for _, m := range r.cluster.members {
			m.proxy.Resume()
		}
		return ignoreCompacted(err)
	case FailDefrag:
		for _, ep := range r.cluster.direct() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := r.direct.Defragment(cctx, ep)
			cancel()
			if err != nil {
				return err
			}
		}
	case FailKillController:
		if r.ctrl == nil {
			return nil // no controllers without the fan-out tier
		}
		return r.ctrl.killLeader(func() { hold(lasting) }, takeoverLimit)
	case FailKillInformer:
		r.child.kill()
		hold(lasting)
		return r.child.start()
	case FailSlowDisk, FailDiskFull:
		// 2 s more than other failures: several saves meet the faulty disk.
		mid, err := r.child.onFaultyDisk(ctx, kind, r.rng.Uint64(), func() { hold(lasting + 2*time.Second) })
		if mid {
			r.midWrite++
		}
		return err
	case FailRestartInformer, FailKillReplica:
		p := r.parts[0] // the informer with a snapshot file
		if kind == FailKillReplica && len(r.replicas) > 0 {
			p = r.replicas[r.rng.IntN(len(r.replicas))]
		}
		p.stop()
		hold(lasting)
		return p.start(prefix)
	default:
		return fmt.Errorf("unknown failure kind %q", kind)
	}
	return nil
}

// takeoverLimit is how soon another controller replica must write after its leader is
// killed: the election's TTL and a campaign, with room for a loaded machine.
const takeoverLimit = 30 * time.Second

func ignoreCompacted(err error) error {
	if err != nil && strings.Contains(err.Error(), "compacted") {
		return nil
	}
	return err
}

// restore backs the cluster up, lets the traffic run for lag, and restores every member
// from the backup: the cluster goes back to the backup's revision, with its own ID.
func (r *run) restore(ctx context.Context, bump bool, lag time.Duration) error {
	bctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path, err := r.cluster.Backup(bctx)
	if err != nil {
		return err
	}
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return err
	}
	// Keys that only the lost writes create: no write after the restore touches them, so a
	// cache that keeps them keeps them for good.
	var lost []clientv3.Op
	for i := range 16 {
		lost = append(lost, clientv3.OpPut(fmt.Sprintf("%slost%d-%02d", prefix, r.restores.Load(), i), fmt.Sprintf("lost%d.%d", r.restores.Load(), i)))
	}
	if r.cfg.SingleKey {
		for _, op := range lost {
			if _, err := r.direct.Do(bctx, op); err != nil {
				return err
			}
		}
	} else if _, err := r.direct.Txn(bctx).Then(lost...).Commit(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(lag): // the writes the restore will lose
	}
	r.traffic.pause.Lock()
	defer r.traffic.pause.Unlock()
	// A lease that expired after the recording stopped and before the members went down
	// would change the old history unrecorded (a delete every cache saw, at a revision
	// past the epoch's end). Its keys go now, recorded.
	if err := r.traffic.revokeThrough(bctx, r.direct); err != nil {
		return err
	}
	resp, err := r.direct.Get(bctx, "health")
	if err != nil {
		return err
	}
	if err := r.hist.WaitFor(bctx, resp.Header.Revision); err != nil {
		return err
	}
	r.hist.StopEpoch()
	r.restores.Add(1)
	var amount uint64
	if bump {
		amount = 1000000
	}
	if err := r.cluster.Restore(path, amount, r.membersDown); err != nil {
		return err
	}
	return r.hist.StartEpoch(bctx, st.Revision, st.Revision+int64(amount))
}

// membersDown records that a restore has every member down now: no write is accepted
// from then until the restored members serve.
func (r *run) membersDown() {
	r.downMu.Lock()
	defer r.downMu.Unlock()
	r.downAt = append(r.downAt, time.Now().UnixNano())
}

// epochOf places a write a process sent and had accepted at wall-clock times (Unix ns)
// among the restores: it returns the restores that had every member down before it was
// sent, and false if one did between (which history took the write is unknown). A write
// accepted before is the old history's, one sent after the new one's.
func (r *run) epochOf(sent, accepted int64) (int, bool) {
	r.downMu.Lock()
	defer r.downMu.Unlock()
	before, by := 0, 0
	for _, t := range r.downAt {
		if t < sent {
			before++
		}
		if t < accepted {
			by++
		}
	}
	return before, before == by
}

// validate stops the participants and runs every validator on what was recorded.
func (r *run) validate(res *Result) {
	for _, p := range r.parts {
		if p.cancel != nil {
			r.finals = append(r.finals, FinalState{Who: p.spec.Name, Filter: p.spec.Filter, State: stateOf(p.inf.Snapshot())})
			for _, h := range p.handlers {
				r.finals = append(r.finals, FinalState{Who: h.Name, State: h.State()})
			}
		}
	}
	if r.ctrl != nil {
		for _, p := range r.ctrl.procs {
			r.described = append(r.described, p.describe())
		}
		r.ctrl.stop()
		r.ctrl = nil
	}
	for _, p := range r.parts {
		if p.inf != nil {
			r.described = append(r.described, p.describe())
		}
	}
	if r.child != nil {
		r.described = append(r.described, r.child.describe())
		r.child.close()
		r.child = nil
	}
	var handlers []HandlerRun
	for _, p := range r.parts {
		p.stop()
		handlers = append(handlers, p.handlerRuns()...)
	}
	r.hist.StopEpoch()
	h, err := r.hist.History()
	if err != nil && res.Setup == nil {
		res.Setup = err
	}
	r.history = h
	if res.Setup != nil {
		return
	}
	rec := r.rec
	res.Reads, res.Waits, res.Writes = len(rec.Reads), len(rec.Waits), len(rec.Writes)
	res.ReadKinds = map[string]int{}
	for _, rd := range rec.Reads {
		res.ReadKinds[rd.Kind]++
	}
	for _, hr := range handlers {
		res.Notes += len(hr.Notes)
	}
	for _, ev := range rec.Files {
		switch ev.Kind {
		case "loaded":
			res.Files++
		case "failed":
			res.FailedSaves++
		}
	}
	v := r.quiesce
	v = append(v, CheckOneHistory(h, rec.Reads)...)
	v = append(v, CheckHandlers(h, handlers)...)
	v = append(v, CheckConverged(h, r.finals)...)
	v = append(v, CheckReadYourWrites(rec.Waits)...)
	v = append(v, CheckWarmRestarts(h, rec.Reads)...)
	v = append(v, CheckSnapshotFiles(rec.Files)...)
	v = append(v, CheckFencedOrder(rec.Writes)...)
	v = append(v, CheckTakeover(rec.Kills, rec.Writes, takeoverLimit)...)
	v = append(v, CheckErrorsNamed(rec.Errors)...)
	v = append(v, CheckHeap(rec.Heap, 1<<30)...)
	res.Violations = v
	if len(v) > 0 {
		res.Report = r.writeReport(res)
	}
}

// writeReport writes the seed, the run's configuration and each violation with its
// slice of history to Dir/report.txt and returns its path.
func (r *run) writeReport(res *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "robustness run failed: seed %d, %v of traffic, failures %v (%d injected: %v), %d keys\n",
		r.cfg.Seed, r.cfg.Duration, r.cfg.Failures, r.cfg.Count, res.Failures, r.cfg.Keys)
	fmt.Fprintf(&b, "repeat: go test -run 'TestRobustness' ./robustness -args -robustness -robustness.seed=%d -robustness.duration=%v -robustness.failures=%s -robustness.count=%d -robustness.singlekey=%v -robustness.nofanout=%v\n",
		r.cfg.Seed, r.cfg.Duration, strings.Join(r.cfg.Failures, ","), r.cfg.Count, r.cfg.SingleKey, r.cfg.NoFanout)
	fmt.Fprintf(&b, "%d operations, %d states and %d notifications validated; %d violation(s)\n\n", res.Ops, res.Reads, res.Notes, len(res.Violations))
	counts := map[string]int{}
	for _, v := range res.Violations {
		counts[v.Validator]++
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(&b, "%s: %d violation(s)\n", name, counts[name])
	}
	kinds := map[string]int{} // the states of the one-history violations, by what was read
	for _, v := range res.Violations {
		if v.Validator == OneHistory {
			kinds[strings.SplitN(v.Message, " ", 2)[0]]++
		}
	}
	if len(kinds) > 0 {
		fmt.Fprintf(&b, "one-history violations by what was read: %v\n", kinds)
	}
	b.WriteString("\nparticipants:\n")
	for _, d := range r.described {
		b.WriteString("  " + d + "\n")
	}
	b.WriteString("\n")
	shown := map[string]int{}
	for _, v := range res.Violations {
		group := v.Validator // the first three of each validator, and of each kind of read and epoch
		if v.Validator == OneHistory {
			group += " " + strings.SplitN(v.Message, " ", 2)[0] + " " + afterRestores.FindString(v.Message)
		}
		if shown[group]++; shown[group] > 3 && v.Validator != Converged { // one per participant: all of them
			continue
		}
		b.WriteString(v.String())
		b.WriteString("\n\n")
	}
	dir := r.cfg.ReportDir
	if dir == "" {
		dir = r.cfg.Dir
	}
	path := filepath.Join(dir, fmt.Sprintf("report-seed-%d-%s.txt", r.cfg.Seed, time.Now().UTC().Format("150405")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ""
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return ""
	}
	return path
}

var afterRestores = regexp.MustCompile(`after \d+ restore`)

func (r *run) close() {
	if r.ctrl != nil {
		r.ctrl.stop()
	}
	if r.child != nil {
		r.child.close()
	}
	for _, p := range r.parts {
		p.stop()
	}
	if r.hist != nil {
		r.hist.StopEpoch()
	}
	if r.observer != nil {
		r.observer.Close()
	}
	if r.transport != nil {
		r.transport.CloseIdleConnections()
	}
	if r.direct != nil {
		r.direct.Close()
	}
	if r.cluster != nil {
		r.cluster.Close()
	}
	for _, ln := range r.lns {
		ln.Close() // closed already unless a replica never started
	}
}
