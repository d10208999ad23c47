package etcdtest_test

import (
	"testing"

	"github.com/informer-go/informer/internal/testkit"
)

// TestMain checks that no goroutine is left when the tests end.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }
