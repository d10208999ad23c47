// Package etcdtest starts an etcd member inside the process (go.etcd.io/etcd/server/v3's
// embed package), for tests and demos of code that uses source/etcd: no etcd binary to
// install, no fsync, logs discarded. A member costs about 20 MB of heap and a few hundred
// goroutines, all gone once Close has returned; it is not for production. A Proxy between
// clients and a member lets a test partition them (cut, black hole, pause) while etcd runs.
package etcdtest

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config returns the configuration of a throwaway member named name ("" for etcd's
// "default") with its data in dir, serving clients at client and its peers at peer
// (127.0.0.1:0 lets the kernel choose a port, for a member alone), alone in its cluster:
// no fsync, logs discarded, progress notifications every 10 minutes. Change its fields
// before Start for more (InitialCluster for a cluster of several members,
// WatchProgressNotifyInterval, …).
func Config(name, dir string, client, peer url.URL) *embed.Config {
	cfg := embed.NewConfig()
	if name != "" {
		cfg.Name = name
	}
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	cfg.WatchProgressNotifyInterval = 10 * time.Minute
	return cfg
}

// Start starts cfg's member and waits until it serves clients, at most ready (30 s if
// zero). It returns etcd's error if the member fails to start, and an error naming the
// member if it is not ready in time; either way nothing of it is left running. The
// caller closes the member it returns (Close waits for its goroutines).
func Start(cfg *embed.Config, ready time.Duration) (*embed.Etcd, error) {
	if ready == 0 {
		ready = 30 * time.Second
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(ready):
		e.Close()
		return nil, fmt.Errorf("etcdtest: etcd member %s not ready after %v", cfg.Name, ready)
	}
}
