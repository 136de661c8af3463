package volumes

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor"
)

// Plugin types the volume manager looks up in the registry.
const (
	NodePluginType       = "csi-node"
	ControllerPluginType = "csi-controller"
)

// Volume is what the volume manager needs of a catalog volume.
type Volume struct {
	Namespace, ID string
	// ExternalID is the plugin's volume ID; empty means ID.
	ExternalID     string
	PluginID       string
	AccessMode     model.AccessMode
	AttachmentMode model.AttachmentMode
	// Context is the volume_context sent to the plugin.
	Context map[string]string
	// Secrets are sent to the plugin; never logged nor returned.
	Secrets    map[string]string
	FSType     string
	MountFlags []string
	// Claims maps each alloc holding a claim (read or write, past claims
	// included) to its claim: its mode and its node.
	Claims map[string]model.Claim
}

// externalID is the plugin's volume ID.
func (v *Volume) externalID() string {
	if v.ExternalID != "" {
		return v.ExternalID
	}
	return v.ID
}

// Release is how far a claim's release has come, as the catalog records it
// in the volume's past claims.
type Release struct {
	Namespace, ID, AllocID string
	// State is model.ClaimStateReadyToFree to free the claim, or an
	// earlier state to record a release that is stuck (with LastError).
	State     model.ClaimState
	LastError string
}

// Catalog is the part of the CSI catalog the volume manager uses. Errors
// for an unknown volume match ErrVolumeNotFound, refused claims
// ErrClaimRefused. Releasing a claim that is not held returns nil.
type Catalog interface {
	GetVolume(ctx context.Context, namespace, id string) (*Volume, error)
	Claim(ctx context.Context, namespace, id, alloc string, mode model.ClaimMode) error
	Release(ctx context.Context, r Release) error
}

// Attachments is what a Catalog that records attachments for a fleet of
// nodes offers (cluster mode); the volume manager uses it when its Catalog
// implements it. An attachment is recorded before ControllerPublishVolume
// is sent and forgotten only after ControllerUnpublishVolume has
// succeeded, so a node that may hold the volume always has one, and the
// plugin's node ID is kept with it, so that any node that runs the
// controller can detach the volume from a node that is down.
type Attachments interface {
	// RecordAttachment records that this node, whose plugin node ID is
	// externalNodeID, is attaching the volume (attached false) or has
	// attached it. A refusal (another node holds the attachment of a
	// single-node volume) matches ErrClaimRefused.
	RecordAttachment(ctx context.Context, namespace, id, externalNodeID string, attached bool) error
	// ForgetAttachment records that the volume is detached from the fleet
	// node node: this one when node is empty, or the one DetachTarget
	// named.
	ForgetAttachment(ctx context.Context, namespace, id, node string) error
	// DetachTarget is the plugin node ID an operator's detach of the
	// volume from node sends to the controller. For a node of the fleet
	// with a recorded attachment (named by its node ID or its plugin node
	// ID), it is the recorded plugin node ID, with that fleet node as
	// recorded, once the node is down and holds no claim on the volume
	// (ErrInUse while it is up or holds one); any other name is taken as a
	// plugin node ID, and recorded is empty.
	DetachTarget(ctx context.Context, namespace, id, node string) (target, recorded string, err error)
}

// Defaults of Config.
const (
	DefaultRPCTimeout       = time.Minute
	DefaultOperationTimeout = 2 * time.Minute
	DefaultName             = "csi-volume-manager"
	// DefaultStatsConcurrency is Config.StatsConcurrency's default.
	DefaultStatsConcurrency = 4
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
	// DefaultMountInfoPath).
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
	if c.RPCTimeout < 0 || c.OperationTimeout < 0 || c.StatsInterval < 0 {
		problems = append(problems, "RPCTimeout, OperationTimeout and StatsInterval must not be negative (durations are time.Duration: write 2 * time.Minute)")
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
	if c.Retry.Within == 0 {
		c.Retry = DefaultRetry
	}
	c.Retry = c.Retry.WithDefaults()
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.MountInfoPath == "" {
		c.MountInfoPath = DefaultMountInfoPath
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
