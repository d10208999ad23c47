package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestRun runs the example and checks every line it prints: the payments configs as
// initial adds, then the payments changes in the order they were made (the search one
// is not sent; the config that moves to payments is an add), then the mirror's cache at the last write's revision.
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// The count of requests served depends on how the client synced; the rest is exact.
	i := strings.Index(got, "== the server:")
	if i < 0 {
		t.Fatalf("output:\n%s\nwant a last line about the server", got)
	}
	want := `add    retries=3 (initial true)
add    timeout=30 (initial true)
== synced: 2 payments configs
update timeout: 30 -> 45
add    limit=100 (initial false)
delete retries
== at revision 8: limit=100 timeout=45
`
	if got[:i] != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got[:i], want)
	}
}
