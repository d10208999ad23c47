package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example and checks that its story is told in order: the retries and
// the rollout checks happen, and everything stops.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "127.0.0.1:0"); err != nil { // with metrics served: no leak either
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	// Each sequence is in order; billing's and web's run concurrently.
	for _, seq := range [][]string{
		{"pull of billing:2.0 failed (attempt 1)", "pull of billing:2.0 failed (attempt 2)", "1 × billing:2.0 running"},
		{"rollout of web:7.1: 1/3", "rollout of web:7.1: 2/3", "rollout of web:7.1: 3/3", "3 × web:7.1 running"},
		{"2 × api:1.4 running", "5 × api:1.4 running", "billing  deleted: tearing down", "== stopped"},
		{"1 × billing:2.0 running", "5 × api:1.4 running"},
		{"3 × web:7.1 running", "5 × api:1.4 running"},
	} {
		rest := text
		for _, want := range seq {
			i := strings.Index(rest, want)
			if i < 0 {
				t.Fatalf("output lacks %q after %q:\n%s", want, seq, text)
			}
			rest = rest[i+len(want):]
		}
	}
	if n := strings.Count(text, `msg="reconcile failed; retrying with backoff"`); n != 2 {
		t.Errorf("%d retries logged, want 2:\n%s", n, text)
	}
}
