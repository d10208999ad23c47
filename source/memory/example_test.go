package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/source/memory"
)

type Config struct {
	Name  string
	Value int
}

// A Source is listed, then watched from the list's revision: the pattern an informer
// follows.
func Example() {
	ctx := context.Background()
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	src.Put(&Config{Name: "timeout", Value: 30})
	src.Put(&Config{Name: "retries", Value: 3})

	list, err := src.List(ctx, informer.ListOptions{})
	if err != nil {
		panic(err)
	}
	for _, c := range list.Items {
		fmt.Printf("listed %s=%d\n", c.Name, c.Value)
	}

	w, err := src.Watch(ctx, informer.WatchOptions{Revision: list.Revision})
	if err != nil {
		panic(err)
	}
	defer w.Stop()
	src.Put(&Config{Name: "timeout", Value: 60})
	src.Delete("retries")
	for range 2 {
		ev, err := w.Next()
		if err != nil {
			panic(err)
		}
		fmt.Printf("%v %s=%d at revision %s\n", ev.Type, ev.Object.Name, ev.Object.Value, ev.Revision)
	}
	// Output:
	// listed retries=3
	// listed timeout=30
	// Modified timeout=60 at revision 3
	// Deleted retries=3 at revision 4
}

// A paged list reads one snapshot: a change made between pages is not in it.
func ExampleSource_List() {
	ctx := context.Background()
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	for i, name := range []string{"a", "b", "c"} {
		src.Put(&Config{Name: name, Value: i})
	}
	opts := informer.ListOptions{Limit: 2}
	for {
		page, err := src.List(ctx, opts)
		if err != nil {
			panic(err)
		}
		fmt.Printf("revision %s: %d items, more: %v\n", page.Revision, len(page.Items), page.Continue != "")
		if page.Continue == "" {
			break
		}
		src.Put(&Config{Name: "d"}) // not in this list
		opts.Continue = page.Continue
	}
	// Output:
	// revision 3: 2 items, more: true
	// revision 3: 1 items, more: false
}

// Fault injection: a dropped watch is resumed from the last revision received; a compacted
// revision expires, and the consumer must list again.
func ExampleSource_DropWatches() {
	ctx := context.Background()
	src := memory.New(func(c *Config) string { return c.Name }, memory.Options{})
	w, _ := src.Watch(ctx, informer.WatchOptions{})
	src.Put(&Config{Name: "a", Value: 1})
	ev, _ := w.Next()
	last := ev.Revision

	src.Put(&Config{Name: "a", Value: 2})
	src.DropWatches(informer.ErrUnavailable)
	_, err := w.Next()
	fmt.Println("dropped:", err, "retryable:", errors.Is(err, informer.ErrRetryable))
	w.Stop()

	w, _ = src.Watch(ctx, informer.WatchOptions{Revision: last})
	ev, _ = w.Next()
	fmt.Printf("resumed: %v a=%d at revision %s\n", ev.Type, ev.Object.Value, ev.Revision)
	w.Stop()

	src.Compact(src.Revision())
	_, err = src.Watch(ctx, informer.WatchOptions{Revision: last})
	fmt.Println("expired:", errors.Is(err, informer.ErrExpired))
	// Output:
	// dropped: source unavailable retryable: true
	// resumed: Modified a=2 at revision 2
	// expired: true
}
