// Package embedded runs one etcd member inside the process: for trying a
// fleet on one machine (`plugvisor etcd`) and for the cluster tests
// (fleet/etcdtest). It serves plain HTTP on loopback only; a fleet across
// machines runs a real etcd cluster with TLS.
package embedded

import (
	"fmt"
	"net/url"
	"time"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
	etcdsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrNotLoopback is returned for a URL whose host is not loopback.
var ErrNotLoopback = errclass.New(errclass.Invalid, "etcd without TLS listens on loopback only")

// Config says where the member keeps its data and listens.
type Config struct {
	// Dir is the member's data directory.
	Dir string
	// Client and Peer are the member's client and peer URLs, on loopback,
	// e.g. http://127.0.0.1:2379 and http://127.0.0.1:2380.
	Client, Peer *url.URL
	// ReadyTimeout bounds the wait for the member to serve (default 1 min).
	ReadyTimeout time.Duration
	// CompactionRetention is the revision history the member keeps: it
	// compacts by itself, in etcd's periodic mode, the revisions older than
	// this (default DefaultCompactionRetention; negative: never, and the
	// history grows until etcd's backend quota refuses every write).
	CompactionRetention time.Duration
}

// DefaultCompactionRetention is the history a member keeps by default,
// as the Kubernetes apiserver compacts every 5 minutes.
const DefaultCompactionRetention = 5 * time.Minute

// MemberName is the member's name in its one-member cluster.
const MemberName = "plugvisor-etcd"

// Start runs the member and returns once it serves. Close the member to
// stop it; its data stays in Dir for the next Start.
func Start(cfg Config) (*embed.Etcd, error) {
	for _, u := range []*url.URL{cfg.Client, cfg.Peer} {
		if u == nil || !names.LoopbackHost(u.Hostname()) {
			return nil, fmt.Errorf("%w: %v; give http://127.0.0.1:PORT", ErrNotLoopback, u)
		}
	}
	ec := embed.NewConfig()
	ec.Dir, ec.Name = cfg.Dir, MemberName
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cfg.Client}, []url.URL{*cfg.Client}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*cfg.Peer}, []url.URL{*cfg.Peer}
	ec.InitialCluster = fmt.Sprintf("%s=%s", ec.Name, cfg.Peer)
	retention := cfg.CompactionRetention
	if retention == 0 {
		retention = DefaultCompactionRetention
	}
	if retention > 0 {
		ec.AutoCompactionMode, ec.AutoCompactionRetention = embed.CompactorModePeriodic, retention.String()
	}
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

// Stop stops the member within about grace, where Close can wait for
// etcd's request timeout (5 s and more) on the watch streams its clients
// keep open: it stops the etcd server first (each write is durable in its
// log and db as it is applied, so nothing acknowledged is lost), then
// closes it, waiting at most grace. A Close still waiting after that is
// left to the process's exit: for a process that stops (plugvisor etcd).
func Stop(e *embed.Etcd, grace time.Duration) {
	e.Server.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Close()
	}()
	select {
	case <-done:
	case <-time.After(grace):
	}
}

// restoreRevisionBump is how far a restore moves etcd's revision past the
// snapshot's, as etcd advises for a restore under running clients: a
// client that watched at a later revision than the snapshot's sees its
// watch compacted and reads again, rather than wait for revisions that
// the restored etcd would number again.
const restoreRevisionBump = 1_000_000_000

// Restore makes dir, which must not exist, the data directory of a member
// restored from snapshot (a file that etcd's snapshot save wrote: clientv3
// Maintenance.Snapshot, `etcdctl snapshot save` or `plugvisor etcd
// snapshot save`), for a Start with the same peer URL. The member starts
// as a new one-member cluster holding the snapshot's keys, as `etcdutl
// snapshot restore --bump-revision 1000000000 --mark-compacted` makes it;
// the snapshot's integrity hash is checked.
func Restore(snapshot, dir string, peer *url.URL) error {
	if peer == nil || !names.LoopbackHost(peer.Hostname()) {
		return fmt.Errorf("%w: %v; give http://127.0.0.1:PORT", ErrNotLoopback, peer)
	}
	err := etcdsnapshot.NewV3(zap.NewNop()).Restore(etcdsnapshot.RestoreConfig{
		SnapshotPath: snapshot, Name: MemberName, OutputDataDir: dir,
		PeerURLs: []string{peer.String()}, InitialCluster: fmt.Sprintf("%s=%s", MemberName, peer), InitialClusterToken: "etcd-cluster",
		RevisionBump: restoreRevisionBump, MarkCompacted: true,
	})
	if err != nil {
		return fmt.Errorf("embedded: restore %s into %s: %w", snapshot, dir, err)
	}
	return nil
}
