// Package tcpproxy is a TCP proxy for the repository's tests and examples: clients dial
// it instead of a server, and the test cuts them off, drops or holds their bytes, and lets
// them through again, while the server runs on.
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// proxyMode is what a Proxy does with the bytes of its connections.
type proxyMode int

const (
	pass      proxyMode = iota // forward every byte both ways
	cut                        // close every connection, refuse new ones
	blackhole                  // drop every byte, connections left open
	paused                     // hold every byte until Resume, connections left open
)

// Proxy is a TCP proxy on a loopback port in front of a server's address (an etcd
// member's client port, an HTTP server's): a test's clients dial the proxy, so that the
// test can partition them from the server while the server runs on (Cut, Blackhole,
// Pause), and then let them through again (Resume). It counts the bytes the server sends
// (Received). Make one with Start (or testkit.NewProxy, in a test); it is safe for concurrent use. Each
// connection costs two goroutines and a 32 KiB buffer a direction.
type Proxy struct {
	ln       net.Listener
	target   string
	received atomic.Int64 // bytes the target sent that were passed on

	mu      sync.Mutex
	mode    proxyMode
	resumed chan struct{} // closed when a pause ends; nil unless paused
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// Start listens on a loopback port and forwards each connection to target, which it
// dials when a client connects. Close stops it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, the endpoint clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Received returns the number of bytes the target has sent through the proxy to its
// clients since the proxy started, counted as they are passed on (so a client that has
// read them finds them counted); bytes dropped in a black hole are not counted.
func (p *Proxy) Received() int64 { return p.received.Load() }

// Cut closes every connection and refuses new ones (accepted and closed at once) until
// Resume: a server that is gone, as its clients see it.
func (p *Proxy) Cut() { p.set(cut) }

// Blackhole drops every byte of every connection, open or new, without closing any, until
// Resume: a network that stopped answering, which only keep-alives and timeouts notice.
// Resume closes the connections it held, so that clients dial again rather than go on on a
// stream that lost bytes.
func (p *Proxy) Blackhole() { p.set(blackhole) }

// Pause holds every byte of every connection, open or new, without closing any, until
// Resume passes them on: a partition that heals, in which calls in flight neither fail nor
// complete meanwhile.
func (p *Proxy) Pause() { p.set(paused) }

// Resume forwards again, after Cut, Blackhole or Pause.
func (p *Proxy) Resume() { p.set(pass) }

// Close stops the proxy: it closes the listener and every connection, and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) set(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.mode
	p.mode = m
	switch {
	case m == paused && was != paused:
		p.resumed = make(chan struct{})
	case m != paused && was == paused:
		close(p.resumed)
		p.resumed = nil
	}
	if m == cut || (was == blackhole && m == pass) {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		switch p.mode {
		case cut:
			c.Close()
		case blackhole:
			p.conns[c] = struct{}{}
			p.wg.Add(1)
			go p.drain(c)
		default:
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				break
			}
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.wg.Add(2)
			go p.pipe(c, up, &p.received)
			go p.pipe(up, c, nil)
		}
		p.mu.Unlock()
	}
}

// pipe copies src to dst, and adds the bytes it passes on to count unless it is nil: it holds
// what it read while the proxy is paused, and drops it while it is a black hole.
func (p *Proxy) pipe(dst, src net.Conn, count *atomic.Int64) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.await() != blackhole {
			if count != nil {
				count.Add(int64(n)) // before the write: a client that read them finds them counted
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.forget(dst, src)
}

// await returns the proxy's mode once it is not paused.
func (p *Proxy) await() proxyMode {
	for {
		p.mu.Lock()
		m, resumed := p.mode, p.resumed
		p.mu.Unlock()
		if m != paused {
			return m
		}
		<-resumed
	}
}

// drain reads a connection accepted during a black hole and drops what it reads.
func (p *Proxy) drain(c net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(io.Discard, c)
	p.forget(c)
}

func (p *Proxy) forget(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}
