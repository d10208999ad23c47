package testkit

import (
	"net"
	"strconv"
	"testing"
)

// StableAddr never returns an address twice, and each is free: a server can listen there.
func TestStableAddr(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		addr := StableAddr(t)
		if seen[addr] {
			t.Fatalf("StableAddr returned %s twice", addr)
		}
		seen[addr] = true
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		ln.Close()
		if _, port, _ := net.SplitHostPort(addr); mustAtoi(t, port) >= ephemeralLow() {
			t.Fatalf("port %s is in the ephemeral range (from %d)", port, ephemeralLow())
		}
	}
}

// FindLeaks finds a goroutine left running, and nothing once it ended.
func TestFindLeaks(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); <-stop }()
	if err := findLeaks(0); err == nil {
		t.Fatal("findLeaks found nothing while a goroutine runs")
	}
	close(stop)
	<-done
	if err := FindLeaks(); err != nil {
		t.Fatalf("FindLeaks after the goroutine ended: %v", err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
