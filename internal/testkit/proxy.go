package testkit

import (
	"testing"

	"github.com/informer-go/informer/internal/tcpproxy"
)

// NewProxy starts a tcpproxy.Proxy in front of target for a test: it fails t if the proxy
// cannot listen, and closes the proxy when t ends.
func NewProxy(t testing.TB, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
