package robustness

import (
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

// TestMain runs an etcd member when the suite started this process as one (see
// RunMemberIfAsked), and otherwise the tests, with the goroutine-leak check every package
// of the repository has.
func TestMain(m *testing.M) {
	RunMemberIfAsked()
	testkit.VerifyTestMain(m, nil)
}
