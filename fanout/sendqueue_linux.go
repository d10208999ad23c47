package fanout

import (
	"net"
	"syscall"
	"unsafe"
)

// sendQueue returns the bytes c's kernel still holds for the peer (sent but not
// acknowledged, or not sent yet): it changes whenever the peer's TCP stack accepts data,
// which is how a write that is still blocked shows that the client reads.
func sendQueue(c *net.TCPConn) (int, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n int32
	var errno syscall.Errno
	err = raw.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n)))
	})
	if err != nil || errno != 0 {
		return 0, false
	}
	return int(n), true
}
