// Package embedded runs one etcd member inside the process: `plugvisor
// etcd`, to try a fleet or serve a small one, and the cluster tests
// (fleet/etcdtest). With TLS it serves https on its client and peer URLs
// and requires every client and peer to present a certificate its CA
// signed; without, it serves plain HTTP on loopback only.
package embedded

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	etcdsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrNotLoopback is returned for a plain http:// URL whose host is not
// loopback.
var ErrNotLoopback = errclass.New(errclass.Invalid, "etcd without TLS listens on loopback only")

// ErrScheme is returned for a URL whose scheme does not match the TLS
// setting: https:// with TLS, http:// without.
var ErrScheme = errclass.New(errclass.Invalid, "the URL's scheme does not match the TLS setting")

// Config says where the member keeps its data and listens.
type Config struct {
	// Dir is the member's data directory.
	Dir string
	// Client and Peer are the member's client and peer URLs: with TLS,
	// https:// on any address; without, http:// on loopback, e.g.
	// http://127.0.0.1:2379 and http://127.0.0.1:2380.
	Client, Peer *url.URL
	// TLS, when set, secures the client and peer URLs, each requiring a
	// client certificate signed by TLS.CA.
	TLS *TLS
	// ReadyTimeout bounds the wait for the member to serve (default 1 min).
	ReadyTimeout time.Duration
	// CompactionRetention is the revision history the member keeps: it
	// compacts by itself, in etcd's periodic mode, the revisions older than
	// this (default DefaultCompactionRetention; negative: never, and the
	// history grows until etcd's backend quota refuses every write).
	CompactionRetention time.Duration
}

// TLS is the member's TLS: PEM files, as plugvisor tls writes them.
type TLS struct {
	// CA signs the certificates of the clients and peers the member
	// accepts, and its own.
	CA string
	// Cert and Key are the member's certificate and key, served on the
	// client URL, and on the peer URL too unless PeerCert is set. The
	// certificate needs server and client use (the member dials its peers
	// and its own gRPC gateway with it) and the URLs' hosts among its names.
	Cert, Key string
	// PeerCert and PeerKey, when set, are served on the peer URL instead.
	PeerCert, PeerKey string
}

// info is the etcd TLS of one URL: cert and key, client certificates
// required, signed by the CA.
func (t *TLS) info(cert, key string) transport.TLSInfo {
	return transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: t.CA, ClientCertAuth: true}
}

// peerPair is the certificate and key of the peer URL.
func (t *TLS) peerPair() (cert, key string) {
	if t.PeerCert != "" || t.PeerKey != "" {
		return t.PeerCert, t.PeerKey
	}
	return t.Cert, t.Key
}

// check loads every file, so that a missing or mismatched one is named
// before etcd starts.
func (t *TLS) check() error {
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return fmt.Errorf("embedded: TLS CA: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("embedded: TLS CA %s holds no PEM certificate", t.CA)
	}
	peerCert, peerKey := t.peerPair()
	for _, pair := range [][2]string{{t.Cert, t.Key}, {peerCert, peerKey}} {
		if _, err := tls.LoadX509KeyPair(pair[0], pair[1]); err != nil {
			return fmt.Errorf("embedded: TLS certificate %q and key %q: %w", pair[0], pair[1], err)
		}
	}
	return nil
}

// checkURL refuses u unless it is https:// with TLS, or http:// on
// loopback without.
func checkURL(u *url.URL, secure bool) error {
	switch {
	case u == nil:
		return fmt.Errorf("%w: no URL; give http://127.0.0.1:PORT, or https:// with TLS", ErrNotLoopback)
	case secure && u.Scheme != "https":
		return fmt.Errorf("embedded: %v with TLS: %w: give https://%s", u, ErrScheme, u.Host)
	case !secure && u.Scheme != "http":
		return fmt.Errorf("embedded: %v without TLS: %w: give http://127.0.0.1:PORT, or TLS", u, ErrScheme)
	case !secure && !names.LoopbackHost(u.Hostname()):
		return fmt.Errorf("%w: %v; give http://127.0.0.1:PORT, or TLS", ErrNotLoopback, u)
	}
	return nil
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
		if err := checkURL(u, cfg.TLS != nil); err != nil {
			return nil, err
		}
	}
	ec := embed.NewConfig()
	ec.Dir, ec.Name = cfg.Dir, MemberName
	if cfg.TLS != nil {
		if err := cfg.TLS.check(); err != nil {
			return nil, err
		}
		ec.ClientTLSInfo = cfg.TLS.info(cfg.TLS.Cert, cfg.TLS.Key)
		ec.PeerTLSInfo = cfg.TLS.info(cfg.TLS.peerPair())
	}
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
// the snapshot's integrity hash is checked. The peer URL is https:// for
// a member that will run with TLS, else http:// on loopback.
func Restore(snapshot, dir string, peer *url.URL) error {
	if err := checkURL(peer, peer != nil && peer.Scheme == "https"); err != nil {
		return err
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
