package etcdtest

import "github.com/informer-go/informer/internal/tcpproxy"

// Proxy is a TCP proxy on a loopback port in front of an etcd member's client port: a
// test's clients dial it (Addr), so that the test can partition them from etcd while etcd
// runs on, and then let them through again. Cut closes every connection and refuses new
// ones (a member that is gone); Blackhole drops every byte without closing anything (a
// network that stopped answering), and its Resume closes the connections it held; Pause
// holds every byte until Resume passes them on (a partition that heals); Resume forwards
// again; Received counts the bytes etcd sent; Close stops the proxy and waits for its
// goroutines. It is safe for concurrent use. It is the repository's test proxy
// (internal/tcpproxy), which the tests of other packages use too.
type Proxy = tcpproxy.Proxy

// StartProxy listens on a loopback port and forwards each connection to target, which it
// dials when a client connects. Close stops it.
func StartProxy(target string) (*Proxy, error) { return tcpproxy.Start(target) }
