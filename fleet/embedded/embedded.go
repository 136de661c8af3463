// Package embedded runs one etcd member inside the process: for trying a
// fleet on one machine (`plugvisor etcd`) and for the cluster tests
// (fleet/etcdtest). It serves plain HTTP on loopback only; a fleet across
// machines runs a real etcd cluster with TLS.
package embedded

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/plugvisor/plugvisor/names"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrNotLoopback is returned for a URL whose host is not loopback.
var ErrNotLoopback = errors.New("embedded: etcd without TLS listens on loopback only")

// Config says where the member keeps its data and listens.
type Config struct {
	// Dir is the member's data directory.
	Dir string
	// Client and Peer are the member's client and peer URLs, on loopback,
	// e.g. http://127.0.0.1:2379 and http://127.0.0.1:2380.
	Client, Peer *url.URL
	// ReadyTimeout bounds the wait for the member to serve (default 1 min).
	ReadyTimeout time.Duration
}

// Start runs the member and returns once it serves. Close the member to
// stop it; its data stays in Dir for the next Start.
func Start(cfg Config) (*embed.Etcd, error) {
	for _, u := range []*url.URL{cfg.Client, cfg.Peer} {
		if u == nil || !names.LoopbackHost(u.Hostname()) {
			return nil, fmt.Errorf("%w: %v; give http://127.0.0.1:PORT", ErrNotLoopback, u)
		}
	}
	ec := embed.NewConfig()
	ec.Dir, ec.Name = cfg.Dir, "plugvisor-etcd"
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cfg.Client}, []url.URL{*cfg.Client}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*cfg.Peer}, []url.URL{*cfg.Peer}
	ec.InitialCluster = fmt.Sprintf("%s=%s", ec.Name, cfg.Peer)
	ec.LogLevel = "error"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedded: start etcd in %s: %w", cfg.Dir, err)
	}
	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("embedded: etcd in %s was not ready within %v", cfg.Dir, timeout)
	}
}
