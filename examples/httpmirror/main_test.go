package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestRun runs the example and checks every line it prints: the initial list as
// initial adds in key order, then the three changes made through the API in the
// order they were made, then the index read after WaitForRevision.
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	want := `add    1 acme open (initial true)
add    2 acme open (initial true)
add    3 globex open (initial true)
== synced
update 2 acme: open -> shipped
add    4 acme open (initial false)
delete 3 globex
== at revision 6: 3 orders, acme's: [1 2 4]
`
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}
