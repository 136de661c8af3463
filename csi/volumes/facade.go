package volumes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/internal/mountinfo"
	"github.com/plugvisor/plugvisor/messages"
)

// Manager is the Go facade of the volume manager actor. Its methods are
// safe for concurrent use. Each operation waits for the actor's answer at
// most the operation deadline (Config.OperationTimeout): past it the
// caller gets ErrDeadline while the operation goes on, completing or
// rolling back, and Status shows its outcome. A caller whose ctx ends
// first gets ctx's error; its operation goes on too.
type Manager struct {
	system  *actor.ActorSystem
	pid     *actor.PID
	timeout time.Duration
	workers *sync.WaitGroup
	// conns are the jobs' plugin connections, closed once they have ended.
	conns  *connections
	closed atomic.Bool
	feed   *eventFeed
	// samples are the periodic stats' latest, as the actor published them.
	samples *atomic.Pointer[[]StatsSample]
}

// Start checks cfg, creates cfg.Root, loads the mount records, reads the
// mount table, and starts the volume manager actor in system, which then
// reconciles every record (see doc.go). A record that cannot be loaded is
// ErrCorrupt. Stop the manager with Shutdown.
func Start(system *actor.ActorSystem, cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := mkdirPrivate(cfg.Root); err != nil {
		return nil, err
	}
	records, err := loadRecords(cfg.Bucket)
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.PointsUnder(cfg.MountInfoPath, cfg.Root)
	if err != nil {
		cfg.Logger.Warn("cannot read the mount table: orphan mounts are not looked for", "error", err)
	}
	base, cancel := context.WithCancel(context.Background())
	m := &manager{
		cfg: cfg, log: cfg.Logger, cancel: cancel, workers: &sync.WaitGroup{},
		env: &env{
			bucket: cfg.Bucket, catalog: cfg.Catalog, fleet: cfg.Attachments, registry: cfg.Registry, paths: paths{root: cfg.Root},
			mountInfo: cfg.MountInfoPath, rpcTimeout: cfg.RPCTimeout, opTimeout: cfg.OperationTimeout,
			base: base, log: cfg.Logger, nodeID: cfg.NodeID, onEvent: cfg.OnEvent, feed: &eventFeed{},
		},
		records: records, queues: map[volumeKey]*queue{}, outcomes: map[volumeKey]outcome{},
		retries: map[volumeKey]*retry{}, orphans: orphans(cfg.Root, mounts, records), startMounts: mounts,
	}
	samples := &atomic.Pointer[[]StatsSample]{}
	m.stats = statsPoll{inFlight: map[volumeKey]bool{}, samples: map[volumeKey]StatsSample{},
		published: func(s []StatsSample) { samples.Store(&s) }}
	for _, o := range m.orphans {
		cfg.Logger.Warn("mount under the volume root that no record explains", "path", o)
	}
	cfg.Logger.Info("volume manager starting", "root", cfg.Root, "records", len(records), "orphans", len(m.orphans))
	// The producer hands back the same actor: a restart after a panic keeps
	// the queues and the jobs in flight, which only this instance knows of,
	// and reconciles every volume again (manager.onStarted).
	props := actor.PropsFromProducer(func() actor.Actor { return m },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger)))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start actor %q: %w", cfg.Name, err)
	}
	return &Manager{system: system, pid: pid, timeout: cfg.OperationTimeout, workers: m.workers, conns: &m.env.conns, feed: m.env.feed, samples: samples}, nil
}

// VolumeStats returns the latest sample of the periodic stats of every
// volume published on this node whose node plugin advertises
// GET_VOLUME_STATS (see Config.StatsInterval), sorted by namespace and
// volume. A volume leaves it when it is no longer published. It never
// waits for the actor.
func (m *Manager) VolumeStats() []StatsSample {
	if p := m.samples.Load(); p != nil {
		return *p
	}
	return nil
}

// PID is the actor's address, for actors that send it requests.
func (m *Manager) PID() *actor.PID { return m.pid }

// Mount claims the volume for alloc (a read claim when readOnly), attaches
// it to this node when the controller attaches, stages it once per node
// when the node plugin stages, and publishes it at alloc's own target,
// read-only for a reader. Mounting again what alloc has mounted the same
// way returns the same result. An empty namespace is the default one.
func (m *Manager) Mount(ctx context.Context, namespace, id, alloc string, readOnly bool) (MountResult, error) {
	return m.MountAs(ctx, namespace, id, alloc, csi.Usage{ReadOnly: readOnly})
}

// MountAs is Mount with the volume's capability use chooses (its access
// and attachment modes; none: the volume's only one). The node stages and
// publishes the volume with that capability; while the volume is mounted on
// this node with another, the mount is refused (ErrInUse).
func (m *Manager) MountAs(ctx context.Context, namespace, id, alloc string, use csi.Usage) (MountResult, error) {
	return m.MountWithGroup(ctx, namespace, id, alloc, use, "")
}

// MountWithGroup is MountAs with a mount group: a GID in decimal (0 to
// MaxMountGroup) that the node plugin gives the alloc access as (CSI
// volume_mount_group, kubelet's fsGroup delegation), passed in the
// capability of NodeStageVolume and NodePublishVolume. A node plugin that
// does not advertise VOLUME_MOUNT_GROUP gets no volume RPC: the mount is
// refused (ErrUnsupported). A bad GID is ErrInvalid. Empty is none.
func (m *Manager) MountWithGroup(ctx context.Context, namespace, id, alloc string, use csi.Usage, group string) (MountResult, error) {
	readOnly := use.ReadOnly
	namespace = defaultNamespace(namespace)
	if err := checkIDs("namespace", namespace, "volume ID", id, "alloc ID", alloc); err != nil {
		return MountResult{}, err
	}
	if err := CheckMountGroup(group); err != nil {
		return MountResult{}, err
	}
	answer, err := m.call(ctx, "mount", func(replyTo *actor.PID) proto.Message {
		return &messages.MountAllocVolume{Namespace: namespace, VolumeId: id, AllocId: alloc, ReadOnly: readOnly, ReplyTo: replyTo,
			AccessMode: string(use.AccessMode), AttachmentMode: string(use.AttachmentMode), MountGroup: group}
	})
	if err != nil {
		return MountResult{}, err
	}
	resp := answer.(*messages.MountAllocVolumeResponse)
	if err := messages.ErrorFromProto(resp.GetError()); err != nil {
		return MountResult{}, err
	}
	return MountResult{TargetPath: resp.GetTargetPath(), StagingPath: resp.GetStagingPath(), IsDevice: resp.GetIsDevice()}, nil
}

// Unmount unpublishes the volume from alloc, unstages and detaches it once
// no publish remains on the node, and releases the claim the mount made (a
// claim made with Claim stays until Release). An alloc without a mount is
// ErrNotMounted.
func (m *Manager) Unmount(ctx context.Context, namespace, id, alloc string) error {
	namespace = defaultNamespace(namespace)
	if err := checkIDs("namespace", namespace, "volume ID", id, "alloc ID", alloc); err != nil {
		return err
	}
	return m.op(ctx, "unmount", func(replyTo *actor.PID) proto.Message {
		return &messages.UnmountAllocVolume{Namespace: namespace, VolumeId: id, AllocId: alloc, ReplyTo: replyTo}
	})
}

// ForceUnmount is Unmount for an operator whose volume is stuck (its
// plugin gone for good, or failing every retry): a step of the way out
// that the plugin cannot do is done in the kernel instead (the target's and
// the staging path's mounts unmounted by the agent, never lazily, so a busy
// mount still fails), the claim is released, and the status says what was
// forced. An attachment the controller cannot undo stays recorded, so
// another node's attachment of a single-node volume is still refused.
func (m *Manager) ForceUnmount(ctx context.Context, namespace, id, alloc string) error {
	namespace = defaultNamespace(namespace)
	if err := checkIDs("namespace", namespace, "volume ID", id, "alloc ID", alloc); err != nil {
		return err
	}
	return m.op(ctx, "unmount -force", func(replyTo *actor.PID) proto.Message {
		return &messages.UnmountAllocVolume{Namespace: namespace, VolumeId: id, AllocId: alloc, Force: true, ReplyTo: replyTo}
	})
}

// Claim claims the volume for alloc without mounting it: a read claim when
// readOnly, a write claim otherwise. It stays until Release.
func (m *Manager) Claim(ctx context.Context, namespace, id, alloc string, readOnly bool) error {
	return m.ClaimAs(ctx, namespace, id, alloc, csi.Usage{ReadOnly: readOnly})
}

// ClaimAs is Claim with the volume's capability use chooses.
func (m *Manager) ClaimAs(ctx context.Context, namespace, id, alloc string, use csi.Usage) error {
	_, err := m.ClaimVolume(ctx, namespace, id, alloc, use)
	return err
}

// ClaimVolume is ClaimAs, answering with the catalog's volume as the
// claim left it: no read of it after the claim (in a fleet, no etcd
// round trip).
func (m *Manager) ClaimVolume(ctx context.Context, namespace, id, alloc string, use csi.Usage) (*model.CSIVolume, error) {
	namespace = defaultNamespace(namespace)
	if err := checkIDs("namespace", namespace, "volume ID", id, "alloc ID", alloc); err != nil {
		return nil, err
	}
	return m.opVolume(ctx, "claim", func(replyTo *actor.PID) proto.Message {
		return &messages.ClaimAllocVolume{Namespace: namespace, VolumeId: id, AllocId: alloc, ReadOnly: use.ReadOnly, ReplyTo: replyTo,
			AccessMode: string(use.AccessMode), AttachmentMode: string(use.AttachmentMode)}
	})
}

// Release frees alloc's claim. It is refused with ErrInUse, naming the
// mount, while alloc has the volume mounted on this node.
func (m *Manager) Release(ctx context.Context, namespace, id, alloc string) error {
	_, err := m.ReleaseVolume(ctx, namespace, id, alloc)
	return err
}

// ReleaseVolume is Release, answering with the catalog's volume as the
// release left it (nil when the catalog no longer knows the volume).
func (m *Manager) ReleaseVolume(ctx context.Context, namespace, id, alloc string) (*model.CSIVolume, error) {
	namespace = defaultNamespace(namespace)
	if err := checkIDs("namespace", namespace, "volume ID", id, "alloc ID", alloc); err != nil {
		return nil, err
	}
	return m.opVolume(ctx, "release", func(replyTo *actor.PID) proto.Message {
		return &messages.ReleaseAllocVolume{Namespace: namespace, VolumeId: id, AllocId: alloc, ReplyTo: replyTo}
	})
}

// Detach forces ControllerUnpublishVolume of the volume from the plugin's
// node nodeID, for an operator. It is refused with ErrInUse while the
// volume is staged or published on this node.
func (m *Manager) Detach(ctx context.Context, namespace, id, nodeID string) error {
	namespace = defaultNamespace(namespace)
	if err := checkIDs("namespace", namespace, "volume ID", id, "node ID", nodeID); err != nil {
		return err
	}
	return m.op(ctx, "detach", func(replyTo *actor.PID) proto.Message {
		return &messages.DetachVolume{Namespace: namespace, VolumeId: id, NodeId: nodeID, ReplyTo: replyTo}
	})
}

// Status is what this node holds of a volume.
type Status struct {
	Namespace, ID string
	// Record is the durable record; nil when the node holds nothing.
	Record *messages.VolumeRecord
	// Busy is set while an operation runs on the volume.
	Busy bool
	// LastOperation and LastError are the outcome of the volume's latest
	// operation since start ("mount alloc-1").
	LastOperation, LastError string
	// Orphans are mounts of the volume's paths that no record explains.
	Orphans []string
	// Stats is the node plugin's NodeGetVolumeStats answer while the
	// volume is published and the plugin advertises GET_VOLUME_STATS.
	Stats *messages.VolumeStats
	// StatsError says why Stats is nil although the volume is published
	// (the plugin failed or did not answer within the RPC timeout).
	StatsError string
}

// Status returns what this node holds of the volume and, while it is
// published, its node plugin's stats (asked within one RPC timeout, outside
// the volume's queue).
func (m *Manager) Status(ctx context.Context, namespace, id string) (Status, error) {
	namespace = defaultNamespace(namespace)
	if err := checkIDs("namespace", namespace, "volume ID", id); err != nil {
		return Status{}, err
	}
	answer, err := m.call(ctx, "status", func(replyTo *actor.PID) proto.Message {
		return &messages.VolumeStatusRequest{Namespace: namespace, VolumeId: id, ReplyTo: replyTo}
	})
	if err != nil {
		return Status{}, err
	}
	resp := answer.(*messages.VolumeStatusResponse)
	if err := messages.ErrorFromProto(resp.GetError()); err != nil {
		return Status{}, err
	}
	return Status{
		Namespace: namespace, ID: id, Record: resp.GetRecord(), Busy: resp.GetBusy(),
		LastOperation: resp.GetLastOperation(), LastError: resp.GetLastError(), Orphans: resp.GetOrphans(),
		Stats: resp.GetStats(), StatsError: resp.GetStatsError(),
	}, nil
}

// Shutdown stops the manager: waiting operations are refused, running ones
// have their RPCs cancelled and end (leaving their records for the next
// start to reconcile), and the actor stops. Mounted volumes stay mounted.
// Calls after Shutdown return ErrShutDown; a second Shutdown returns nil.
func (m *Manager) Shutdown(ctx context.Context) error {
	if m.closed.Swap(true) {
		return nil
	}
	answer, err := m.ask(ctx, func(replyTo *actor.PID) proto.Message {
		return &messages.ShutdownVolumeManager{ReplyTo: replyTo}
	})
	if err == nil {
		err = messages.ErrorFromProto(answer.(*messages.VolumeOpResponse).GetError())
	}
	if stopErr := m.system.Root.PoisonFuture(m.pid).Wait(); err == nil && stopErr != nil {
		err = fmt.Errorf("stop actor: %w", stopErr)
	}
	m.workers.Wait()
	m.conns.close()
	return err
}

// op sends a request answered by VolumeOpResponse.
func (m *Manager) op(ctx context.Context, what string, build func(replyTo *actor.PID) proto.Message) error {
	answer, err := m.call(ctx, what, build)
	if err != nil {
		return err
	}
	return messages.ErrorFromProto(answer.(*messages.VolumeOpResponse).GetError())
}

// opVolume is op for a claim or a release, whose answer carries the
// volume.
func (m *Manager) opVolume(ctx context.Context, what string, build func(replyTo *actor.PID) proto.Message) (*model.CSIVolume, error) {
	answer, err := m.call(ctx, what, build)
	if err != nil {
		return nil, err
	}
	resp := answer.(*messages.VolumeOpResponse)
	if err := messages.ErrorFromProto(resp.GetError()); err != nil {
		return nil, err
	}
	return model.VolumeFromProto(resp.GetVolume()), nil
}

// call asks the actor, waiting at most the operation deadline.
func (m *Manager) call(ctx context.Context, what string, build func(replyTo *actor.PID) proto.Message) (any, error) {
	if m.closed.Load() {
		return nil, fmt.Errorf("%w: %s refused", ErrShutDown, what)
	}
	waitCtx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	answer, err := m.ask(waitCtx, build)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w: %s did not finish within %v; it goes on, or rolls back, without the caller: volume status shows its outcome",
			ErrDeadline, what, m.timeout)
	}
	return answer, err
}

// ask sends the message build makes and waits for the answer or ctx.
func (m *Manager) ask(ctx context.Context, build func(replyTo *actor.PID) proto.Message) (any, error) {
	answer, err := actors.Ask(ctx, m.system, m.pid, func(replyTo *actor.PID) any { return build(replyTo) })
	switch {
	case errors.Is(err, actors.ErrTargetGone):
		return nil, fmt.Errorf("%w: %w", ErrShutDown, err)
	case err != nil:
		return nil, fmt.Errorf("waiting for the volume manager: %w", err)
	}
	return answer, nil
}

func defaultNamespace(ns string) string {
	if ns == "" {
		return model.DefaultNamespace
	}
	return ns
}
