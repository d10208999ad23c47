// Package testkit holds what the tests of the repository's modules share and that none of
// them should write again: a goroutine-leak check with patience, loopback addresses that
// stay free while a server restarts on them, and a TCP proxy that cuts clients off their
// server. It is for tests only.
package testkit

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakPatience is how long FindLeaks waits for goroutines to end. goleak alone retries for
// about half a second, and servers' and clients' connections (an etcd member's, an HTTP
// server's) can take longer than that to wind down on a loaded machine: packages then
// failed with no failing test. A real leak stays.
const leakPatience = 15 * time.Second

// FindLeaks is goleak.Find with patience (up to 15 s); it says on stderr when the
// goroutines it found at first ended later.
func FindLeaks(opts ...goleak.Option) error { return findLeaks(leakPatience, opts...) }

func findLeaks(patience time.Duration, opts ...goleak.Option) error {
	start := time.Now()
	for tries := 1; ; tries++ {
		err := goleak.Find(opts...)
		if err == nil && tries > 1 {
			fmt.Fprintf(os.Stderr, "goleak: the goroutines left took %v to end\n", time.Since(start).Round(time.Millisecond))
		}
		if err == nil || time.Since(start) > patience {
			return err
		}
	}
}

// VerifyTestMain runs the tests of m and, if they pass, fails the package when goroutines
// are left (FindLeaks, with the options ignore returns then; ignore may be nil), then
// exits. Call it from TestMain.
func VerifyTestMain(m *testing.M, ignore func() []goleak.Option) {
	code := m.Run()
	if code == 0 {
		var opts []goleak.Option
		if ignore != nil {
			opts = ignore()
		}
		if err := FindLeaks(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left at the end of the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	addrsMu sync.Mutex
	given   = map[string]bool{} // the addresses StableAddr returned in this process
)

// StableAddr returns a loopback address whose port was free a moment ago and that it has
// not returned before in this process, picked below the kernel's ephemeral port range:
// an outgoing connection takes its local port from that range, and so does a listener on
// port 0, so neither can take this one while nothing listens on it (between the pick and
// a server's start, or while a server that restarts on it is down). A port from the range
// was taken so once, on a machine shared with other test processes: "address already in
// use".
func StableAddr(t testing.TB) string {
	t.Helper()
	low := ephemeralLow()
	addrsMu.Lock()
	defer addrsMu.Unlock()
	for range 1000 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(low-10000)))
		if err != nil {
			continue // in use
		}
		addr := ln.Addr().String()
		ln.Close()
		if !given[addr] {
			given[addr] = true
			return addr
		}
	}
	t.Fatalf("testkit: no free port found below %d", low)
	return ""
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's; 32768, its
// default, elsewhere).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	return low
}

// LogBuffer collects log output, safe for writes from many goroutines; the zero value is
// ready for use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a text logger that writes to b the records at level and above.
func (b *LogBuffer) Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level}))
}

// WaitLimit bounds every wait of Recv and Until; reaching it is a failure, never a way to
// synchronise.
const WaitLimit = 10 * time.Second

// Recv waits for a value from ch and returns it, failing t ("timed out waiting for what")
// after WaitLimit.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(WaitLimit):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Until polls cond every interval until it holds, failing t ("timed out waiting for
// what") after WaitLimit. Use it only for state that nothing can be waited on.
func Until(t testing.TB, what string, interval time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(interval) // polling interval, not synchronisation
	}
}
