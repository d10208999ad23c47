//go:build !linux

package fanout

import "net"

// watchHangup calls gone once conn's client goes away (see readUntilHangup), and returns
// the function that stops watching (before conn is closed). Here a goroutine per
// connection reads it.
func watchHangup(conn net.Conn, gone func()) (stop func()) { return readUntilHangup(conn, gone) }
