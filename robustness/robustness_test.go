package robustness

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
)

var (
	flagSeed     = flag.Int64("robustness.seed", 0, "TestRobustness: the first run's seed (0: from the clock); each next run adds one")
	flagDuration = flag.Duration("robustness.duration", 20*time.Second, "TestRobustness: traffic per run")
	flagTotal    = flag.Duration("robustness.total", 0, "TestRobustness: run again with the next seed until this much time has passed (0: one run)")
	flagFailures = flag.String("robustness.failures", strings.Join(AllFailures, ","), "TestRobustness: the failure kinds to draw from")
	flagCount    = flag.Int("robustness.count", 3, "TestRobustness: failures injected per run")
	flagReports  = flag.String("robustness.reports", filepath.Join(os.TempDir(), "informer-robustness"), "where the reports of failing runs are written")
	flagSingle   = flag.Bool("robustness.singlekey", false, "TestRobustness: every change touches one key (no multi-key transaction)")
	flagNoFanout = flag.Bool("robustness.nofanout", false, "TestRobustness: no fan-out tier and no controllers")
	flagLong     = flag.Bool("robustness", false, "run TestRobustness (make robustness)")
)

// runOne runs one configuration in t's temporary directory.
func runOne(t *testing.T, cfg Config) Result {
	t.Helper()
	cfg.Dir = t.TempDir()
	cfg.ReportDir = *flagReports
	for range 8 {
		cfg.Addrs = append(cfg.Addrs, testkit.StableAddr(t))
	}
	return Run(cfg)
}

// TestRobustness is `make robustness`: runs with random seeds and failures for
// -robustness.total, then the table.
func TestRobustness(t *testing.T) {
	if !*flagLong {
		t.Skip("the long run: make robustness (or -robustness)")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000
	}
	tab := newTable()
	start := time.Now()
	for i := 0; i == 0 || time.Since(start) < *flagTotal; i++ {
		cfg := Config{Seed: seed + int64(i), Duration: *flagDuration, Failures: strings.Split(*flagFailures, ","), Count: *flagCount, SingleKey: *flagSingle, NoFanout: *flagNoFanout}
		var res Result
		t.Run(fmt.Sprint("seed=", cfg.Seed), func(t *testing.T) {
			res = runOne(t, cfg)
			report(t, res)
		})
		tab.add(res)
		tab.heaps = append(tab.heaps, liveHeap())
	}
	// The heap's trend across the runs: a leak of a little per run shows long before a cap.
	trend := CheckHeapTrend(tab.heaps, 16<<20)
	tab.violations[HeapTrend] += len(trend)
	for _, v := range trend {
		t.Error(v.String())
	}
	fmt.Println(tab.String())
}

// liveHeap is the process's heap after a garbage collection, in bytes.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// report fails t with a run's setup error or violations, naming the report.
func report(t *testing.T, res Result) {
	t.Helper()
	if res.Setup != nil {
		t.Errorf("seed %d: the run could not be completed: %v", res.Seed, res.Setup)
	}
	if len(res.Violations) == 0 {
		return
	}
	counts := map[string]int{}
	for _, v := range res.Violations {
		counts[v.Validator]++
	}
	var first []string
	seen := map[string]bool{}
	for _, v := range res.Violations {
		if !seen[v.Validator] {
			seen[v.Validator] = true
			first = append(first, v.String())
		}
	}
	t.Errorf("seed %d: %v; report %s\n%s", res.Seed, counts, res.Report, strings.Join(first, "\n"))
}

// table sums runs.
type table struct {
	runs, ops, opErrors, reads, notes, waits, writes, setup int
	files, failedSaves, midWrite                            int
	heaps                                                   []uint64 // the live heap after each run
	failures                                                map[string]int
	kinds                                                   map[string]int
	violations                                              map[string]int
	failed                                                  []int64
}

func newTable() *table {
	return &table{failures: map[string]int{}, violations: map[string]int{}, kinds: map[string]int{}}
}

func (tb *table) add(r Result) {
	tb.runs++
	tb.ops += r.Ops
	tb.opErrors += r.OpErrors
	tb.reads += r.Reads
	tb.notes += r.Notes
	tb.waits += r.Waits
	tb.writes += r.Writes
	tb.files += r.Files
	tb.failedSaves += r.FailedSaves
	tb.midWrite += r.MidWrite
	for k, n := range r.ReadKinds {
		tb.kinds[k] += n
	}
	for k, n := range r.Failures {
		tb.failures[k] += n
	}
	for _, v := range r.Violations {
		tb.violations[v.Validator]++
	}
	if r.Setup != nil {
		tb.setup++
	}
	if r.Setup != nil || len(r.Violations) > 0 {
		tb.failed = append(tb.failed, r.Seed)
	}
}

func (tb *table) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %d\n", "runs", tb.runs)
	fmt.Fprintf(&b, "%-28s %d (%d failed at the client)\n", "operations", tb.ops, tb.opErrors)
	for _, k := range AllFailures {
		if k == FailSlowDisk {
			fmt.Fprintf(&b, "%-28s %d (%d killed mid-write)\n", "failures: "+k, tb.failures[k], tb.midWrite)
			continue
		}
		fmt.Fprintf(&b, "%-28s %d\n", "failures: "+k, tb.failures[k])
	}
	fmt.Fprintf(&b, "%-28s %d (Snapshot() %d, saved %d, restored %d)\n", "states validated", tb.reads, tb.kinds["snapshot"], tb.kinds["saved"], tb.kinds["restored"])
	fmt.Fprintf(&b, "%-28s %d\n", "notifications validated", tb.notes)
	fmt.Fprintf(&b, "%-28s %d (%d after a failed save)\n", "snapshot files checked", tb.files, tb.failedSaves)
	fmt.Fprintf(&b, "%-28s %d\n", "read-your-writes checks", tb.waits)
	fmt.Fprintf(&b, "%-28s %d\n", "leader-only writes", tb.writes)
	for _, name := range Validators {
		fmt.Fprintf(&b, "%-28s %d\n", "violations: "+name, tb.violations[name])
	}
	if n := len(tb.heaps); n > 0 {
		fmt.Fprintf(&b, "%-28s %d MiB after the first run, %d MiB after the last\n", "live heap after GC", tb.heaps[0]>>20, tb.heaps[n-1]>>20)
	}
	fmt.Fprintf(&b, "%-28s %d\n", "runs not completed", tb.setup)
	if len(tb.failed) > 0 {
		fmt.Fprintf(&b, "%-28s %v\n", "failing seeds", tb.failed)
	}
	return b.String()
}
