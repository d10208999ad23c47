package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// With no --url the example starts its own PostgreSQL server (installing it if needed:
// with CI=true a missing server fails the test), mirrors, changes, serves and exits.
func TestScripted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, options{table: "settings", addr: "127.0.0.1:0", team: "billing"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// Addresses, ports and LSNs vary from run to run.
	got := regexp.MustCompile(`127\.0\.0\.1:\d+|LSN [0-9A-F]+/[0-9A-F]+`).ReplaceAllString(strings.TrimSpace(out.String()), "<…>")
	want := strings.Join([]string{
		"started a PostgreSQL server on <…>",
		"serving the mirror at http://<…>/ and probes at http://<…>/readyz",
		"synced 4 settings at <…>",
		`updated timeout="60s" team=billing`,
		`added   currency="EUR" team=billing`,
		"deleted theme",
		"team billing: [currency retries timeout]",
		"GET /readyz: 200",
		"GET /: 200, 4 settings",
	}, "\n")
	if got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}
