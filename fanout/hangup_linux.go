package fanout

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// hangups watches the connections of taken-over watches for their clients' going away,
// all in one epoll set read by one goroutine, which runs while any connection is watched:
// an idle watcher holds no goroutine for it. Each connection is registered one-shot for
// input and hang-up; input that is not a hang-up is read and dropped and the connection
// registered again, up to maxIdleInput.
var hangups struct {
	once sync.Once
	epfd int
	wake [2]int // a pipe: a byte written to wake[1] wakes the goroutine
	err  error  // the epoll set could not be made, or failed: a goroutine per connection

	mu      sync.Mutex
	conns   map[uint64]*hangupConn // by id, the epoll data of its registration
	lastID  uint64
	running bool       // the goroutine runs
	buf     [4096]byte // input read and dropped, under mu
}

// hangupConn is one watched connection.
type hangupConn struct {
	raw  syscall.RawConn
	gone func()
	read int // input dropped so far
}

const hangupEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

func initHangups() {
	h := &hangups
	if h.epfd, h.err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); h.err != nil {
		return
	}
	if h.err = syscall.Pipe2(h.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); h.err != nil {
		_ = syscall.Close(h.epfd)
		return
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN} // id 0
	h.err = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_ADD, h.wake[0], &ev)
	h.conns = make(map[uint64]*hangupConn)
}

// watchHangup calls gone once conn's client closes or resets the connection, or has sent
// more than maxIdleInput, and returns the function that stops watching (before conn is
// closed). A connection the epoll set cannot take (not TCP) is read by a goroutine of its
// own (readUntilHangup).
func watchHangup(conn net.Conn, gone func()) (stop func()) {
	h := &hangups
	h.once.Do(initHangups)
	tcp := tcpConn(conn)
	if tcp == nil {
		return readUntilHangup(conn, gone)
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return readUntilHangup(conn, gone)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return readUntilHangup(conn, gone)
	}
	h.lastID++
	id := h.lastID
	ev := epollEvent(id)
	if err := control(raw, func(fd int) error { return syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_ADD, fd, &ev) }); err != nil {
		return readUntilHangup(conn, gone)
	}
	h.conns[id] = &hangupConn{raw: raw, gone: gone}
	if !h.running {
		h.running = true
		go runHangups()
	}
	return func() { unwatchHangup(id) }
}

// unwatchHangup takes a connection out of the set, and wakes the goroutine to end if it
// was the last.
func unwatchHangup(id uint64) {
	h := &hangups
	h.mu.Lock()
	defer h.mu.Unlock()
	hc := h.conns[id]
	if hc == nil {
		return
	}
	delete(h.conns, id)
	_ = control(hc.raw, func(fd int) error { return syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_DEL, fd, nil) })
	if len(h.conns) == 0 && h.running {
		_, _ = syscall.Write(h.wake[1], []byte{0})
	}
}

// runHangups waits for the watched connections' events until none is watched.
func runHangups() {
	h := &hangups
	events := make([]syscall.EpollEvent, 64)
	for {
		n, err := syscall.EpollWait(h.epfd, events, -1)
		h.mu.Lock()
		if err != nil && !errors.Is(err, syscall.EINTR) {
			// Not expected: every watcher is ended (its client reconnects), and later ones
			// are read by goroutines of their own.
			h.err = err
			for id, hc := range h.conns {
				hc.gone()
				delete(h.conns, id)
			}
		}
		for _, ev := range events[:max(n, 0)] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				for {
					if n, _ := syscall.Read(h.wake[0], h.buf[:]); n <= 0 {
						break
					}
				}
				continue
			}
			if hc := h.conns[id]; hc != nil {
				hc.event(id, ev.Events)
			}
		}
		if len(h.conns) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// event handles an event of hc, under hangups.mu: a hang-up ends the watch; input is
// read and dropped, and hc registered again.
func (hc *hangupConn) event(id uint64, events uint32) {
	h := &hangups
	if events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		hc.gone()
		return
	}
	gone := false
	err := control(hc.raw, func(fd int) error {
		n, err := syscall.Read(fd, h.buf[:])
		switch {
		case errors.Is(err, syscall.EAGAIN):
		case err != nil || n == 0:
			gone = true // reset, or the end of its input
		default:
			hc.read += n
			gone = hc.read > maxIdleInput
		}
		if gone {
			return nil
		}
		ev := epollEvent(id)
		return syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
	})
	if gone || err != nil {
		hc.gone()
	}
}

// epollEvent is the registration of the connection of id.
func epollEvent(id uint64) syscall.EpollEvent {
	return syscall.EpollEvent{Events: hangupEvents, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

// control runs f on raw's descriptor, which stays open meanwhile.
func control(raw syscall.RawConn, f func(fd int) error) error {
	var ferr error
	if err := raw.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
