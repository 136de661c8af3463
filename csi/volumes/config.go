package volumes

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/internal/mountinfo"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor"
)

// Plugin types the volume manager looks up in the registry.
const (
	NodePluginType       = "csi-node"
	ControllerPluginType = "csi-controller"
)

// Catalog is the part of the CSI catalog the volume manager uses, in the
// catalog's own types: the catalog's facade (csi/catalog.Catalog)
// satisfies it. Its errors have their classes (errclass): the volume
// manager adds its own sentinel of the class, so an unknown volume
// (errclass.NotFound) matches ErrVolumeNotFound, a refused claim
// (errclass.Conflict) ErrClaimRefused, bad input ErrInvalid. Releasing a
// claim that is not held, or of a volume the catalog does not know,
// returns nil.
type Catalog interface {
	GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error)
	// ClaimVolume claims req's volume for req's alloc on this node, and
	// answers with the volume as the claim left it.
	ClaimVolume(ctx context.Context, req csi.ClaimRequest) (*model.CSIVolume, error)
	// ReleaseVolume moves the claim of c.AllocID to c.State (ready-to-free
	// frees it; an earlier state records a release that is stuck, with
	// c.LastError), and answers with the volume as the release left it
	// (nil, and no error, for a volume that is not registered).
	ReleaseVolume(ctx context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error)
}

// Attachments is the fleet's record of every node's attachments (cluster
// mode; the fleet's catalog, csi/catalog/model.Fleet, satisfies it). An
// attachment is recorded before ControllerPublishVolume is sent and
// forgotten only after ControllerUnpublishVolume has succeeded, so a node
// that may hold the volume always has one, and the plugin's node ID is
// kept with it, so that any node that runs the controller can detach the
// volume from a node that is down. Its errors are classed as Catalog's
// are; a refused attachment (another node holds that of a single-node
// volume) matches ErrClaimRefused, and a detach from a node that is up or
// holds a claim (errclass.Conflict) ErrInUse.
type Attachments interface {
	GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error)
	// Attach records a (a.NodeID is the attaching node).
	Attach(ctx context.Context, namespace, id string, a *model.Attachment) (*model.CSIVolume, error)
	// Detach forgets the attachment to node.
	Detach(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error)
	// MarkDetaching marks the attachment to node, a node that is down and
	// holds no claim on the volume, as being detached by this node.
	MarkDetaching(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error)
}

// Defaults of Config.
const (
	DefaultRPCTimeout       = time.Minute
	DefaultOperationTimeout = 2 * time.Minute
	DefaultName             = "csi-volume-manager"
	// DefaultStatsConcurrency is Config.StatsConcurrency's default.
	DefaultStatsConcurrency = 4
	// DefaultSweepInterval is Config.SweepInterval's default.
	DefaultSweepInterval = time.Minute
)

// DefaultRetry is the GC step's backoff for a volume whose operation failed:
// 1s, doubling, up to 5 minutes; it never gives up (a give-up retries at
// MaxDelay).
var DefaultRetry = supervisor.Spec{
	MaxRestarts: 1 << 20, Within: 24 * time.Hour,
	InitialDelay: time.Second, MaxDelay: 5 * time.Minute, Multiplier: 2, Jitter: 0.1,
}

// Config configures the volume manager. Bucket, Catalog, Registry and Root
// are required; a zero duration means its default, a negative one is refused.
type Config struct {
	// Bucket holds the mount records: the Bucket of the agent's store.
	Bucket storage.Bucket
	// Catalog grants and releases claims and describes volumes.
	Catalog Catalog
	// Attachments records attachments in the fleet (cluster mode); nil on
	// a single node, where the volume's record is enough.
	Attachments Attachments
	// Registry gives the current allocation, and so the socket, of each
	// csi-node and csi-controller plugin.
	Registry *registry.Registry
	// Root is the absolute directory under which each plugin gets
	// <Root>/<plugin>/staging and <Root>/<plugin>/per-alloc.
	Root string
	// RPCTimeout bounds each RPC (default DefaultRPCTimeout).
	RPCTimeout time.Duration
	// OperationTimeout is the deadline of a whole operation, and of its
	// caller's wait (default DefaultOperationTimeout).
	OperationTimeout time.Duration
	// Retry is the GC step's backoff per volume (default DefaultRetry).
	Retry supervisor.Spec
	// Clock drives the GC step; nil means the real clock.
	Clock supervisor.Clock
	// MountInfoPath is the mount table read at start (default
	// /proc/self/mountinfo).
	MountInfoPath string
	// Logger receives what the manager does; nil discards it.
	Logger hclog.Logger
	// Name is the actor's name (default DefaultName).
	Name string
	// NodeID is this node as the catalog's claims name it. When set, a
	// reconcile takes down a publish whose claim the catalog gives to
	// another node (see SetStanding).
	NodeID string
	// OnEvent, when set, hears what becomes of each mount when the node's
	// standing in its fleet changes, and when a reconcile finds a claim
	// gone. It is called from the manager's goroutines, one at a time per
	// volume, and must not block.
	OnEvent func(Event)
	// StatsInterval is how often NodeGetVolumeStats is asked of each
	// published volume whose node plugin advertises GET_VOLUME_STATS, each
	// round jittered by a tenth; zero asks never (the default). Its
	// answers are VolumeStats' samples, and a change of the volume's
	// condition is recorded and told to OnEvent.
	StatsInterval time.Duration
	// StatsConcurrency bounds the stats RPCs in flight at once (default
	// DefaultStatsConcurrency).
	StatsConcurrency int
	// StatsSupported says whether the node plugin named plugin advertises
	// GET_VOLUME_STATS, from what is known of it without an RPC (its latest
	// fingerprint): the periodic stats ask only those, so a plugin without
	// the capability costs nothing. Nil asks none.
	StatsSupported func(plugin string) bool
	// SweepInterval is how often the manager sweeps the directories no
	// volume uses (default DefaultSweepInterval): the staging directories
	// of volumes that are no longer staged and have no operation running
	// or waiting, and the empty per-alloc directories (the alloc's, its
	// namespaces' and the empty targets in them) of allocs with no mount
	// and no operation running or waiting. Until
	// then a volume's staging directory stays for its next mount.
	SweepInterval time.Duration
}

// validate refuses a config that cannot work.
func (c Config) validate() error {
	var problems []string
	if c.Bucket == nil {
		problems = append(problems, "Bucket is required")
	}
	if c.Catalog == nil {
		problems = append(problems, "Catalog is required")
	}
	if c.Registry == nil {
		problems = append(problems, "Registry is required")
	}
	if !filepath.IsAbs(c.Root) {
		problems = append(problems, fmt.Sprintf("Root %q must be an absolute path", c.Root))
	}
	if c.RPCTimeout < 0 || c.OperationTimeout < 0 || c.StatsInterval < 0 || c.SweepInterval < 0 {
		problems = append(problems, "RPCTimeout, OperationTimeout, StatsInterval and SweepInterval must not be negative (durations are time.Duration: write 2 * time.Minute)")
	}
	if c.StatsConcurrency < 0 {
		problems = append(problems, "StatsConcurrency must not be negative (0 means its default)")
	}
	if err := c.Retry.Validate(); c.Retry.Within != 0 && err != nil {
		problems = append(problems, "Retry: "+err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: config: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// withDefaults fills in every zero field.
func (c Config) withDefaults() Config {
	c.Root = filepath.Clean(c.Root)
	if c.RPCTimeout == 0 {
		c.RPCTimeout = DefaultRPCTimeout
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.StatsConcurrency == 0 {
		c.StatsConcurrency = DefaultStatsConcurrency
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.Retry.Within == 0 {
		c.Retry = DefaultRetry
	}
	c.Retry = c.Retry.WithDefaults()
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.MountInfoPath == "" {
		c.MountInfoPath = mountinfo.DefaultPath
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Logger = c.Logger.Named("volumes")
	if c.Name == "" {
		c.Name = DefaultName
	}
	return c
}

// realClock is the clock of package time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) supervisor.Stopper { return time.AfterFunc(d, f) }
