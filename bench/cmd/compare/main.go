// Command compare runs the workloads of issue #8 (W1–W5) and W6 (Pods' memory) through our Informer and through
// client-go's SharedIndexInformer, several rounds, the two sides interleaved (the order
// alternates every round), prints a table of medians with the ratio ours/client-go per
// figure (the median of the per-round ratios) and writes a PNG chart of W1 events/s and W2
// heap bytes per object.
//
//	go run ./cmd/compare -rounds 3 -png compare.png
package main

import (
	"flag"
	"fmt"
	"image/color"
	"log"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/informer-go/informer/bench/internal/workload"
)

// row is one figure of the table.
type row struct {
	workload, figure string
	better           string                           // "higher" or "lower"
	label            string                           // the workload column, when not the workload's name
	target           func(ours, ratio float64) string // nil: no target
}

var rows = []row{
	{"W1", "events/s", "higher", "", func(_, r float64) string { return atLeast(r, 5, "≥ 5×") }},
	{"W1", "allocs/event", "lower", "", func(o, _ float64) string { return atMost(o, 1, "≤ 1") }},
	{"W1", "B/event", "lower", "", nil},
	{"W1", "cpu-s", "lower", "", nil},
	{"W1", "cpu-ns/event", "lower", "", func(_, r float64) string { return atMost(r, 0.2, "≤ 0.2×") }},
	{"W1k", "allocs/event", "lower", "W1 struct key", func(o, _ float64) string { return atMost(o, 0.05, "≈ 0") }},
	{"W1k", "cpu-ns/event", "lower", "W1 struct key", nil},
	{"W2", "B/object", "lower", "", func(_, r float64) string { return atMost(r, 0.5, "≤ 0.5×") }},
	{"W2k", "B/object", "lower", "W2 struct key", func(_, r float64) string { return atMost(r, 0.5, "≤ 0.5×") }},
	{"W3", "p50-µs", "lower", "", nil},
	{"W3", "p99-µs", "lower", "", func(_, r float64) string { return atMost(r, 1, "≤ 1×") }},
	{"W3", "events/s", "higher", "", nil},
	{"W4", "reads/s", "higher", "", nil},
	{"W4", "events/s", "higher", "", nil},
	{"W4", "kept %", "higher", "", func(o, _ float64) string { return atLeast(o, 50, "≥ 50 %") }},
	{"W5", "relist-ms", "lower", "", nil},
	{"W5", "peak-MB", "lower", "", nil},
	{"W5", "alloc-MB", "lower", "", nil},
	{"W6", "B/pod", "lower", "", func(_, r float64) string { return atMost(r, 0.6, "≤ 0.6×") }},
	{"W6", "transform-ns/pod", "lower", "", nil},
}

func atLeast(r, t float64, s string) string {
	if r >= t {
		return s + " met"
	}
	return s + " MISSED"
}

func atMost(r, t float64, s string) string {
	if r <= t {
		return s + " met"
	}
	return s + " MISSED"
}

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs every workload once per side")
	png := flag.String("png", "compare.png", "chart output (empty: none)")
	only := flag.String("only", "W1,W1k,W2,W2k,W3,W4,W5,W6", "workloads to run (W1k, W2k: W1 and W2 with our informer keyed by a struct; each runs our side only and is compared with client-go's figures of the plain workload, so it needs that one too)")
	busy := flag.Bool("busy", false, "run a CPU-burning goroutine per core beside both sides, to measure a busy machine")
	flag.Parse()
	log.SetFlags(0)
	log.Printf("load average before the runs: %s", loadAverage())
	if *busy {
		stop := burn(runtime.NumCPU())
		defer stop()
		log.Printf("busy mode: %d CPU-burning goroutines run beside both sides", runtime.NumCPU())
	}
	workload.DisableWatchList()

	sz := workload.Full
	t0 := time.Now()
	w1 := workload.NewStream(sz.W1Objects, sz.W1Events)
	w3 := workload.NewStream(sz.W3Objects, sz.W3Events)
	log.Printf("workloads built in %v", time.Since(t0).Round(time.Millisecond))

	w6Runs := 0
	runs := map[string]func(workload.Side) (workload.Figures, error){
		"W1": func(s workload.Side) (workload.Figures, error) { return workload.W1(s, w1, 0) },
		"W2": func(s workload.Side) (workload.Figures, error) { return workload.W2(s, sz.W2Objects) },
		"W3": func(s workload.Side) (workload.Figures, error) {
			return workload.W3(s, w3, sz.W3Handlers, sz.W3Rate)
		},
		"W4": func(s workload.Side) (workload.Figures, error) { return workload.W1(s, w1, sz.W4Readers) },
		"W1k": func(s workload.Side) (workload.Figures, error) {
			return workload.W1With(s, w1, workload.Variant{StructKey: true})
		},
		"W2k": func(s workload.Side) (workload.Figures, error) {
			return workload.W2With(s, sz.W2Objects, workload.Variant{StructKey: true})
		},
		"W5": func(s workload.Side) (workload.Figures, error) { return workload.W5(s, sz.W5Objects) },
		"W6": func(s workload.Side) (workload.Figures, error) {
			// Built for each run, so that its JSON is not in the heap during the other
			// workloads; the same list for both sides of a round, another each round, so
			// that no round finds the strings and maps the intern package kept from the
			// last already in the heap.
			w6Runs++
			l, err := workload.NewPodList(workload.W6Pods, uint64(6+(w6Runs-1)/2))
			if err != nil {
				return nil, err
			}
			return workload.W6(s, l)
		},
	}
	names := strings.Split(*only, ",")

	// results[workload][side] holds one Figures per round.
	results := map[string]map[workload.Side][]workload.Figures{}
	for round := range *rounds {
		sides := slices.Clone(workload.Sides)
		if round%2 == 1 {
			slices.Reverse(sides)
		}
		for _, name := range names {
			for _, side := range sides {
				if variantOf[name] != "" && side == workload.ClientGo {
					continue // client-go's figures are those of the plain workload
				}
				f, err := runs[name](side)
				if err != nil {
					log.Fatalf("round %d %s %s: %v", round+1, name, side, err)
				}
				if results[name] == nil {
					results[name] = map[workload.Side][]workload.Figures{}
				}
				results[name][side] = append(results[name][side], f)
				log.Printf("round %d %s %-8s %v", round+1, name, side, brief(f))
			}
		}
		// W4's writer against the unloaded W1 of the same round and side.
		for _, w4name := range []string{"W4"} {
			if results[w4name] == nil || results["W1"] == nil {
				continue
			}
			for _, side := range workload.Sides {
				if len(results[w4name][side]) > round {
					w4 := results[w4name][side][round]
					w4["kept %"] = 100 * w4["events/s"] / results["W1"][side][round]["events/s"]
				}
			}
		}
		runtime.GC()
	}

	machine := "load average before " + loadAverage()
	if *busy {
		machine = fmt.Sprintf("busy: %d CPU burners beside both sides; %s", runtime.NumCPU(), machine)
	}
	fmt.Printf("\n%d rounds, interleaved; %s, %d CPUs, %s; %s; medians, ratio = median of per-round ours/client-go\n\n",
		*rounds, cpuModel(), runtime.NumCPU(), runtime.Version(), machine)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tfigure\tours\tclient-go\tours/client-go\tbetter\ttarget\t")
	for _, r := range rows {
		res := results[r.workload]
		if res == nil {
			continue
		}
		if *busy && strings.HasPrefix(r.figure, "cpu-") {
			continue // the burners' CPU is the process's too: not a figure of either side
		}
		if *busy && r.workload == "W1" && r.figure == "events/s" {
			r.target = func(_, r float64) string { return atLeast(r, 3, "≥ 3× busy") }
		}
		cgRes := res[workload.ClientGo]
		if base := variantOf[r.workload]; base != "" {
			if results[base] == nil {
				continue
			}
			cgRes = results[base][workload.ClientGo]
		}
		ours, cg := column(res[workload.Ours], r.figure), column(cgRes, r.figure)
		ratios := make([]float64, len(ours))
		for i := range ours {
			ratios[i] = ours[i] / cg[i]
		}
		ratio := median(ratios)
		t := ""
		if r.target != nil {
			t = r.target(median(ours), ratio)
		}
		label := r.workload
		if r.label != "" {
			label = r.label
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t\n", label, r.figure, num(median(ours)), num(median(cg)), ratio, r.better, t)
	}
	tw.Flush()
	if *busy {
		fmt.Println("\n(busy: no CPU-time rows; the burners run in the process, so its CPU time is theirs too)")
	}

	if *png != "" && results["W1"] != nil && results["W2"] != nil {
		if err := chart(*png, results); err != nil {
			log.Fatal(err)
		}
		log.Printf("chart written to %s", *png)
	}
}

// variantOf names the plain workload of each variant: a variant runs our side only, and its
// rows compare with client-go's figures of the plain workload.
var variantOf = map[string]string{"W1k": "W1", "W2k": "W2"}

func brief(f workload.Figures) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, num(f[k]))
	}
	return b.String()
}

func column(fs []workload.Figures, name string) []float64 {
	out := make([]float64, len(fs))
	for i, f := range fs {
		out[i] = f[name]
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(v float64) string {
	switch {
	case v >= 1e4:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for l := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

var (
	oursColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	cgColor   = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
)

// panel is a two-bar chart: ours and client-go.
func panel(title, ylabel string, ours, cg float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Y.Max = 1.15 * max(ours, cg) // room for the title
	w := vg.Points(40)
	for i, b := range []struct {
		v float64
		c color.Color
	}{{ours, oursColor}, {cg, cgColor}} {
		bar, err := plotter.NewBarChart(plotter.Values{b.v}, w)
		if err != nil {
			return nil, err
		}
		bar.Color = b.c
		bar.LineStyle.Width = 0
		bar.XMin = float64(i)
		p.Add(bar)
	}
	p.NominalX("ours", "client-go")
	return p, nil
}

func chart(path string, results map[string]map[workload.Side][]workload.Figures) error {
	w1o, w1c := median(column(results["W1"][workload.Ours], "events/s")), median(column(results["W1"][workload.ClientGo], "events/s"))
	w2o, w2c := median(column(results["W2"][workload.Ours], "B/object")), median(column(results["W2"][workload.ClientGo], "B/object"))
	p1, err := panel("W1 throughput (higher is better)", "events/s", w1o, w1c)
	if err != nil {
		return err
	}
	p2, err := panel("W2 cache overhead (lower is better)", "heap bytes per object", w2o, w2c)
	if err != nil {
		return err
	}
	img := vgimg.New(vg.Points(640), vg.Points(300))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(20), PadY: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	canvases := plot.Align([][]*plot.Plot{{p1, p2}}, tiles, dc)
	p1.Draw(canvases[0][0])
	p2.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// burn starts n goroutines that keep a core busy each, and returns a function that stops
// them and waits. Both sides of every workload then share the machine with them.
func burn(n int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			x := uint64(1)
			for {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
				select {
				case <-done:
					burnSink.Store(x)
					return
				default:
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

var burnSink atomic.Uint64

// loadAverage returns the 1, 5 and 15 minute load averages, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
