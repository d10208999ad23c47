package tcpproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/tcpproxy"
	"github.com/informer-go/informer/internal/testkit"
)

// TestMain checks that no goroutine is left when the tests end.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m, nil) }

// startEcho serves a loopback port that writes back what it reads, until the test ends.
func startEcho(t *testing.T) string {
	return startServer(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// startDoubler serves a loopback port that writes back every byte it reads twice, until
// the test ends.
func startDoubler(t *testing.T) string {
	return startServer(t, func(c net.Conn) {
		buf := make([]byte, 1)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			if _, err := c.Write([]byte{buf[0], buf[0]}); err != nil {
				return
			}
		}
	})
}

// startServer serves a loopback port, each connection with serve, until the test ends.
func startServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// expect reads len(want) bytes and compares them with want.
func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

// expectNothing checks that nothing arrives within a short while.
func expectNothing(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 1)
	n, err := c.Read(buf)
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %q, %v; want nothing", what, buf[:n], err)
	}
}

// expectClosed checks that the connection ends.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 1)
	n, err := c.Read(buf)
	if n > 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %q, %v; want the connection closed", what, buf[:n], err)
	}
}

// The proxy forwards; a pause holds the bytes until Resume passes them on; a black hole
// drops them and Resume closes the connections it held; a cut closes every connection
// and refuses new ones until Resume; Close refuses for good.
func TestProxy(t *testing.T) {
	p, err := tcpproxy.Start(startEcho(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p.Addr())
	send(t, c, "a")
	expect(t, c, "a")

	p.Pause()
	send(t, c, "b")
	expectNothing(t, c, "paused")
	p.Resume()
	expect(t, c, "b")

	p.Blackhole()
	send(t, c, "c")
	expectNothing(t, c, "black hole")
	held := dial(t, p.Addr()) // accepted in the black hole
	send(t, held, "x")
	expectNothing(t, held, "a connection made in the black hole")
	p.Resume()
	expectClosed(t, c, "a connection the black hole held, after Resume")
	expectClosed(t, held, "a connection made in the black hole, after Resume")
	c = dial(t, p.Addr())
	send(t, c, "d")
	expect(t, c, "d")

	p.Cut()
	expectClosed(t, c, "an open connection, cut")
	expectClosed(t, dial(t, p.Addr()), "a new connection while cut")
	p.Resume()
	c = dial(t, p.Addr())
	send(t, c, "e")
	expect(t, c, "e")

	p.Pause()
	send(t, c, "f")
	p.Close() // a pause ends with the proxy
	expectClosed(t, c, "a paused connection, after Close")
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Fatal("the closed proxy still accepts connections")
	}
}

// Received counts the bytes the target sent, not those the clients sent, over every
// connection.
func TestProxyReceived(t *testing.T) {
	p := testkit.NewProxy(t, startDoubler(t))
	c := dial(t, p.Addr())
	send(t, c, "ab")
	expect(t, c, "aabb")
	if n := p.Received(); n != 4 {
		t.Fatalf("Received %d after the target sent 4 bytes (and the client 2)", n)
	}
	p.Cut()
	p.Resume()
	c = dial(t, p.Addr())
	send(t, c, "c")
	expect(t, c, "cc")
	if n := p.Received(); n != 6 {
		t.Fatalf("Received %d after the target sent 6 bytes over two connections", n)
	}
}
