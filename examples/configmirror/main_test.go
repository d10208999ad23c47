package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// With no flags the example runs against its embedded etcd and exits by itself.
func TestEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, options{prefix: "/config/", team: "billing"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"  listed  invoices team=billing env=prod replicas=2",
		"  listed  payments team=billing env=prod replicas=3 features=3ds",
		"  listed  search team=discovery env=prod replicas=4",
		"  listed  search-canary team=discovery env=staging replicas=1",
		"synced 4 configs",
		"? team billing: invoices(2) payments(3)",
		"~ updated payments team=billing env=prod replicas=5 features=3ds,wallets (was payments team=billing env=prod replicas=3 features=3ds)",
		"+ added   ledger team=billing env=staging replicas=1",
		"- deleted search-canary",
		`! etcd: cannot decode value "/config/typo" at revision 9: unexpected end of JSON input`,
		"~ updated invoices team=billing env=prod replicas=3 (was invoices team=billing env=prod replicas=2)",
		"? team billing: invoices(3) ledger(1) payments(5)",
		"mirrored 4 configs at revision 10; 1 document(s) did not decode",
	}
	if len(lines) != len(want)+1 || !strings.HasPrefix(lines[0], "started an embedded etcd at 127.0.0.1:") {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, w := range want {
		if lines[i+1] != w {
			t.Errorf("line %d:\n got %s\nwant %s", i+2, lines[i+1], w)
		}
	}
}

// With --endpoints it mirrors that cluster until --duration has passed.
func TestEndpoints(t *testing.T) {
	dir := t.TempDir()
	server, err := startEtcd(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	endpoint := server.Clients[0].Addr().String()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(context.Background(), "/cfg/a", `{"team":"t","env":"prod","replicas":1}`); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), &out, options{endpoints: []string{endpoint}, prefix: "/cfg/", team: "t", duration: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	want := "  listed  a team=t env=prod replicas=1\nsynced 1 configs\n? team t: a(1)\n? team t: a(1)\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

// With --state-dir the embedded run restarts its mirror warm: the second mirror restores
// the cache and hears only the changes made while it was down, without a list.
func TestEmbeddedWarmRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, options{prefix: "/config/", team: "billing", stateDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "stopped the mirror") })
	if i < 0 {
		t.Fatalf("output:\n%s", out.String())
	}
	want := []string{
		"  restored invoices team=billing env=prod replicas=3",
		"  restored ledger team=billing env=staging replicas=1",
		"  restored payments team=billing env=prod replicas=5 features=3ds,wallets",
		"  restored search team=discovery env=prod replicas=4",
		"restarted warm: 4 configs restored, resuming the watch",
		"~ updated search team=discovery env=prod replicas=6 (was search team=discovery env=prod replicas=4)",
		"- deleted ledger",
		"+ added   checkout team=billing env=prod replicas=2",
		"? team billing: checkout(2) invoices(3) payments(5)",
		"mirrored 4 configs at revision 13 after 0 list(s)",
	}
	if got := lines[i+1:]; !slices.Equal(got, want) {
		t.Fatalf("after the restart:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
