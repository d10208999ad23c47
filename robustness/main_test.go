package robustness

import (
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

// TestMain runs an etcd member or an informer when the suite started this process as one
// (see RunMemberIfAsked, RunInformerIfAsked, RunControllerIfAsked), and otherwise the tests, with the goroutine-leak check every package
// of the repository has.
func TestMain(m *testing.M) {
	RunMemberIfAsked()
	RunInformerIfAsked()
	RunControllerIfAsked()
	testkit.VerifyTestMain(m, nil)
}
