//go:build !linux

package fanout

import "net"

// sendQueue is not available on this system: only completed writes show progress.
func sendQueue(*net.TCPConn) (int, bool) { return 0, false }
