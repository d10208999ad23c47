package memory_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

// BenchmarkPutNext measures one change going through the Source: a Put and the Next that
// delivers it, over 1,000 keys (mostly Modified events). "sequential" alternates them in
// one goroutine; "concurrent" has a writer and a watching reader, so Next often blocks and
// is woken.
func BenchmarkPutNext(b *testing.B) {
	objs := make([]*obj, 1000)
	for i := range objs {
		objs[i] = &obj{Key: "key-" + strconv.Itoa(i), Val: "v"}
	}
	for _, bc := range []struct {
		name       string
		concurrent bool
	}{{"sequential", false}, {"concurrent", true}} {
		b.Run(bc.name, func(b *testing.B) {
			s := newSource(memory.Options{})
			w, err := s.Watch(context.Background(), informer.WatchOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			b.ReportAllocs()
			b.ResetTimer()
			if bc.concurrent {
				go func() {
					for i := range b.N {
						s.Put(objs[i%len(objs)])
					}
				}()
			}
			for i := range b.N {
				if !bc.concurrent {
					s.Put(objs[i%len(objs)])
				}
				if _, err := w.Next(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
