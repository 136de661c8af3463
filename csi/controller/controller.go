// Package controller runs the CSI operations that need a plugin's
// controller service and own no node state: create, delete and expand a
// volume, and create, delete and list snapshots.
//
// A Controller is a plain Go value, not an actor: it owns no state. For
// each operation it:
//  1. looks up the current csi-controller allocation of the plugin in the
//     registry's snapshot, and dials its unix socket;
//  2. checks that the controller advertises the capability the operation
//     needs;
//  3. sends the RPCs;
//  4. writes the outcome to the catalog, through the small [Catalog]
//     interface.
//
// The catalog is the authority on volumes. The plugin is the authority on
// what exists on the storage side. Every step is safe to run again:
// CreateVolume is idempotent by name, and DeleteVolume treats NotFound as
// done. The catalog's Deleting marker survives a crash, so that delete
// runs again.
//
// Every RPC has its own timeout (Config.RPCTimeout). A whole operation has
// a deadline (Config.OperationTimeout, default 2 min). An operation is not
// tied to its caller's context. A caller that goes away does not stop it
// half way: it runs to its end or its deadline. The caller's answer comes
// within the deadline.
//
// An error names the volume of the operation first ("default/db: ..."),
// once. Secrets travel from the request or the catalog to the plugin only:
// no error and no log line of this package carries a secret's value.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/registry"
)

// DefaultOperationTimeout bounds a whole operation unless
// Config.OperationTimeout says otherwise.
const DefaultOperationTimeout = 2 * time.Minute

// Catalog is what the controller operations need of the catalog; the
// catalog.Catalog facade implements it.
type Catalog interface {
	GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error)
	RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error)
	MarkVolumeDeleting(ctx context.Context, namespace, id string) (*model.CSIVolume, error)
	RecordVolumeCapacity(ctx context.Context, namespace, id string, capacityBytes int64) (*model.CSIVolume, error)
	RecordVolumeModify(ctx context.Context, namespace, id string, params map[string]string) (*model.CSIVolume, error)
	DeregisterVolume(ctx context.Context, namespace, id string) error
	// CheckRoom refuses, with model.ErrVolumeLimit, a volume the catalog
	// has no room for, so that create refuses it before the plugin acts.
	CheckRoom(namespace, id string) error
}

// Plugins finds the plugins' allocations; *registry.Registry implements it.
type Plugins interface {
	Snapshot() *registry.Snapshot
}

// NodeExpander finishes an expansion on the nodes where a volume is staged
// or published (NodeExpandVolume). The volume manager implements it; the
// agent wires the two. ExpandOnNodes reports whether any node expanded the
// volume: false, without error, when it is published on none (a node that
// publishes it later gets the new size from the storage).
type NodeExpander interface {
	ExpandOnNodes(ctx context.Context, v *model.CSIVolume, capacityBytes int64) (bool, error)
}

// Config configures a Controller. Catalog and Plugins are required.
type Config struct {
	Catalog Catalog
	Plugins Plugins
	// NodeExpander, when set, is called after an expansion whose plugin
	// answered node_expansion_required; when nil, Expand only reports it.
	NodeExpander NodeExpander
	// RPCTimeout bounds each RPC and each dial (default csi.DefaultRPCTimeout).
	RPCTimeout time.Duration
	// OperationTimeout bounds a whole operation (default
	// DefaultOperationTimeout).
	OperationTimeout time.Duration
	// Logger receives a line per finished operation; nil discards them.
	Logger hclog.Logger
}

func (c Config) validate() error {
	switch {
	case c.Catalog == nil:
		return fmt.Errorf("%w: Config.Catalog must be set", ErrInvalidConfig)
	case c.Plugins == nil:
		return fmt.Errorf("%w: Config.Plugins must be set (the agent's registry)", ErrInvalidConfig)
	case c.RPCTimeout < 0 || c.OperationTimeout < 0:
		return fmt.Errorf("%w: RPCTimeout (%v) and OperationTimeout (%v) must not be negative (zero means the default)",
			ErrInvalidConfig, c.RPCTimeout, c.OperationTimeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.RPCTimeout == 0 {
		c.RPCTimeout = csi.DefaultRPCTimeout
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Controller runs controller operations; it is safe for concurrent use.
type Controller struct {
	cfg Config
	log hclog.Logger
}

// New returns a Controller, or an error matching ErrInvalidConfig.
func New(cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Controller{cfg: cfg, log: cfg.Logger.Named("controller")}, nil
}

// operation returns the context of one operation: detached from the
// caller's cancellation, bounded by the operation deadline.
func (c *Controller) operation(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OperationTimeout)
}

// capability is one controller capability an operation needs.
type capability struct {
	name string
	has  func(csi.ControllerCapabilities) bool
}

var (
	capCreateDelete = capability{"CREATE_DELETE_VOLUME", func(c csi.ControllerCapabilities) bool { return c.CreateDeleteVolume }}
	capExpand       = capability{"EXPAND_VOLUME", func(c csi.ControllerCapabilities) bool { return c.ExpandVolume }}
	capSnapshots    = capability{"CREATE_DELETE_SNAPSHOT", func(c csi.ControllerCapabilities) bool { return c.CreateDeleteSnapshot }}
	capList         = capability{"LIST_SNAPSHOTS", func(c csi.ControllerCapabilities) bool { return c.ListSnapshots }}
	capClone        = capability{"CLONE_VOLUME", func(c csi.ControllerCapabilities) bool { return c.CloneVolume }}
	capCapacity     = capability{"GET_CAPACITY", func(c csi.ControllerCapabilities) bool { return c.GetCapacity }}
	capModify       = capability{"MODIFY_VOLUME", func(c csi.ControllerCapabilities) bool { return c.ModifyVolume }}
)

// connect dials the current csi-controller allocation of plugin and checks
// that it advertises every capability in need. The caller closes the client.
// A socket that does not exist, or that nothing listens on, fails at once
// (csi.Options.FailFast) with csi.ErrConnect, as the node path does: the
// plugin is gone, and waiting out the dial timeout would not bring it back.
func (c *Controller) connect(ctx context.Context, plugin, what string, need ...capability) (*csi.Client, error) {
	info, ok := c.cfg.Plugins.Snapshot().Current(csi.TypeController, plugin)
	if !ok {
		return nil, fmt.Errorf("%s: %w: %q is not registered as %s; start the plugin's controller service",
			what, ErrNoController, plugin, csi.TypeController)
	}
	socket := info.GetConnection().GetSocketPath()
	if socket == "" {
		return nil, fmt.Errorf("%s: %w: plugin %q (alloc %s) has no unix socket",
			what, ErrNoController, plugin, info.GetAllocId())
	}
	dialCtx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	client, err := csi.Dial(dialCtx, socket, csi.Options{RPCTimeout: c.cfg.RPCTimeout, FailFast: true})
	if err != nil {
		return nil, errclass.Also(fmt.Errorf("%s: plugin %q (alloc %s): %w", what, plugin, info.GetAllocId(), err), ErrControllerUnreachable)
	}
	caps, err := client.ControllerCapabilitiesCached(ctx)
	if err == nil {
		for _, n := range need {
			if !n.has(caps) {
				err = fmt.Errorf("%w: plugin %q does not advertise %s", ErrUnsupported, plugin, n.name)
				break
			}
		}
	}
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return client, nil
}

// Sentinel errors of the controller operations. Errors also wrap the csi
// package's sentinels: the plugin's gRPC code (csi.ErrNotFound, ...) and
// the catalog's (model.ErrVolumeInUse, ...).
var (
	// ErrInvalidConfig: New was given a bad Config.
	ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid config")
	// ErrInvalidRequest: the request was malformed; the error names the
	// field. Nothing was sent and nothing changed.
	ErrInvalidRequest = errclass.New(errclass.Invalid, "invalid request")
	// ErrNoController: the plugin has no csi-controller allocation in the
	// registry. Nothing changed.
	ErrNoController = errclass.New(errclass.NotFound, "no controller plugin")
	// ErrControllerUnreachable: the plugin's csi-controller allocation
	// could not be dialled (its socket is gone, or nothing listens on it).
	// Nothing was sent and nothing changed; the error also matches
	// csi.ErrConnect.
	ErrControllerUnreachable = errclass.New(errclass.Unavailable, "controller unreachable")
	// ErrUnsupported: the plugin's controller does not advertise the
	// capability the operation needs. Nothing changed.
	ErrUnsupported = errclass.New(errclass.Unsupported, "not supported by the plugin")
	// ErrVolumeExists: a create names a volume that the catalog holds with
	// another plugin or other modes, or that was registered rather than
	// created. Nothing changed.
	ErrVolumeExists = errclass.New(errclass.Conflict, "volume exists")
)

// invalid returns an error matching ErrInvalidRequest for each problem,
// joined; nil for none.
func invalid(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = fmt.Errorf("%w: %s", ErrInvalidRequest, p)
	}
	return errors.Join(errs...)
}

// checkVolumeKey adds the problems of a namespace and volume ID.
func checkVolumeKey(namespace, id string, problems *[]string) {
	if namespace != "" {
		if err := registry.ValidateID("namespace", namespace); err != nil {
			*problems = append(*problems, err.Error())
		}
	}
	if err := registry.ValidateID("volume ID", id); err != nil {
		*problems = append(*problems, err.Error())
	}
}
