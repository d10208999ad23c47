package workqueue

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind, such as a delay goroutine
// that outlived ShutDown.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
