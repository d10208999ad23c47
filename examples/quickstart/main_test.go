package main

import "testing"

// TestRun runs the quickstart as `go run ./examples/quickstart` does: it ends by itself,
// without an error, within its own 10-second bound.
func TestRun(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
