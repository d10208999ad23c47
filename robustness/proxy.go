package robustness

import (
	"io"
	"net"
	"sync"
)

// proxyMode is what a Proxy does with the bytes of a connection.
type proxyMode int

const (
	// pass forwards every byte both ways.
	pass proxyMode = iota
	// cut closes every connection and refuses new ones: a peer that is gone.
	cut
	// blackhole keeps connections open and accepts new ones but drops every byte: a
	// network that stopped answering, which only keep-alives and timeouts notice.
	blackhole
)

// Proxy is a TCP proxy on a loopback port in front of one etcd member's client port: the
// suite's clients reach etcd only through proxies, so that it can partition them from a
// member (Cut, Blackhole) while the members still see each other.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  proxyMode
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startProxy listens on a loopback port and forwards to target.
func startProxy(target string) (*Proxy, error) {
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
			go p.pipe(c, up)
			go p.pipe(up, c)
		}
		p.mu.Unlock()
	}
}

// pipe copies src to dst while the proxy passes; in a blackhole it reads and drops.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			drop := p.mode == blackhole
			p.mu.Unlock()
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	p.forget(dst, src)
}

// drain reads a connection accepted during a blackhole and drops what it reads.
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

// Cut closes every connection and refuses new ones until Heal.
func (p *Proxy) Cut() { p.set(cut) }

// Blackhole drops every byte of every connection, open or new, until Heal, without
// closing any.
func (p *Proxy) Blackhole() { p.set(blackhole) }

// Heal forwards again. Connections that were black-holed are closed, so that clients
// dial again rather than wait on a stream that lost bytes.
func (p *Proxy) Heal() { p.set(pass) }

func (p *Proxy) set(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.mode
	p.mode = m
	if m == cut || (was == blackhole && m == pass) {
		for c := range p.conns {
			c.Close()
		}
	}
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
