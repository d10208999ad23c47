package robustness

import (
	"context"
	"testing"
	"time"

	"github.com/informer-go/informer/internal/testkit"
)

// TestRecorderResumesAfterNoLeader: etcd ends a watch opened WithRequireLeader when its
// member has no leader, as during a kill of the leader or of a quorum. The recording
// must open its watch again after the revision it has seen and miss nothing, or the run
// cannot be judged ("the run could not be completed: … etcdserver: no leader").
func TestRecorderResumesAfterNoLeader(t *testing.T) {
	var addrs []string
	for range 6 {
		addrs = append(addrs, testkit.StableAddr(t))
	}
	c, err := startCluster(t.TempDir(), addrs, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The recording's client talks to member 0 alone, the one left running: a client of
	// a killed member would be moved to it, or retry the killed one, without a "no leader".
	cli, err := client(c.direct()[:1])
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	r := newRecorder(cli, "/rec/")
	if err := r.StartEpoch(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer r.StopEpoch()
	before, err := cli.Put(ctx, "/rec/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitFor(ctx, before.Header.Revision); err != nil {
		t.Fatal(err)
	}

	// Two of three members down: the one left has no leader, and ends the watch.
	c.mu.Lock()
	c.kill(c.members[1], false)
	c.kill(c.members[2], false)
	c.mu.Unlock()
	for r.Resumed() == 0 {
		if _, err := r.History(); err != nil {
			t.Fatalf("the recording ended when the cluster lost its leader: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("etcd never ended the recording watch while without a leader")
		}
		time.Sleep(20 * time.Millisecond) // polling the recorder, with the test's deadline
	}
	c.mu.Lock()
	for _, m := range c.members[1:] {
		if err := c.spawn(m); err != nil {
			c.mu.Unlock()
			t.Fatal(err)
		}
	}
	err = c.waitServing(90 * time.Second)
	c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}

	after, err := cli.Put(ctx, "/rec/b", "2")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitFor(ctx, after.Header.Revision); err != nil {
		t.Fatalf("the recording did not reach the write after the leader came back: %v", err)
	}
	got := r.StateAt(after.Header.Revision)
	if len(got) != 2 || got["/rec/a"] != "1" || got["/rec/b"] != "2" {
		t.Fatalf("recorded state at %d: %v, want /rec/a=1 /rec/b=2", after.Header.Revision, got)
	}
}
