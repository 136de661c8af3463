package hostpath

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// DefaultName is the plugin name GetPluginInfo reports when Config.Name is empty.
const DefaultName = "hostpath.csi.plugvisor.io"

// DefaultVersion is the vendor version GetPluginInfo reports when
// Config.Version is empty.
const DefaultVersion = "0.1.0"

// TopologyKey is the topology segment key NodeGetInfo reports; its value is
// the node ID. Volumes are accessible only from the node whose ID they carry.
const TopologyKey = "topology.hostpath.csi.plugvisor.io/node"

// Mode selects which CSI services a Driver serves besides Identity.
type Mode string

// The modes a Driver runs in.
const (
	ModeController Mode = "controller" // Identity and Controller
	ModeNode       Mode = "node"       // Identity and Node
	ModeMonolith   Mode = "monolith"   // Identity, Controller and Node
)

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid config")

// Config configures a Driver. The zero value of a field means its default
// where one is given.
type Config struct {
	// Name is the CSI plugin name (default DefaultName). It must follow the
	// CSI rules: at most 63 characters, alphanumerics, '-', '_' and '.',
	// beginning and ending with an alphanumeric.
	Name string
	// Version is the vendor version (default DefaultVersion).
	Version string
	// NodeID identifies this node (required). It is also the topology segment
	// value and names this node's state directory, so it follows the volume ID
	// rules: not empty, at most 128 bytes, no '/', no "..".
	NodeID string
	// Root is the absolute directory holding volumes and state (required).
	Root string
	// Mode selects the services (default ModeMonolith).
	Mode Mode
	// MaxVolumes is the number of volumes this node may stage at once, and
	// with AttachRequired have attached, reported by NodeGetInfo; 0 means no
	// limit.
	MaxVolumes int64
	// SymlinkFallback makes NodePublishVolume create a symbolic link at the
	// target when a bind mount is not permitted (not root), instead of failing
	// with FailedPrecondition.
	SymlinkFallback bool
	// AttachRequired makes the driver behave like a driver of network disks:
	// the controller advertises PUBLISH_UNPUBLISH_VOLUME and PUBLISH_READONLY,
	// and a node stages or publishes a volume only once ControllerPublishVolume
	// attached it to that node and with the publish context it returned. Off
	// by default. The controller and the nodes sharing a root must agree on it.
	AttachRequired bool
	// Topology makes the driver advertise VOLUME_ACCESSIBILITY_CONSTRAINTS
	// (its volumes stay on their node, topology.hostpath.csi.plugvisor.io/node),
	// so that a container orchestrator requires a topology on each of its
	// volumes. Off by default: NodeGetInfo and CreateVolume report the
	// node's topology either way.
	Topology bool
	// Logger receives what the driver does (default: discard).
	Logger hclog.Logger
}

// Driver is a hostpath CSI plugin. Create it with New.
type Driver struct {
	cfg    Config
	log    hclog.Logger
	server *grpc.Server

	// mu is held shared by node RPCs, which also hold their volume's lock
	// in volumes, and exclusively by every other RPC that reads or writes
	// state on disk.
	mu      sync.RWMutex
	volumes volumeLocks
	// staging serialises the stagings while MaxVolumes is set, so that
	// the count each one checks is exact.
	staging sync.Mutex
	// journal holds this node's records (node mode only).
	journal *nodeJournal
}

// pluginNamePattern is the CSI spec's rule for plugin names.
var pluginNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// New checks cfg, fills in defaults, creates the root's directories and
// returns a Driver whose gRPC server has the services of cfg.Mode registered.
func New(cfg Config) (*Driver, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeMonolith
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.Root = filepath.Clean(cfg.Root)
	d := &Driver{cfg: cfg, log: cfg.Logger}
	dirs := []string{d.volumesDir(), d.volumeStateDir(), d.snapshotsDir(), d.snapshotStateDir(), d.nodesStateDir()}
	if cfg.Mode.node() {
		dirs = append(dirs, d.nodeStateDir()) // the controller learns that this node exists
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if cfg.Mode.node() {
		j, err := openNodeJournal(d.nodeStateDir())
		if err != nil {
			return nil, err
		}
		d.journal = j
	}
	d.server = grpc.NewServer(grpc.ChainUnaryInterceptor(d.intercept))
	d.Register(d.server)
	d.log.Info("hostpath: driver ready", "name", cfg.Name, "version", cfg.Version, "mode", cfg.Mode,
		"node_id", cfg.NodeID, "root", cfg.Root, "max_volumes", cfg.MaxVolumes, "symlink_fallback", cfg.SymlinkFallback,
		"attach_required", cfg.AttachRequired)
	return d, nil
}

// check reports the first thing wrong with a defaulted Config.
func (c Config) check() error {
	if !pluginNamePattern.MatchString(c.Name) {
		return fmt.Errorf("%w: name %q must be at most 63 characters of [A-Za-z0-9._-], beginning and ending with an alphanumeric", ErrInvalidConfig, c.Name)
	}
	if err := names.Check("node id", c.NodeID); err != nil {
		return errclass.Also(fmt.Errorf("%w: %w", ErrInvalidConfig, err), ErrInvalidID)
	}
	if !filepath.IsAbs(c.Root) {
		return fmt.Errorf("%w: root %q must be an absolute path", ErrInvalidConfig, c.Root)
	}
	if err := c.Mode.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.MaxVolumes < 0 {
		return fmt.Errorf("%w: max volumes %d must not be negative", ErrInvalidConfig, c.MaxVolumes)
	}
	return nil
}

func (m Mode) check() error {
	switch m {
	case ModeController, ModeNode, ModeMonolith:
		return nil
	}
	return fmt.Errorf("mode %q must be %s, %s or %s", string(m), ModeController, ModeNode, ModeMonolith)
}

func (m Mode) controller() bool { return m == ModeController || m == ModeMonolith }
func (m Mode) node() bool       { return m == ModeNode || m == ModeMonolith }

// Config returns the driver's configuration with defaults filled in.
func (d *Driver) Config() Config { return d.cfg }

// Register registers the Identity service and, as the mode asks, the
// Controller and Node services on s. Use it to serve the driver from a gRPC
// server of your own; Serve uses the driver's own server.
func (d *Driver) Register(s *grpc.Server) {
	csi.RegisterIdentityServer(s, &identityServer{d: d})
	if d.cfg.Mode.controller() {
		csi.RegisterControllerServer(s, &controllerServer{d: d})
	}
	if d.cfg.Mode.node() {
		csi.RegisterNodeServer(s, &nodeServer{d: d})
	}
}

// Serve serves the driver on l until Stop is called. It returns nil after Stop.
func (d *Driver) Serve(l net.Listener) error {
	d.log.Info("hostpath: serving", "address", l.Addr().String())
	return d.server.Serve(l)
}

// Stop stops serving: new RPCs are refused and Stop waits for running ones
// to finish (gRPC GracefulStop). Mounts made by NodePublishVolume stay, as
// the CSI spec wants them to outlive the plugin.
func (d *Driver) Stop() {
	d.server.GracefulStop()
	if d.journal != nil {
		d.journal.close()
	}
	d.log.Info("hostpath: stopped")
}

// JournalSyncs returns how many times the driver has synced its node
// journal (and its directory, when it rewrote it) since it started; zero
// in controller mode. Benchmarks divide it by their work.
func (d *Driver) JournalSyncs() int64 {
	if d.journal == nil {
		return 0
	}
	return d.journal.syncs.Load()
}

// JournalTime returns the time the driver has spent writing and syncing
// its node journal's batches since it started: over a run's wall time,
// the share of it the journal was busy. Benchmarks report it.
func (d *Driver) JournalTime() time.Duration {
	if d.journal == nil {
		return 0
	}
	return time.Duration(d.journal.busy.Load())
}

// VolumePath returns the directory that holds the data of the volume with
// the given ID, whether or not that volume exists.
func (d *Driver) VolumePath(volumeID string) (string, error) {
	if err := checkID("volume", volumeID); err != nil {
		return "", err
	}
	return d.volumeDir(volumeID), nil
}

// intercept logs failed RPCs and turns a panicking handler into an Internal
// error instead of a crashed plugin.
func (d *Driver) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			d.log.Error("hostpath: panic in RPC", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "hostpath: panic in %s: %v", info.FullMethod, r)
		}
	}()
	resp, err = handler(ctx, req)
	if err != nil {
		d.log.Info("hostpath: RPC failed", "method", info.FullMethod, "code", status.Code(err).String(), "error", status.Convert(err).Message())
	} else {
		d.log.Debug("hostpath: RPC done", "method", info.FullMethod)
	}
	return resp, err
}
