package volumes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
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
	"github.com/plugvisor/plugvisor/registry"
)

// NodePluginType is the registry type of CSI node plugins, whose volumes the
// volume manager mounts.
const NodePluginType = csi.TypeNode

// Defaults of [VolumesConfig].
const (
	// DefaultVolumeRPCTimeout bounds each attempt of a volume RPC; staging
	// may format a disk (Nomad allows two minutes too).
	DefaultVolumeRPCTimeout = 2 * time.Minute
	// DefaultDialTimeout bounds connecting to a plugin's socket.
	DefaultDialTimeout = 30 * time.Second
	// DefaultRetryAttempts is how many times a volume RPC is tried in all.
	DefaultRetryAttempts = 4
	// DefaultRetryBackoff is the wait before the first retry; it doubles
	// with each further one.
	DefaultRetryBackoff = 100 * time.Millisecond
	// DefaultRetryBackoffMax caps the wait between retries.
	DefaultRetryBackoffMax = 5 * time.Second
	// DefaultVolumesName is the volume manager actor's name.
	DefaultVolumesName = "csi-volumes"
)

// shutdownTimeout bounds how long Shutdown waits for the actor's answer:
// the RPCs in flight are cancelled, so they end at once unless a Claimer
// ignores its context.
const shutdownTimeout = 30 * time.Second

// VolumesConfig configures the volume manager. Registry and Root are
// required; a zero duration or count means its default, a negative one is
// refused.
type VolumesConfig struct {
	// Registry gives the current allocation, and so the socket, of each
	// csi-node plugin.
	Registry *registry.Registry
	// Root is the absolute directory under which each plugin gets
	// <Root>/<plugin>/staging and <Root>/<plugin>/per-alloc. It is created
	// if missing. The paths are passed to the plugin as they are: the
	// plugin must see the host's file system at Root.
	Root string
	// Claimer decides claims and releases; default a new [LocalClaimer].
	Claimer csi.Claimer
	// RPCTimeout bounds each attempt of a volume RPC (default
	// DefaultVolumeRPCTimeout).
	RPCTimeout time.Duration
	// DialTimeout bounds connecting to a plugin (default DefaultDialTimeout).
	DialTimeout time.Duration
	// RetryAttempts is how many times an RPC answered with Unavailable,
	// DeadlineExceeded or Aborted is tried in all (default DefaultRetryAttempts).
	RetryAttempts int
	// RetryBackoff is the wait before the first retry, doubled for each
	// further one (default DefaultRetryBackoff) up to RetryBackoffMax
	// (default DefaultRetryBackoffMax, or RetryBackoff when longer).
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// Logger receives what the volume manager does; nil discards it.
	Logger hclog.Logger
	// Name is the actor's name in the actor system (default DefaultVolumesName).
	Name string
}

// withDefaults checks c and fills in its defaults.
func (c VolumesConfig) withDefaults() (VolumesConfig, error) {
	var problems []string
	if c.Registry == nil {
		problems = append(problems, "a registry is required")
	}
	if !filepath.IsAbs(c.Root) {
		problems = append(problems, fmt.Sprintf("root %q must be an absolute path", c.Root))
	}
	if c.RPCTimeout < 0 || c.DialTimeout < 0 || c.RetryBackoff < 0 || c.RetryBackoffMax < 0 || c.RetryAttempts < 0 {
		problems = append(problems, "durations and retry attempts must not be negative")
	}
	if len(problems) > 0 {
		return c, fmt.Errorf("csi: volumes config: %s", strings.Join(problems, "; "))
	}
	c.Root = filepath.Clean(c.Root)
	if c.Claimer == nil {
		c.Claimer = NewLocalClaimer()
	}
	c.RPCTimeout = cmp.Or(c.RPCTimeout, DefaultVolumeRPCTimeout)
	c.DialTimeout = cmp.Or(c.DialTimeout, DefaultDialTimeout)
	c.RetryAttempts = cmp.Or(c.RetryAttempts, DefaultRetryAttempts)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.RetryBackoffMax = max(cmp.Or(c.RetryBackoffMax, DefaultRetryBackoffMax), c.RetryBackoff)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Logger = c.Logger.Named("volumes")
	if c.Name == "" {
		c.Name = DefaultVolumesName
	}
	return c, nil
}

// Volumes is the volume manager: one actor per agent that mounts the
// volumes of every csi-node plugin, and its Go facade. Actors send it
// messages.MountVolume and messages.UnmountVolume at [Volumes.PID]; Go
// callers use a [Mounter] from [Volumes.MounterForPlugin]. Its methods are
// safe for concurrent use.
type Volumes struct {
	system   *actor.ActorSystem
	pid      *actor.PID
	registry *registry.Registry
	log      hclog.Logger
	// workers counts the goroutines running plugin RPCs; Shutdown waits for them.
	workers *sync.WaitGroup
	// closed is set by Shutdown; later calls do not reach the actor. A call
	// that reaches it while it shuts down, or after, is answered with
	// ErrVolumesShutDown too.
	closed atomic.Bool
}

// StartVolumes checks cfg, creates cfg.Root, and starts the volume manager
// actor in system. Stop it with [Volumes.Shutdown].
func StartVolumes(system *actor.ActorSystem, cfg VolumesConfig) (*Volumes, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := mkdirPrivate(cfg.Root); err != nil {
		return nil, err
	}
	workers := &sync.WaitGroup{}
	a := newVolumesActor(cfg, workers)
	// The producer hands back the same actor: a panic restarts it with its
	// usage tracker intact, since the volumes it mounted stay mounted.
	props := actor.PropsFromProducer(func() actor.Actor { return a },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger)))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("csi: start volume manager %q: %w", cfg.Name, err)
	}
	cfg.Logger.Info("volume manager started", "root", cfg.Root)
	return &Volumes{system: system, pid: pid, registry: cfg.Registry, log: cfg.Logger, workers: workers}, nil
}

// PID is the volume manager actor's address, for actors that send it
// messages.MountVolume and messages.UnmountVolume.
func (v *Volumes) PID() *actor.PID { return v.pid }

// MounterForPlugin returns the mounter for the csi-node plugin name, as
// Nomad's ManagerForPlugin does. It fails with ErrPluginNotFound when no
// allocation of the plugin is registered. The mounter always talks to the
// plugin's current allocation, so it stays valid when the plugin is replaced.
func (v *Volumes) MounterForPlugin(ctx context.Context, name string) (*Mounter, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("csi: mounter for plugin %q: %w", name, err)
	}
	if err := ValidatePathID("plugin name", name); err != nil {
		return nil, err
	}
	if v.closed.Load() {
		return nil, fmt.Errorf("csi: %w", ErrVolumesShutDown)
	}
	if _, ok := v.registry.Snapshot().Current(NodePluginType, name); !ok {
		return nil, pluginNotFoundError(name)
	}
	return &Mounter{volumes: v, plugin: name}, nil
}

func pluginNotFoundError(name string) error {
	return fmt.Errorf("csi: %w: no %s plugin %q is registered", ErrPluginNotFound, NodePluginType, name)
}

// Shutdown stops the volume manager: queued mounts and unmounts are
// refused, RPCs in flight are cancelled and their callers answered, plugin
// clients are closed, and the actor stops. Mounted volumes stay mounted.
// Calls after Shutdown return ErrVolumesShutDown; a second Shutdown returns nil.
func (v *Volumes) Shutdown() error {
	if v.closed.Swap(true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	answer, err := v.ask(ctx, func(replyTo *actor.PID) proto.Message {
		return &messages.ShutdownVolumes{ReplyTo: replyTo}
	})
	if err == nil {
		err = VolumeErrorFromProto(answer.(*messages.ShutdownVolumesResponse).GetError())
	}
	if stopErr := v.system.Root.PoisonFuture(v.pid).Wait(); err == nil && stopErr != nil {
		err = fmt.Errorf("csi: stop volume manager: %w", stopErr)
	}
	v.workers.Wait()
	v.log.Info("volume manager shut down")
	return err
}

// call sends the message build makes to the actor and returns its answer,
// unless the volume manager is shut down.
func (v *Volumes) call(ctx context.Context, build func(replyTo *actor.PID) proto.Message) (any, error) {
	if v.closed.Load() {
		return nil, fmt.Errorf("csi: %w", ErrVolumesShutDown)
	}
	return v.ask(ctx, build)
}

// ask sends the message build makes to the actor and waits for its answer
// or for ctx to end. An actor that is gone means it was shut down.
func (v *Volumes) ask(ctx context.Context, build func(replyTo *actor.PID) proto.Message) (any, error) {
	answer, err := actors.Ask(ctx, v.system, v.pid, func(replyTo *actor.PID) any { return build(replyTo) })
	switch {
	case errors.Is(err, actors.ErrTargetGone):
		return nil, fmt.Errorf("csi: %w: %w", ErrVolumesShutDown, err)
	case err != nil:
		return nil, fmt.Errorf("csi: waiting for the volume manager: %w", err)
	}
	return answer, nil
}

// Mounter mounts and unmounts the volumes of one csi-node plugin for
// allocs, through the volume manager. Make one with [Volumes.MounterForPlugin].
type Mounter struct {
	volumes *Volumes
	plugin  string
}

// Plugin is the name of the plugin whose volumes m mounts.
func (m *Mounter) Plugin() string { return m.plugin }

// MountOptions are the file-system options of a mount; see [MergeMountOptions].
type MountOptions struct {
	// FSType is the file system to mount, e.g. "ext4"; empty leaves it to
	// the plugin.
	FSType string
	// MountFlags are passed to the plugin's mount, e.g. "noatime".
	MountFlags []string
}

// MergeMountOptions returns the options a mount uses: the volume's, with
// each field the request sets taking its place. A request's FSType counts
// when it is not empty; its MountFlags when they are not nil (an empty,
// non-nil list clears the volume's flags). The result shares no slice with
// its inputs; it is nil when both are.
func MergeMountOptions(volume, request *MountOptions) *MountOptions {
	if volume == nil && request == nil {
		return nil
	}
	var out MountOptions
	if volume != nil {
		out = MountOptions{FSType: volume.FSType, MountFlags: slices.Clone(volume.MountFlags)}
	}
	if request == nil {
		return &out
	}
	if request.FSType != "" {
		out.FSType = request.FSType
	}
	if request.MountFlags != nil {
		out.MountFlags = slices.Clone(request.MountFlags)
	}
	return &out
}

func (o *MountOptions) toProto() *messages.MountOptions {
	if o == nil {
		return nil
	}
	return &messages.MountOptions{FsType: o.FSType, MountFlags: slices.Clone(o.MountFlags)}
}

// VolumeSpec is what the volume manager needs to know of a volume itself
// (until the catalog tells it, issue 5): its namespace and ID, its own
// mount options and its volume context. The ID is the plugin's volume ID.
type VolumeSpec struct {
	// Namespace scopes the ID; empty means model.DefaultNamespace.
	Namespace    string
	ID           string
	MountOptions *MountOptions
	Context      map[string]string
}

// MountRequest asks to mount a volume for an alloc.
type MountRequest struct {
	Volume         VolumeSpec
	AllocID        string
	AccessMode     model.AccessMode
	AttachmentMode model.AttachmentMode
	ReadOnly       bool
	// MountOptions override the volume's, field by field (MergeMountOptions).
	MountOptions *MountOptions
	// PublishContext is what the controller's ControllerPublishVolume returned.
	PublishContext map[string]string
}

// Message returns the messages.MountVolume an actor would send to the
// volume manager for r on plugin: the mount options in it are the volume's
// merged with the request's.
func (r MountRequest) Message(plugin string) *messages.MountVolume {
	return &messages.MountVolume{
		Plugin:         plugin,
		Namespace:      r.Volume.Namespace,
		VolumeId:       r.Volume.ID,
		AllocId:        r.AllocID,
		AccessMode:     string(r.AccessMode),
		AttachmentMode: string(r.AttachmentMode),
		ReadOnly:       r.ReadOnly,
		MountOptions:   MergeMountOptions(r.Volume.MountOptions, r.MountOptions).toProto(),
		VolumeContext:  r.Volume.Context,
		PublishContext: r.PublishContext,
	}
}

// MountResult says where a mounted volume is.
type MountResult struct {
	// TargetPath is where the alloc finds the volume: a directory, or a
	// device file for a block-device attachment.
	TargetPath string
	// StagingPath is where the volume is staged; empty when the plugin
	// does not stage.
	StagingPath string
	// IsDevice is true for a block-device attachment.
	IsDevice bool
}

// MountVolume claims the volume for the alloc, stages it once per usage if
// the plugin stages, and publishes it at the alloc's target path. Mounting
// again what the alloc already mounts, the same way, returns the same
// result and sends no RPC. If ctx ends first the error says so, but the
// mount goes on: unmount it to be sure.
func (m *Mounter) MountVolume(ctx context.Context, req MountRequest) (MountResult, error) {
	answer, err := m.volumes.call(ctx, func(replyTo *actor.PID) proto.Message {
		msg := req.Message(m.plugin)
		msg.ReplyTo = replyTo
		return msg
	})
	if err != nil {
		return MountResult{}, err
	}
	resp := answer.(*messages.MountVolumeResponse)
	if err := VolumeErrorFromProto(resp.GetError()); err != nil {
		return MountResult{}, err
	}
	return MountResult{
		TargetPath:  resp.GetTargetPath(),
		StagingPath: resp.GetStagingPath(),
		IsDevice:    req.AttachmentMode == model.AttachmentModeBlockDevice,
	}, nil
}

// UnmountRequest asks to unmount a volume from an alloc.
type UnmountRequest struct {
	// Namespace scopes VolumeID; empty means model.DefaultNamespace.
	Namespace string
	VolumeID  string
	AllocID   string
}

// UnmountVolume unpublishes the volume from the alloc, removes its target
// path, unstages the volume when this was the last mount of its usage, and
// releases the claim. An alloc that does not mount the volume gets
// ErrNotMounted. A failed unmount can be retried: it resumes where it stopped.
func (m *Mounter) UnmountVolume(ctx context.Context, req UnmountRequest) error {
	answer, err := m.volumes.call(ctx, func(replyTo *actor.PID) proto.Message {
		return &messages.UnmountVolume{
			Plugin:    m.plugin,
			Namespace: req.Namespace,
			VolumeId:  req.VolumeID,
			AllocId:   req.AllocID,
			ReplyTo:   replyTo,
		}
	})
	if err != nil {
		return err
	}
	return VolumeErrorFromProto(answer.(*messages.UnmountVolumeResponse).GetError())
}
