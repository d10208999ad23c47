package clock

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFakeTimersFireInOrderOnStep(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	if f.Waiters() != 2 {
		t.Fatalf("waiters %d", f.Waiters())
	}
	f.Step(time.Second)
	select {
	case got := <-b.C():
		if !got.Equal(time.Unix(1, 0)) {
			t.Fatalf("b fired at %v", got)
		}
	default:
		t.Fatal("b did not fire at its deadline")
	}
	select {
	case <-a.C():
		t.Fatal("a fired early")
	default:
	}
	if a.Stop() != true || a.Stop() != false {
		t.Fatal("Stop reports whether the timer was active")
	}
	f.Step(time.Hour)
	select {
	case <-a.C():
		t.Fatal("a stopped timer fired")
	default:
	}
}

func TestFakeResetAndZeroDuration(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	z := f.NewTimer(0)
	select {
	case <-z.C():
	default:
		t.Fatal("a zero-duration timer fires at once")
	}
	tm := f.NewTimer(time.Second)
	f.Step(time.Second)
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer reports false")
	}
	select {
	case <-tm.C():
		t.Fatal("Reset must drain the stale tick")
	default:
	}
	f.Step(time.Second)
	<-tm.C()
}

func TestFakeWaitForWaiters(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan bool)
	go func() { done <- f.WaitForWaiters(1, nil) }()
	f.NewTimer(time.Minute)
	if !<-done {
		t.Fatal("WaitForWaiters")
	}
	stop := make(chan struct{})
	close(stop)
	if f.WaitForWaiters(5, stop) {
		t.Fatal("WaitForWaiters must give up when done closes")
	}
}

func TestReal(t *testing.T) {
	var c Clock = Real{}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	if c.Since(c.Now().Add(-time.Second)) < time.Second {
		t.Fatal("Since")
	}
}
