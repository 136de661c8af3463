package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// env is what every job shares; nothing in it changes after start.
type env struct {
	bucket     storage.Bucket
	catalog    Catalog
	fleet      Attachments
	registry   *registry.Registry
	paths      paths
	mountInfo  string
	rpcTimeout time.Duration
	opTimeout  time.Duration
	// base ends when the manager shuts down; rollbacks start from it.
	base context.Context
	log  hclog.Logger
	// nodeID and onEvent are Config's.
	nodeID  string
	onEvent func(Event)
	// feed hands every event to the Manager's subscribers.
	feed *eventFeed
	// conns are the plugin connections the jobs share.
	conns connections
	// refuse is set while this node's lease in the fleet is not held, and
	// fenced while it may be lost (see SetStanding): the manager sets
	// them, running jobs read them.
	refuse, fenced atomic.Bool
}

// job is one operation on one volume, run off the actor's goroutine. The
// per-volume queue runs one job per volume at a time, so while it runs the
// job owns the volume's record: it writes every step to the store itself
// (before and after each RPC) and reports each durable copy to the actor.
type job struct {
	env *env
	key volumeKey
	// rec is the volume's record; empty (never nil) when the node holds nothing.
	rec *messages.VolumeRecord
	// progress hands the actor a copy of each record made durable.
	progress func(*messages.VolumeRecord)
	// broken is set once a write to the store failed: from then on the
	// job sends no RPC, since the record could not say it was sent.
	broken  error
	clients map[string]*sharedConn
	vol     *model.CSIVolume
	// written is the catalog's volume as the job's latest claim or
	// release left it.
	written *model.CSIVolume
	log     hclog.Logger
	// note says more of the outcome than its error (what a forced unmount
	// forced); the volume's status shows it with the operation.
	note string
	// doubts is the volume queue's count of doubts about the fleet's
	// claims (queue.doubts); nil for a job off the queue.
	doubts *atomic.Uint64
}

func newJob(e *env, key volumeKey, rec *messages.VolumeRecord, progress func(*messages.VolumeRecord)) *job {
	if rec == nil {
		rec = &messages.VolumeRecord{Namespace: key.namespace, VolumeId: key.id}
	} else {
		rec = proto.Clone(rec).(*messages.VolumeRecord)
	}
	return &job{env: e, key: key, rec: rec, progress: progress, clients: map[string]*sharedConn{},
		log: e.log.With("namespace", key.namespace, "volume_id", key.id)}
}

// close releases the job's plugin connections; a job that failed (err)
// drops them, so that the next job dials afresh.
func (j *job) close(err error) {
	for _, sc := range j.clients {
		j.env.conns.release(sc, err != nil)
	}
}

// save makes the record durable (deleting it when it holds nothing).
func (j *job) save() error {
	if j.broken != nil {
		return j.broken
	}
	op, err := recordOp(j.key, j.rec)
	if err == nil {
		if err = j.env.bucket.Apply([]storage.Op{op}); err != nil {
			err = fmt.Errorf("%w: write the record of %s: %w", ErrStore, j.key, err)
		}
	}
	if err != nil {
		j.broken = err
		return err
	}
	j.progress(proto.Clone(j.rec).(*messages.VolumeRecord))
	return nil
}

// volume returns the catalog's volume, asked once per job.
func (j *job) volume(ctx context.Context) (*model.CSIVolume, error) {
	if j.vol != nil {
		return j.vol, nil
	}
	v, err := j.env.catalog.GetVolume(ctx, j.key.namespace, j.key.id)
	if err != nil {
		return nil, catalogError(err, ErrClaimRefused)
	}
	j.vol = v
	return v, nil
}

// claim claims the volume for alloc on this node. The volume as the claim
// left it is the job's answer (written).
func (j *job) claim(ctx context.Context, alloc string, use csi.Usage) error {
	v, err := j.env.catalog.ClaimVolume(ctx, csi.ClaimRequest{
		Namespace: j.key.namespace, VolumeID: j.key.id, AllocID: alloc, Usage: use,
	})
	if err == nil {
		j.written = v
	}
	return catalogError(err, ErrClaimRefused)
}

// releaseClaim moves alloc's claim to state (ready-to-free frees it),
// with the error that holds it there. The volume as the release left it
// is the job's answer (written).
func (j *job) releaseClaim(ctx context.Context, alloc string, state model.ClaimState, lastError string) error {
	v, err := j.env.catalog.ReleaseVolume(ctx, j.key.namespace, j.key.id,
		&model.Claim{AllocID: alloc, State: state, LastError: lastError})
	if err == nil {
		j.written = v
	}
	return catalogError(err, ErrClaimRefused)
}

// secrets are the volume's secrets, when the catalog still knows it: the
// way out works without them rather than not at all.
func (j *job) secrets(ctx context.Context) map[string]string {
	if v, err := j.volume(ctx); err == nil {
		return v.Secrets
	}
	return nil
}

// current returns the socket of the current allocation of the plugin of
// type ptype that serves the record's volume.
func (j *job) current(ptype string) (string, bool) {
	info, ok := j.env.registry.Snapshot().Current(ptype, j.rec.GetPluginId())
	if !ok || info.GetConnection().GetSocketPath() == "" {
		return "", false
	}
	return info.GetConnection().GetSocketPath(), true
}

// nodeSocket is the socket of the node plugin allocation that did a step
// (recorded, for a step of the way out) while that allocation is still
// registered, even when a newer one took over: the way out goes where the
// way in went, to the process that holds the volume's state. Else it is
// the current allocation's socket, or recorded when none is registered: a
// deregistered plugin keeps serving the way out of what it mounted.
func (j *job) nodeSocket(recorded string) (string, error) {
	return j.socket(NodePluginType, recorded, func() (string, error) {
		return "", fmt.Errorf("%w: no %s plugin %q is registered", ErrPluginNotFound, NodePluginType, j.rec.GetPluginId())
	})
}

// controllerSocket is controllerSocket's counterpart for the controller
// plugin; with no controller registered, the node plugin's socket (a
// plugin registered as a node plugin only may serve both).
func (j *job) controllerSocket(recorded string) (string, error) {
	return j.socket(ControllerPluginType, recorded, func() (string, error) { return j.nodeSocket("") })
}

// socket picks the socket of ptype for a step, as nodeSocket says; none is
// what it falls back on.
func (j *job) socket(ptype, recorded string, none func() (string, error)) (string, error) {
	current, ok := j.current(ptype)
	switch {
	case recorded == "" || recorded == current:
	case slices.ContainsFunc(j.env.registry.Snapshot().Allocations(ptype, j.rec.GetPluginId()), func(info *messages.PluginInfo) bool {
		return info.GetConnection().GetSocketPath() == recorded
	}):
		return recorded, nil
	case ok:
		j.log.Info("the allocation that did this step is gone: the way out goes to the current one", "type", ptype, "recorded_socket", recorded, "socket", current)
	default:
		return recorded, nil
	}
	if ok {
		return current, nil
	}
	return none()
}

// client returns the manager's connection to socket (see connections),
// held until the job ends.
func (j *job) client(ctx context.Context, socket string) (*csi.Client, error) {
	if j.broken != nil {
		return nil, j.broken
	}
	if sc, ok := j.clients[socket]; ok {
		return sc.client, nil
	}
	// A socket known to be missing fails at once, not after the RPC
	// timeout: the step is retried when the plugin registers again.
	if _, err := os.Stat(socket); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: the plugin's socket %s does not exist (the plugin is gone); the operation is retried when it registers again",
			csi.ErrConnect, socket)
	}
	sc, err := j.env.conns.hold(ctx, socket, func(ctx context.Context) (*csi.Client, error) {
		dialCtx, cancel := context.WithTimeout(ctx, j.env.rpcTimeout)
		defer cancel()
		return csi.Dial(dialCtx, socket, csi.Options{RPCTimeout: j.env.rpcTimeout})
	})
	if err != nil {
		return nil, err
	}
	j.clients[socket] = sc
	return sc.client, nil
}

// nodeClient connects to the node plugin (see nodeSocket).
func (j *job) nodeClient(ctx context.Context, recorded string) (*csi.Client, error) {
	c, _, err := j.nodeClientAt(ctx, recorded)
	return c, err
}

// nodeClientAt is nodeClient, also returning the socket it dialled, which
// a step of the way out records in place of the one it was recorded with.
func (j *job) nodeClientAt(ctx context.Context, recorded string) (*csi.Client, string, error) {
	socket, err := j.nodeSocket(recorded)
	if err != nil {
		return nil, "", err
	}
	c, err := j.client(ctx, socket)
	return c, socket, err
}

// controllerClient connects to the controller plugin (see
// controllerSocket) and returns the socket it dialled.
func (j *job) controllerClient(ctx context.Context, recorded string) (*csi.Client, string, error) {
	socket, err := j.controllerSocket(recorded)
	if err != nil {
		return nil, "", err
	}
	c, err := j.client(ctx, socket)
	return c, socket, err
}

// attachRequired reports whether the controller at socket advertises
// PUBLISH_UNPUBLISH_VOLUME. A plugin without a controller service
// (Unimplemented) does not attach.
func (j *job) attachRequired(ctx context.Context, c *csi.Client) (bool, error) {
	caps, err := c.ControllerCapabilitiesCached(ctx)
	if errors.Is(err, csi.ErrUnimplemented) {
		return false, nil
	}
	return caps.PublishUnpublishVolume, err
}

// capability is the CSI volume capability of the volume: its access mode,
// and a block or mount access type with its mount options.
func capability(rec *messages.VolumeRecord, v *model.CSIVolume) *csipb.VolumeCapability {
	c := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessModes[model.AccessMode(rec.GetAccessMode())]},
	}
	if model.AttachmentMode(rec.GetAttachmentMode()) == model.AttachmentModeBlockDevice {
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return c
	}
	m := &csipb.VolumeCapability_MountVolume{}
	if v != nil {
		m.FsType = fsType(v, rec.GetAccessMode(), rec.GetAttachmentMode())
		if v.MountOptions != nil {
			m.MountFlags = v.MountOptions.MountFlags
		}
	}
	c.AccessType = &csipb.VolumeCapability_Mount{Mount: m}
	return c
}

// accessModes maps the catalog's access modes to CSI's.
var accessModes = map[model.AccessMode]csipb.VolumeCapability_AccessMode_Mode{
	model.AccessModeSingleNodeReader:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	model.AccessModeSingleNodeWriter:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	model.AccessModeMultiNodeReader:       csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
	model.AccessModeMultiNodeSingleWriter: csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
	model.AccessModeMultiNodeMultiWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
}

// rollbackContext is a fresh operation deadline for undoing or finishing
// what an operation did once its own deadline is gone; it ends with the
// manager.
func (j *job) rollbackContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(j.env.base, j.env.opTimeout)
}
