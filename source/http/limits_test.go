package httpsource

import (
	"testing"
	"time"
)

// eventually polls cond every millisecond until it holds, or fails the test after
// waitTimeout: for state that no channel announces.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
