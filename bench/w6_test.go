package bench

import (
	"testing"

	"github.com/informer-go/informer/bench/internal/workload"
)

// BenchmarkW6: live heap per Pod after GC, 50,000 realistic Pods decoded from one JSON
// PodList for each side; client-go strips managedFields, ours strips and interns
// (kubernetes.StripAndIntern), ours-strip only strips, ours-generic strips and interns
// every string with intern.Strings:
//
//	go test -run '^$' -bench W6 -benchtime 1x -count 3 . | tee w6.txt
//
// The k-th run of every side lists the same pods, built from seed 6+k: the intern
// package's tables outlive a run, and a run listing the pods of the run before would find
// the strings and maps that run paid for already in its baseline.
func BenchmarkW6(b *testing.B) {
	runs := map[workload.Side]uint64{}
	for _, side := range workload.W6Sides {
		b.Run("side="+string(side), func(b *testing.B) {
			runs[side]++
			l, err := workload.NewPodList(workload.W6Pods, 6+runs[side])
			if err != nil {
				b.Fatal(err)
			}
			sum := workload.Figures{}
			for range b.N {
				f, err := workload.W6(side, l)
				report(b, f, err, sum)
			}
			for k, v := range sum {
				b.ReportMetric(v/float64(b.N), k)
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// TestW6Small runs W6 once per side on 300 pods: every side lists every pod and interning
// does not cost memory (quick under -race).
func TestW6Small(t *testing.T) {
	l, err := workload.NewPodList(300, 6)
	if err != nil {
		t.Fatal(err)
	}
	if l.Pods != 300 || l.Deployments < 2 {
		t.Fatalf("pod list: %d pods from %d deployments", l.Pods, l.Deployments)
	}
	for _, side := range workload.W6Sides {
		f, err := workload.W6(side, l)
		if err != nil {
			t.Fatalf("%s: %v", side, err)
		}
		if f["B/pod"] <= 0 {
			t.Errorf("%s: B/pod = %v", side, f["B/pod"])
		}
		t.Logf("%s: %v", side, f)
	}
}
