package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/storage"
)

// DefaultName is the catalog actor's name.
const DefaultName = "csi-catalog"

// Config configures the catalog. Bucket and NodeID are required.
type Config struct {
	// Bucket is where the catalog keeps its records: the Bucket of
	// the agent's storage.Bolt file, or a bucket of a storage.Memory in tests.
	Bucket storage.Bucket
	// NodeID is this node: the node of the fingerprints the catalog takes
	// and of the claims that name none.
	NodeID string
	// Manager is the CSI manager to subscribe to for fingerprints; nil
	// means none (fingerprints can still be sent to the catalog's PID).
	Manager *actor.PID
	// Logger receives the catalog's log lines; nil discards them.
	Logger hclog.Logger
	// Name is the actor's name in the actor system (default DefaultName).
	Name string
	// MaxVolumes bounds the volumes of the catalog, every namespace
	// together (default model.DefaultMaxVolumes; negative is refused). Registering
	// a new volume beyond it is refused with model.ErrVolumeLimit and changes
	// nothing; a volume already there can always be registered again.
	// Volumes restored at start count, even beyond the limit.
	MaxVolumes int
	// Fleet, when set, is the cluster-wide catalog (cluster mode): every
	// command and query on volumes and claims, and the plugin listing,
	// defer to it, and this node's fingerprints are forwarded to it. The
	// local store keeps this node's fingerprints only; the fleet keeps its
	// own volume limit (fleet.Config.MaxVolumes). Nil: this node's catalog,
	// as always.
	Fleet model.Fleet
}

// validate checks the raw config: zero means a default, negative is an error.
func (cfg Config) validate() error {
	if cfg.Bucket == nil {
		return model.Refusef(model.ErrInvalid, "config needs a storage bucket")
	}
	if err := names.Check("node ID", cfg.NodeID); err != nil {
		return model.Refusal(model.ErrInvalid, err)
	}
	if cfg.MaxVolumes < 0 {
		return model.Refusef(model.ErrInvalid, "MaxVolumes (agent flag -max-volumes) is %d; give a positive number, or 0 for the default %d",
			cfg.MaxVolumes, model.DefaultMaxVolumes)
	}
	return nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Logger = cfg.Logger.Named("catalog")
	cfg.Name = cmp.Or(cfg.Name, DefaultName)
	cfg.MaxVolumes = cmp.Or(cfg.MaxVolumes, model.DefaultMaxVolumes)
	return cfg
}

// Catalog is the Go facade over the catalog actor, for callers that are not
// actors; it satisfies the volume manager's Catalog (csi/volumes), which
// takes the model's own types. Its methods are safe for
// concurrent use; each waits for the actor's answer or for its ctx to end.
// Writes return once durable; reads answer from the last durable state.
// Actors talk to the catalog directly at PID.
type Catalog struct {
	system *actor.ActorSystem
	pid    *actor.PID
	log    hclog.Logger
	// durable is the actor's last durable state, read by CheckRoom.
	durable    *atomic.Pointer[catalogState]
	maxVolumes int
	// fleet is Config.Fleet: in cluster mode, CheckRoom asks it.
	fleet model.Fleet

	// mu orders calls against Shutdown: a call made before Shutdown is
	// answered; one after it gets ErrShutdown without reaching the actor.
	mu     sync.RWMutex
	closed bool
}

// Start restores the catalog from cfg.Bucket and starts its actor in
// system. A record that cannot be restored is an error matching
// model.ErrCorrupt and storage.ErrCorrupt that names the record and the
// agent's -reset-corrupt-state: the catalog never starts silently empty. Health is not
// trusted across a restart: every fingerprint restored as healthy is made
// unhealthy (durably, under a new index) until the CSI manager fingerprints
// the plugin again, so no claim is granted on a plugin that may be gone.
func Start(system *actor.ActorSystem, cfg Config) (*Catalog, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	state, err := loadCatalog(cfg.Bucket)
	if err != nil {
		return nil, err
	}
	ops, err := state.commit(state.distrustHealth())
	if err == nil && len(ops) > 0 {
		err = cfg.Bucket.Apply(append(ops, catalogIndexOp(state.index)))
	}
	if err != nil {
		return nil, model.Refusef(model.ErrStore, "start: %v", err)
	}
	durable := &atomic.Pointer[catalogState]{}
	durable.Store(state)
	props := actor.PropsFromProducer(func() actor.Actor { return newCatalogActor(cfg, durable) },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger)))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("start actor %q: %w", cfg.Name, err)
	}
	cfg.Logger.Info("catalog started", "volumes", len(state.volumes), "plugins", len(state.plugins),
		"index", state.index, "node", cfg.NodeID)
	return &Catalog{system: system, pid: pid, log: cfg.Logger, durable: durable, maxVolumes: cfg.MaxVolumes, fleet: cfg.Fleet}, nil
}

// CheckRoom reports whether a volume (namespace, id) could be registered
// now as far as the volume limit goes: nil when it is already in the
// catalog or the catalog holds fewer than MaxVolumes volumes, else an error
// matching model.ErrVolumeLimit. It reads the last durable state (in cluster
// mode, the fleet's volumes in etcd), so a caller
// (the controller, before it asks a plugin to create a volume) can refuse
// early; RegisterVolume checks again and has the last word.
func (c *Catalog) CheckRoom(namespace, id string) error {
	key, err := catalogVolumeKey(namespace, id)
	if err != nil {
		return err
	}
	if c.fleet != nil {
		ctx, cancel := context.WithTimeout(context.Background(), checkRoomTimeout)
		defer cancel()
		return c.fleet.CheckRoom(ctx, key.namespace, key.id)
	}
	return c.durable.Load().checkRoom(key, c.maxVolumes)
}

// checkRoomTimeout bounds CheckRoom's look at a fleet.
const checkRoomTimeout = 10 * time.Second

// PID is the catalog actor's address, for actors that send it commands,
// queries and fingerprints directly.
func (c *Catalog) PID() *actor.PID { return c.pid }

// RegisterVolume adds v (its description: ID, namespace, plugin, modes,
// topologies) or changes the description of a volume with no claims, and
// returns the volume as registered. Registering the same description again
// changes nothing. v must carry no claims; its health and indexes are set
// by the catalog. A plugin the catalog has never seen is allowed: the
// volume is unschedulable until the plugin is fingerprinted healthy. An
// empty ExternalID becomes the volume's ID; a plugin volume (plugin,
// external ID) that another catalog volume holds is refused with
// model.ErrVolumeConflict naming it, and so is a registration without Created
// over a volume created through the controller. A volume being deleted is
// refused with model.ErrVolumeDeleting.
func (c *Catalog) RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error) {
	if v == nil {
		return nil, model.Refusef(model.ErrInvalid, "volume must not be nil")
	}
	resp, err := catalogCall[*messages.RegisterVolumeResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.RegisterVolume{Volume: v.Proto(), ReplyTo: replyTo}
	})
	return volumeAnswer(resp, err)
}

// DeregisterVolume forgets a volume; one with claims is refused with
// model.ErrVolumeInUse. An empty namespace means the default one.
func (c *Catalog) DeregisterVolume(ctx context.Context, namespace, id string) error {
	_, err := catalogCall[*messages.DeregisterVolumeResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.DeregisterVolume{Namespace: namespace, VolumeId: id, ReplyTo: replyTo}
	})
	return err
}

// ListVolumes returns the stubs of the volumes of namespace (all of them
// when empty), sorted by namespace, then ID.
func (c *Catalog) ListVolumes(ctx context.Context, namespace string) ([]*model.CSIVolumeStub, error) {
	resp, err := catalogCall[*messages.ListVolumesResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.ListVolumesRequest{Namespace: namespace, ReplyTo: replyTo}
	})
	if err != nil {
		return nil, err
	}
	out := make([]*model.CSIVolumeStub, len(resp.GetVolumes()))
	for i, m := range resp.GetVolumes() {
		out[i] = model.VolumeStubFromProto(m)
	}
	return out, nil
}

// GetVolume returns a volume with its claims, or model.ErrVolumeNotFound. An
// empty namespace means the default one.
func (c *Catalog) GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	resp, err := catalogCall[*messages.GetVolumeResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.GetVolumeRequest{Namespace: namespace, VolumeId: id, ReplyTo: replyTo}
	})
	return volumeAnswer(resp, err)
}

// Claim claims req's volume for req's alloc on this node: a read claim for
// a read-only usage, a write claim otherwise. The volume manager calls it
// before staging or publishing. The claim is
// refused with ErrClaimRefused (and the catalog model's sentinel, such as
// model.ErrVolumeMaxClaims for a second writer) when the volume's claims
// or health do not allow it, or when req names another plugin or other
// modes than the volume was registered with (empty ones are not checked).
// An unregistered volume is model.ErrVolumeNotFound. Claiming again what the
// alloc holds changes nothing.
func (c *Catalog) Claim(ctx context.Context, req csi.ClaimRequest) error {
	_, err := c.ClaimVolume(ctx, req)
	return err
}

// ClaimVolume is Claim, answering with the volume as the claim left it
// (in a fleet, as the claim wrote it to etcd): no read after it.
func (c *Catalog) ClaimVolume(ctx context.Context, req csi.ClaimRequest) (*model.CSIVolume, error) {
	resp, err := catalogCall[*messages.ClaimVolumeResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.ClaimVolume{
			Namespace:      req.Namespace,
			VolumeId:       req.VolumeID,
			AllocId:        req.AllocID,
			Mode:           string(req.Mode()),
			PluginId:       req.Plugin,
			AccessMode:     string(req.Usage.AccessMode),
			AttachmentMode: string(req.Usage.AttachmentMode),
			ReplyTo:        replyTo,
		}
	})
	return volumeAnswer(resp, err)
}

// Release frees the claim of req's alloc on req's volume, as ReleaseClaim
// does with the state ready-to-free.
func (c *Catalog) Release(ctx context.Context, req csi.ClaimRequest) error {
	return c.ReleaseClaim(ctx, req.Namespace, req.VolumeID, &model.Claim{AllocID: req.AllocID})
}

// ReleaseClaim moves the claim of claim.AllocID on the volume (namespace,
// id) to claim.State: ready-to-free (or empty) frees it, an earlier state
// records a release that is stuck there, with claim.LastError. The volume
// manager calls it once the volume is unpublished, and retries a failed
// unmount until it succeeds, so releasing is idempotent: a claim that is
// not held, or a volume the catalog does not know (it cannot hold claims),
// changes nothing and returns nil. (ReleaseVolume sent as a message is
// stricter: an unknown volume is model.ErrVolumeNotFound.)
func (c *Catalog) ReleaseClaim(ctx context.Context, namespace, id string, claim *model.Claim) error {
	_, err := c.ReleaseVolume(ctx, namespace, id, claim)
	return err
}

// ReleaseVolume is ReleaseClaim, answering with the volume as the release
// left it, or nil when it is not registered (no error then).
func (c *Catalog) ReleaseVolume(ctx context.Context, namespace, id string, claim *model.Claim) (*model.CSIVolume, error) {
	resp, err := catalogCall[*messages.ReleaseVolumeResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.ReleaseVolume{Namespace: namespace, VolumeId: id, AllocId: claim.AllocID,
			State: string(claim.State), LastError: claim.LastError, ReplyTo: replyTo}
	})
	if errors.Is(err, model.ErrVolumeNotFound) {
		return nil, nil
	}
	return volumeAnswer(resp, err)
}

// Plugins returns every plugin the catalog knows, sorted by ID, with the
// fingerprints of their instances and their health counts.
func (c *Catalog) Plugins(ctx context.Context) ([]*model.CSIPlugin, error) {
	resp, err := catalogCall[*messages.ListCatalogPluginsResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.ListCatalogPluginsRequest{ReplyTo: replyTo}
	})
	if err != nil {
		return nil, err
	}
	out := make([]*model.CSIPlugin, len(resp.GetPlugins()))
	for i, m := range resp.GetPlugins() {
		if out[i], err = model.PluginFromProto(m); err != nil {
			return nil, fmt.Errorf("plugin %q in the answer: %w", m.GetId(), err)
		}
	}
	return out, nil
}

// Shutdown lets the writes already accepted become durable, then stops the
// catalog actor. Later calls return ErrShutdown at once; a second
// Shutdown returns nil. It does not close the store, which its owner shares.
func (c *Catalog) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()

	_, err := catalogAsk[*messages.ShutdownCatalogResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.ShutdownCatalog{ReplyTo: replyTo}
	})
	if stopErr := c.system.Root.PoisonFuture(c.pid).Wait(); err == nil && stopErr != nil {
		err = fmt.Errorf("stop actor: %w", stopErr)
	}
	c.log.Info("catalog shut down")
	return err
}

// catalogCall asks the catalog actor, unless the catalog is shut down.
func catalogCall[R proto.Message](ctx context.Context, c *Catalog, build func(replyTo *actor.PID) proto.Message) (R, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		var none R
		return none, model.Refusef(ErrShutdown, "the request came after Shutdown")
	}
	return catalogAsk[R](ctx, c, build)
}

// catalogAsk sends the message build makes to the catalog actor and waits
// for its answer, an R, and returns it with the error it carries.
func catalogAsk[R proto.Message](ctx context.Context, c *Catalog, build func(replyTo *actor.PID) proto.Message) (R, error) {
	var none R
	answer, err := actors.Ask(ctx, c.system, c.pid, func(replyTo *actor.PID) any { return build(replyTo) })
	switch {
	case errors.Is(err, actors.ErrTargetGone):
		return none, model.Refusef(ErrShutdown, "its actor is gone")
	case err != nil:
		return none, fmt.Errorf("waiting for the catalog's answer: %w", err)
	}
	resp, ok := answer.(R)
	if !ok {
		return none, fmt.Errorf("unexpected answer %T", answer)
	}
	if failed, ok := any(resp).(interface{ GetError() *messages.Error }); ok {
		return resp, messages.ErrorFromProto(failed.GetError())
	}
	return resp, nil
}

// volumeAnswer decodes the volume an answer carries.
func volumeAnswer(resp interface {
	GetVolume() *messages.CatalogVolume
}, err error) (*model.CSIVolume, error) {
	if err != nil {
		return nil, err
	}
	return model.VolumeFromProto(resp.GetVolume()), nil
}
