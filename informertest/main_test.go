package informertest_test

import (
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

// TestMain fails the package when a test leaves a goroutine running: Run must stop the
// informers it starts.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }
