package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/member"
)

// ClusterConfig turns on cluster mode: the CSI catalog's volumes, claims and
// plugin health live in etcd for the whole fleet of agents (package fleet),
// and the agent is a member of the fleet's protoactor cluster, whose volume
// grains run each volume's claims one at a time (package fleet/member).
// Without it (Config.Cluster nil) the catalog stays on this node's bbolt.
type ClusterConfig struct {
	// Etcd are the etcd client URLs (required); EtcdTLS, when set, is used
	// to reach them. A URL reached without TLS (http://) must be on
	// loopback, and is warned about at every start.
	Etcd    []string
	EtcdTLS *tls.Config
	// EtcdUsername and EtcdPassword, when set, authenticate the agent to
	// an etcd with auth enabled, besides (or instead of) EtcdTLS's client
	// certificate. The password never appears in output or logs.
	EtcdUsername, EtcdPassword string
	// Address is the host:port the agent's cluster member listens on and
	// the other members dial (required): an address of this host they can
	// reach; port 0 picks a free port. Beyond loopback it needs RemoteTLS.
	Address string
	// Keyring, when set, seals the fleet's records in etcd and signs the
	// members' requests (fleet.Keyring); every agent of the fleet needs the
	// same one. Without it, the data dir's file "keyring", when there, is
	// the keyring. AcceptUnsealed reads records it did not seal, while a
	// fleet moves to a keyring.
	Keyring        *fleet.Keyring
	AcceptUnsealed bool
	// Advertise, when set, is the host:port the other members dial instead
	// of Address (behind a NAT, or a proxy).
	Advertise string
	// RemoteTLS secures the members' traffic; set ClientAuth in its Server
	// config for mTLS.
	RemoteTLS *member.RemoteTLS
	// ClusterName and Prefix separate fleets sharing one etcd (defaults
	// "plugvisor" and "/plugvisor/").
	ClusterName, Prefix string
	// LeaseTTL is how long the node stays up, and its member in the
	// cluster, after it stops renewing (default 10 s, at least 2 s, whole
	// seconds). RequestTimeout bounds each etcd call (default 5 s).
	LeaseTTL, RequestTimeout time.Duration
	// GCInterval, when set, makes this node a candidate for the fleet's
	// one GC, which frees the claims of nodes down for longer than GCGrace
	// (default 5 min), woken by a watch on the nodes' liveness and looking
	// again at the down nodes every GCInterval; and this node then
	// detaches, through its controllers, the attachments those nodes leave
	// behind.
	GCInterval, GCGrace time.Duration
	// FenceMargin is how long this node's fence may take to make its
	// writers read-only once its lease may be lost (default
	// DefaultFenceMargin): GCGrace must be longer than LeaseTTL plus
	// FenceMargin (see checkFence). Every node of a fleet should use the
	// same GCGrace.
	FenceMargin time.Duration
	// CompactInterval, when set, makes this node a candidate for the
	// fleet's one compactor, which compacts etcd's revision history at that
	// interval, keeping about one interval of history (the CLI's default
	// is 5 min, as the Kubernetes apiserver; 0 leaves it to etcd's own
	// -auto-compaction-retention).
	CompactInterval time.Duration
}

// startCluster joins the fleet, when the config asks for cluster mode. It
// runs before any other part of the agent that speaks gRPC (see
// member.Start). It stops after the catalog, which uses it.
func (a *Agent) startCluster() error {
	c := a.cfg.Cluster
	if c == nil {
		return nil
	}
	if c.GCInterval < 0 || c.GCGrace < 0 {
		return fmt.Errorf("%w: Cluster.GCInterval is %v and Cluster.GCGrace %v; give positive durations, or 0 for no GC and the default grace",
			ErrInvalidConfig, c.GCInterval, c.GCGrace)
	}
	if err := checkFence(c); err != nil {
		return err
	}
	if c.CompactInterval < 0 {
		return fmt.Errorf("%w: Cluster.CompactInterval is %v; give a positive duration, or 0 for no compactor", ErrInvalidConfig, c.CompactInterval)
	}
	identity, err := a.nodeIdentity()
	if err != nil {
		return err
	}
	keyring, err := a.keyring()
	if err != nil {
		return err
	}
	a.warnPlainEtcd(c)
	a.metrics.fleet = newFleetMetrics(a.metrics.reg, a.fleetStore)
	m, err := member.Start(member.Config{
		Fleet: fleet.Config{
			Endpoints: c.Etcd, TLS: c.EtcdTLS, Username: c.EtcdUsername, Password: c.EtcdPassword,
			NodeID: a.cfg.NodeID, Identity: identity, Prefix: c.Prefix,
			Keyring: keyring, AcceptUnsealed: c.AcceptUnsealed,
			LeaseTTL: c.LeaseTTL, RequestTimeout: c.RequestTimeout, MaxVolumes: a.cfg.MaxVolumes, Logger: a.log,
			Metrics: a.metrics.fleet,
		},
		Address: c.Address, Advertise: c.Advertise, TLS: c.RemoteTLS, ClusterName: c.ClusterName,
	})
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	a.member = m
	a.stops = append(a.stops, func(context.Context) error { return m.Stop() })
	if c.RemoteTLS == nil {
		a.log.Warn("INSECURE: -cluster-insecure: cluster members talk without TLS; anyone on this host can reach this member at " + m.Address())
	}
	return nil
}

// keyringFile is where the agent looks for the fleet's keyring when none
// is given: once a key exists there, the fleet's records are sealed.
const keyringFile = "keyring"

// keyring is the fleet's keyring: the one given, else the data dir's
// keyring file when it exists, else none.
func (a *Agent) keyring() (*fleet.Keyring, error) {
	if k := a.cfg.Cluster.Keyring; k != nil {
		return k, nil
	}
	path := filepath.Join(a.cfg.DataDir, keyringFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	k, err := fleet.LoadKeyring(path)
	if err != nil {
		return nil, fmt.Errorf("cluster mode: the data dir's keyring: %w", err)
	}
	a.log.Info("the fleet's records are sealed with the data dir's keyring", "path", path, "primary", k.Primary())
	return k, nil
}

// startGC starts, in cluster mode when GCInterval is set, once the volume
// manager runs: this node's candidate for the fleet's one GC (the leader
// of an etcd election frees the claims of down nodes), and its Detacher,
// which detaches, through this node's controllers, the attachments those
// nodes leave behind (detachStranded). Both stop before the volume
// manager.
func (a *Agent) startGC() error {
	c := a.cfg.Cluster
	if a.member == nil || c.GCInterval == 0 {
		return nil
	}
	gc, err := fleet.StartGC(a.member.Store(), fleet.GCConfig{Interval: c.GCInterval, Grace: c.GCGrace, Logger: a.log})
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	a.stops = append(a.stops, func(context.Context) error { gc.Stop(); return nil })
	d, err := fleet.StartDetacher(a.member.Store(), fleet.DetacherConfig{
		Interval: c.GCInterval, Controls: a.runsController, Detach: a.detachStranded, Logger: a.log,
	})
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	a.stops = append(a.stops, func(context.Context) error { d.Stop(); return nil })
	return nil
}

// startCompactor starts, in cluster mode when CompactInterval is set, this
// node's candidate for the fleet's one compactor of etcd's history.
func (a *Agent) startCompactor() error {
	c := a.cfg.Cluster
	if a.member == nil || c.CompactInterval == 0 {
		return nil
	}
	compactor, err := fleet.StartCompactor(a.member.Store(), fleet.CompactConfig{Interval: c.CompactInterval, Logger: a.log})
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	a.stops = append(a.stops, func(context.Context) error { compactor.Stop(); return nil })
	return nil
}

// fleetStore is this node's fleet.Store in cluster mode once etcd
// answered, else nil.
func (a *Agent) fleetStore() *fleet.Store {
	if a.member == nil {
		return nil
	}
	return a.member.Store()
}

// fleet is the catalog's Fleet in cluster mode, nil without it.
func (a *Agent) fleet() model.Fleet {
	if a.member == nil {
		return nil
	}
	return a.member.Router()
}
