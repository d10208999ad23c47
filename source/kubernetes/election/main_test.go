package election_test

import (
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

// TestMain fails the package if a test leaves a goroutine behind: a renewal loop, a timer.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }
