package httpsource

import (
	"testing"

	"github.com/informer-go/informer/internal/testkit"
	"github.com/informer-go/informer/internal/wiretest"
)

// TestMain checks that no goroutine is left when the tests end, with patience.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

func newTestClient(t testing.TB, url string, opts ClientOptions[*wiretest.Obj]) *Client[*wiretest.Obj] {
	t.Helper()
	c, err := NewClient(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
