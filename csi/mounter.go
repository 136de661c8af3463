package csi

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
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// NodePluginType is the registry type of CSI node plugins, whose volumes the
// volume manager mounts.
const NodePluginType = "csi-node"

// Sentinel errors of the volume manager. They survive the trip through
// MountVolumeResponse and UnmountVolumeResponse: the [Mounter] gives them
// back to errors.Is. Failures of the plugin's RPCs and of the file system
// come back as plain errors carrying the full message.
var (
	// ErrInvalidVolumeRequest is returned for a malformed mount or unmount:
	// an ID or namespace that cannot be a path segment, an unknown access or
	// attachment mode, bad mount options. Nothing changed.
	ErrInvalidVolumeRequest = errors.New("invalid volume request")
	// ErrPluginNotFound is returned when no csi-node plugin of the name is
	// registered. Nothing changed.
	ErrPluginNotFound = errors.New("node plugin not found")
	// ErrNotMounted is returned by an unmount for an alloc that does not
	// mount the volume. Nothing changed.
	ErrNotMounted = errors.New("volume not mounted")
	// ErrClaimRefused is returned when the [Claimer] refuses the claim (a
	// second writer on a single-writer volume, say), or the alloc already
	// mounts the volume another way. No RPC was sent; nothing changed.
	ErrClaimRefused = errors.New("claim refused")
	// ErrVolumesShutDown is returned once the volume manager is shut down.
	ErrVolumesShutDown = errors.New("volume manager is shut down")
)

// volumeErrorCodes maps the sentinels to the codes of messages.Error. Two share
// ERROR_CODE_NOT_FOUND; their messages start with "csi: " and the sentinel,
// which tells them apart.
var volumeErrorCodes = []struct {
	code     messages.ErrorCode
	sentinel error
}{
	{messages.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, ErrInvalidVolumeRequest},
	{messages.ErrorCode_ERROR_CODE_NOT_FOUND, ErrPluginNotFound},
	{messages.ErrorCode_ERROR_CODE_NOT_FOUND, ErrNotMounted},
	{messages.ErrorCode_ERROR_CODE_CONFLICT, ErrClaimRefused},
	{messages.ErrorCode_ERROR_CODE_SHUT_DOWN, ErrVolumesShutDown},
}

// volumeErrorToProto turns an error into the Error of a response; nil stays nil.
func volumeErrorToProto(err error) *messages.Error {
	if err == nil {
		return nil
	}
	for _, c := range volumeErrorCodes {
		if errors.Is(err, c.sentinel) {
			return &messages.Error{Code: c.code, Message: err.Error()}
		}
	}
	return &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNSPECIFIED, Message: err.Error()}
}

// VolumeErrorFromProto turns the Error of a MountVolumeResponse,
// UnmountVolumeResponse or ShutdownVolumesResponse back into an error that
// errors.Is matches against the volume manager's sentinels; nil stays nil.
func VolumeErrorFromProto(e *messages.Error) error {
	if e == nil {
		return nil
	}
	var match error
	for _, c := range volumeErrorCodes {
		if c.code != e.GetCode() {
			continue
		}
		if match == nil || strings.HasPrefix(e.GetMessage(), "csi: "+c.sentinel.Error()) {
			match = c.sentinel
		}
	}
	if match == nil {
		return errors.New(e.GetMessage())
	}
	return &volumeError{sentinel: match, text: e.GetMessage()}
}

// volumeError is an error that came back from the volume manager actor:
// its text is the actor's, and errors.Is matches its sentinel.
type volumeError struct {
	sentinel error
	text     string
}

func (e *volumeError) Error() string { return e.text }
func (e *volumeError) Unwrap() error { return e.sentinel }

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
	Claimer Claimer
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

// ClaimRequest is one alloc's claim on a volume, as the volume manager
// hands it to its [Claimer].
type ClaimRequest struct {
	Plugin    string
	Namespace string
	VolumeID  string
	AllocID   string
	Usage     Usage
}

// Mode is the claim mode of r: read for a read-only usage, write otherwise.
func (r ClaimRequest) Mode() model.ClaimMode {
	if r.Usage.ReadOnly {
		return model.ClaimModeRead
	}
	return model.ClaimModeWrite
}

// Claimer decides whether an alloc may claim a volume, and hears when it
// lets go. The volume manager calls Claim before it stages or publishes
// anything, and Release once the volume is unpublished (and unstaged, if
// this was the last mount of its usage) or when a mount failed after the
// claim. It calls them from its worker goroutines: concurrently for
// different volumes, never concurrently for one volume of one plugin. ctx
// ends when the volume manager shuts down. A refusal should wrap
// ErrClaimRefused; any other error is reported as a refusal too.
//
// The CSI catalog actor (issue 5) will implement it by message; until then
// [LocalClaimer] keeps the claims of this agent.
type Claimer interface {
	Claim(ctx context.Context, req ClaimRequest) error
	Release(ctx context.Context, req ClaimRequest) error
}

// localNodeID is the node of every claim a LocalClaimer takes: they are
// all this agent's.
const localNodeID = "local"

// LocalClaimer is the default [Claimer]: it applies csi/catalog's claim
// rules to the claims of this agent. A volume takes the access and
// attachment modes of its first claim and keeps them until its last claim
// is released; a claim with other modes is refused, as are a write claim on
// a read-only access mode and a second writer on a single-writer one. It is
// safe for concurrent use.
type LocalClaimer struct {
	mu      sync.Mutex
	volumes map[localClaimKey]*model.CSIVolume
}

type localClaimKey struct{ namespace, volumeID string }

func (r ClaimRequest) localKey() localClaimKey { return localClaimKey{r.Namespace, r.VolumeID} }

// localClaim is r as a claim of the catalog model, in state.
func (r ClaimRequest) localClaim(state model.ClaimState) *model.Claim {
	return &model.Claim{AllocID: r.AllocID, NodeID: localNodeID, Mode: r.Mode(), State: state}
}

// NewLocalClaimer returns a LocalClaimer holding no claims.
func NewLocalClaimer() *LocalClaimer {
	return &LocalClaimer{volumes: map[localClaimKey]*model.CSIVolume{}}
}

// Claim grants req or says why not, wrapping ErrClaimRefused and the
// catalog's sentinel (model.ErrVolumeMaxClaims, ...). Claiming again what
// the alloc holds changes nothing.
func (c *LocalClaimer) Claim(_ context.Context, req ClaimRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, known := c.volumes[req.localKey()]
	if !known {
		v = model.NewCSIVolume(req.VolumeID, 0)
		v.Namespace = req.Namespace
		v.PluginID = req.Plugin
		v.AccessMode = req.Usage.AccessMode
		v.AttachmentMode = req.Usage.AttachmentMode
		v.Schedulable = true
	} else if v.PluginID != req.Plugin || v.AccessMode != req.Usage.AccessMode || v.AttachmentMode != req.Usage.AttachmentMode {
		return fmt.Errorf("csi: %w: volume %q in namespace %q is in use through plugin %q as %s %s; alloc %s asked for it through plugin %q as %s %s",
			ErrClaimRefused, req.VolumeID, req.Namespace, v.PluginID, v.AttachmentMode, v.AccessMode,
			req.AllocID, req.Plugin, req.Usage.AttachmentMode, req.Usage.AccessMode)
	}
	if err := v.Claim(req.localClaim(model.ClaimStateTaken)); err != nil {
		return fmt.Errorf("csi: %w: alloc %s: %w", ErrClaimRefused, req.AllocID, err)
	}
	c.volumes[req.localKey()] = v
	return nil
}

// Release frees the claim of req's alloc; releasing a claim that is not
// held changes nothing. The volume is forgotten with its last claim.
func (c *LocalClaimer) Release(_ context.Context, req ClaimRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.volumes[req.localKey()]
	if !ok {
		return nil
	}
	if err := v.ClaimRelease(req.localClaim(model.ClaimStateReadyToFree)); err != nil {
		return fmt.Errorf("csi: release claim of alloc %s on volume %q in namespace %q: %w", req.AllocID, req.VolumeID, req.Namespace, err)
	}
	if !v.InUse() {
		delete(c.volumes, req.localKey())
	}
	return nil
}
