package errsink

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

// The zero List reports to no one; each function added receives every later error, in
// the order the functions were added, and none that came before it.
func TestListReportsToEveryFunctionAdded(t *testing.T) {
	var l List
	var got []string
	l.Report(errors.New("before any"))
	l.Add(func(err error) { got = append(got, "first: "+err.Error()) })
	l.Report(errors.New("one"))
	l.Add(func(err error) { got = append(got, "second: "+err.Error()) })
	l.Report(errors.New("two"))
	want := []string{"first: one", "first: two", "second: two"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Functions added concurrently, and concurrently with Report, are all kept.
func TestListConcurrentAdds(t *testing.T) {
	var l List
	const n = 50
	var mu sync.Mutex
	seen := make(map[string]int)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			name := fmt.Sprint(i)
			l.Add(func(error) { mu.Lock(); seen[name]++; mu.Unlock() })
		}()
		go func() { defer wg.Done(); l.Report(errors.New("meanwhile")) }()
	}
	wg.Wait()
	clear(seen)
	l.Report(errors.New("last"))
	if len(seen) != n {
		t.Fatalf("%d functions reached, want %d", len(seen), n)
	}
	for name, k := range seen {
		if k != 1 {
			t.Errorf("function %s called %d times by one Report", name, k)
		}
	}
}
