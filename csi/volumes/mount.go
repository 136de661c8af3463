package volumes

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// MountResult says where a mounted volume is.
type MountResult struct {
	// TargetPath is where the alloc finds the volume: a directory, or a
	// device file for a block-device volume.
	TargetPath string
	// StagingPath is where the volume is staged; empty when the plugin
	// does not stage.
	StagingPath string
	IsDevice    bool
}

func (j *job) result(pub *messages.VolumePublish) MountResult {
	return MountResult{
		TargetPath:  pub.GetTargetPath(),
		StagingPath: j.rec.GetStage().GetStagingPath(),
		IsDevice:    j.rec.GetAttachmentMode() == string(model.AttachmentModeBlockDevice),
	}
}

// mount claims, attaches (when the controller attaches and the volume is
// not attached), stages (when the node stages and the volume is not staged)
// and publishes the volume for alloc. A failure rolls back what this mount
// did, and only that.
func (j *job) mount(ctx context.Context, alloc string, use csi.Usage, group string) (MountResult, error) {
	readOnly := use.ReadOnly
	if err := j.refused("mount"); err != nil {
		return MountResult{}, err
	}
	if err := CheckMountGroup(group); err != nil {
		return MountResult{}, err
	}
	vol, err := j.volume(ctx)
	if err != nil {
		return MountResult{}, err
	}
	if err := j.adoptAs(vol, use); err != nil {
		return MountResult{}, err
	}
	if pub := j.rec.GetPublishes()[alloc]; pub != nil {
		if pub.GetState() == statePublished && pub.GetReadOnly() == readOnly && pub.GetMountGroup() == group {
			return j.result(pub), nil
		}
		return MountResult{}, fmt.Errorf("%w: alloc %s already has a mount of volume %s (state %s, read_only %t, mount group %q%s); unmount it first",
			ErrInUse, alloc, j.key, pub.GetState(), pub.GetReadOnly(), pub.GetMountGroup(), lastErrorNote(pub.GetLastError()))
	}
	if err := j.unfinished(); err != nil {
		return MountResult{}, err
	}
	socket, err := j.nodeSocket("")
	if err != nil {
		return MountResult{}, err
	}
	if err := j.mountGroupSupported(ctx, socket, group); err != nil {
		return MountResult{}, err
	}
	held := slices.Contains(vol.Claimants(), alloc)
	pub := &messages.VolumePublish{
		AllocId: alloc, State: stateClaiming, ReadOnly: readOnly, ClaimedByMount: !held, NodeSocket: socket,
		TargetPath: j.env.paths.target(vol.PluginID, alloc, j.key.namespace, j.key.id), MountGroup: group,
	}
	if j.rec.Publishes == nil {
		j.rec.Publishes = map[string]*messages.VolumePublish{}
	}
	j.rec.Publishes[alloc] = pub
	if err := j.save(); err != nil {
		return MountResult{}, err
	}
	doubts := j.doubtsNow()
	err = j.mountSteps(ctx, vol, pub, use)
	if err == nil {
		err = j.claimKept(ctx, pub, doubts)
	}
	if err != nil {
		rbCtx, cancel := j.rollbackContext()
		defer cancel()
		if rbErr := j.takeDown(rbCtx, alloc); rbErr != nil {
			return MountResult{}, fmt.Errorf("%w; rolling back failed too (the GC step retries it): %w", err, rbErr)
		}
		return MountResult{}, err
	}
	j.log.Info("volume mounted", "alloc_id", alloc, "read_only", readOnly, "target_path", pub.GetTargetPath())
	j.finishPendingExpand(ctx, vol, pub)
	return j.result(pub), nil
}

// doubtsNow is the count of doubts about the volume's claims so far.
func (j *job) doubtsNow() uint64 {
	if j.doubts == nil {
		return 0
	}
	return j.doubts.Load()
}

// claimKept checks, when the fleet's claims of the volume came into doubt
// since the mount began (a change that left out an alloc of this node, or
// a check of every mount: etcd restored, the watch started again), that
// the fleet still gives pub's alloc its claim on this node. One freed
// while the mount ran fails it: answered ok, the mount would be taken down
// at once by the reconcile queued behind it. A claim that is not this
// node's any more is not released by the rollback.
func (j *job) claimKept(ctx context.Context, pub *messages.VolumePublish, doubts uint64) error {
	if j.doubtsNow() == doubts {
		return nil
	}
	j.vol = nil
	holders, err := j.claimHolders(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("the fleet's claims of volume %s changed while it mounted, and reading them again failed, so the mount was undone: %w; mount again once the catalog answers", j.key, err)
	case !j.ours(holders, pub.GetAllocId()):
		pub.ClaimedByMount = false
		return fmt.Errorf("%w: the fleet freed alloc %s's claim on volume %s while it mounted (a restore of etcd, a drain -force or an operator); mount again",
			ErrClaimRefused, pub.GetAllocId(), j.key)
	}
	return nil
}

// adopt fills a new record from the catalog's volume, or checks that the
// record still describes it.
func (j *job) adopt(vol *model.CSIVolume) error {
	if err := checkID("plugin ID", vol.PluginID); err != nil {
		return fmt.Errorf("%w: volume %s: %w", ErrInvalid, j.key, err)
	}
	if holdsNothing(j.rec) {
		if j.rec.GetExternalId() != vol.PluginVolumeID() {
			// A pending node expansion of another plugin volume of this
			// ID (deleted since) is void.
			j.rec.PendingExpandBytes, j.rec.PendingExpandError = 0, ""
		}
		j.rec.PluginId, j.rec.ExternalId, j.rec.PluginName = vol.PluginID, vol.PluginVolumeID(), ""
		j.rec.AccessMode, j.rec.AttachmentMode = string(vol.AccessMode), string(vol.AttachmentMode)
		return nil
	}
	if j.rec.GetPluginId() != vol.PluginID || j.rec.GetExternalId() != vol.PluginVolumeID() {
		return fmt.Errorf("%w: volume %s is held on this node as plugin %q volume %q, and the catalog now says plugin %q volume %q; unmount its allocs %v first",
			ErrInUse, j.key, j.rec.GetPluginId(), j.rec.GetExternalId(), vol.PluginID, vol.PluginVolumeID(), publishedAllocs(j.rec))
	}
	return nil
}

// unfinished refuses a mount while the attachment or the stage is on its
// way out or failed half way: the GC step finishes them first.
func (j *job) unfinished() error {
	if a := j.rec.GetAttachment(); a != nil && a.GetState() != stateAttached {
		return fmt.Errorf("%w: volume %s is %s on this node%s; retry once it is done", ErrInUse, j.key, a.GetState(), lastErrorNote(a.GetLastError()))
	}
	if s := j.rec.GetStage(); s != nil && s.GetState() != stateStaged {
		return fmt.Errorf("%w: volume %s is %s on this node%s; retry once it is done", ErrInUse, j.key, s.GetState(), lastErrorNote(s.GetLastError()))
	}
	return nil
}

func lastErrorNote(e string) string {
	if e == "" {
		return ""
	}
	return ", last error: " + e
}

// mountSteps runs the way in after the publish record is written.
func (j *job) mountSteps(ctx context.Context, vol *model.CSIVolume, pub *messages.VolumePublish, use csi.Usage) error {
	use.ReadOnly = pub.GetReadOnly()
	if err := j.claim(ctx, pub.GetAllocId(), use); err != nil {
		return err
	}
	node, err := j.client(ctx, pub.GetNodeSocket())
	if err == nil {
		err = j.learnPlugin(ctx, node, pub.GetNodeSocket(), pub)
	}
	if err != nil {
		return err
	}
	caps, err := node.NodeCapabilitiesCached(ctx)
	if err != nil {
		return err
	}
	if j.rec.Attachment == nil {
		if err := j.attach(ctx, vol, pub.GetNodeSocket()); err != nil {
			return err
		}
	}
	if caps.StageUnstageVolume && j.rec.Stage == nil {
		if err := j.stage(ctx, vol, pub); err != nil {
			return err
		}
	}
	// publish writes the stage's done state with its own first record.
	return j.publish(ctx, vol, pub)
}

// attach publishes the volume to this node through the controller, when
// the controller says it must.
func (j *job) attach(ctx context.Context, vol *model.CSIVolume, nodeSocket string) error {
	ctrl, socket, err := j.controllerClient(ctx, "")
	if err != nil {
		return err
	}
	required, err := j.attachRequired(ctx, ctrl)
	if err != nil || !required {
		return err
	}
	node, err := j.client(ctx, nodeSocket)
	if err != nil {
		return err
	}
	info, err := node.NodeGetInfo(ctx)
	if err != nil {
		return err
	}
	a := &messages.VolumeAttachment{State: stateAttaching, NodeId: info.NodeID, ControllerSocket: socket}
	j.rec.Attachment = a
	if err := j.save(); err != nil {
		return err
	}
	if err := j.recordAttachment(ctx, a); err != nil {
		if errors.Is(err, ErrClaimRefused) { // nothing was sent: nothing to detach
			j.rec.Attachment = nil
			if saveErr := j.save(); saveErr != nil {
				return fmt.Errorf("%w (and %w)", err, saveErr)
			}
		}
		return err
	}
	return j.controllerPublish(ctx, ctrl, vol, a)
}

// controllerPublish sends ControllerPublishVolume for attachment a (it is
// idempotent, so a reconcile sends it again where the controller lost the
// attachment) and records the answer.
func (j *job) controllerPublish(ctx context.Context, ctrl *csi.Client, vol *model.CSIVolume, a *messages.VolumeAttachment) error {
	resp, err := ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
		VolumeId: j.rec.GetExternalId(), NodeId: a.GetNodeId(), VolumeCapability: capability(j.rec, vol),
		Readonly: model.AccessMode(j.rec.GetAccessMode()).ReadOnly(), Secrets: vol.Secrets, VolumeContext: vol.Context,
	})
	if err != nil {
		a.LastError = err.Error()
		return err
	}
	a.State, a.PublishContext, a.LastError = stateAttached, resp.GetPublishContext(), ""
	if err := j.recordAttachment(ctx, a); err != nil {
		a.LastError = err.Error()
		return err
	}
	return j.save()
}

// stage stages the volume at its one staging path on this node. Its done
// state is written with the publish that follows it, in the record the
// publish writes before its RPC: one durable write, not two, and until
// then a crash leaves the stage "staging", which the way out undoes.
// The stage takes pub's mount group.
func (j *job) stage(ctx context.Context, vol *model.CSIVolume, pub *messages.VolumePublish) error {
	s := &messages.VolumeStage{State: stateStaging, StagingPath: j.env.paths.staging(vol.PluginID, j.key.namespace, j.key.id),
		NodeSocket: pub.GetNodeSocket(), MountGroup: pub.GetMountGroup()}
	j.rec.Stage = s
	if err := j.save(); err != nil {
		return err
	}
	if err := j.nodeStage(ctx, vol, s); err != nil {
		s.LastError = err.Error()
		return err
	}
	s.State, s.LastError = stateStaged, ""
	return nil
}

// nodeStage sends NodeStageVolume for s (idempotent, so reconcile sends it
// again where the kernel lost a mount).
func (j *job) nodeStage(ctx context.Context, vol *model.CSIVolume, s *messages.VolumeStage) error {
	node, err := j.nodeClient(ctx, s.GetNodeSocket())
	if err != nil {
		return err
	}
	if err := mkdirPrivate(s.GetStagingPath()); err != nil {
		return err
	}
	_, err = node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: j.rec.GetExternalId(), PublishContext: j.rec.GetAttachment().GetPublishContext(),
		StagingTargetPath: s.GetStagingPath(), VolumeCapability: withMountGroup(capability(j.rec, vol), s.GetMountGroup()),
		Secrets: vol.Secrets, VolumeContext: vol.Context,
	})
	return err
}

// publish publishes the volume at pub's target, read-only for a reader.
func (j *job) publish(ctx context.Context, vol *model.CSIVolume, pub *messages.VolumePublish) error {
	pub.State = statePublishing
	if err := j.save(); err != nil {
		return err
	}
	if err := j.nodePublish(ctx, vol, pub); err != nil {
		pub.LastError = err.Error()
		return err
	}
	pub.State, pub.LastError = statePublished, ""
	if err := j.save(); err != nil {
		return err
	}
	return j.fencedAfter(pub)
}

// nodePublish sends NodePublishVolume for pub. It creates the target's
// parent; the plugin creates the target itself (CSI spec).
func (j *job) nodePublish(ctx context.Context, vol *model.CSIVolume, pub *messages.VolumePublish) error {
	node, err := j.nodeClient(ctx, pub.GetNodeSocket())
	if err != nil {
		return err
	}
	if err := mkdirPrivate(filepath.Dir(pub.GetTargetPath())); err != nil {
		return err
	}
	_, err = node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: j.rec.GetExternalId(), PublishContext: j.rec.GetAttachment().GetPublishContext(),
		StagingTargetPath: j.rec.GetStage().GetStagingPath(), TargetPath: pub.GetTargetPath(),
		VolumeCapability: withMountGroup(capability(j.rec, vol), pub.GetMountGroup()), Readonly: pub.GetReadOnly(),
		Secrets: vol.Secrets, VolumeContext: vol.Context,
	})
	return err
}

// claimOnly claims the volume for alloc without mounting it.
func (j *job) claimOnly(ctx context.Context, alloc string, use csi.Usage) error {
	if err := j.refused("claim"); err != nil {
		return err
	}
	if _, err := j.volume(ctx); err != nil {
		return err
	}
	return j.claim(ctx, alloc, use)
}

// release frees alloc's claim, unless alloc has the volume published here.
func (j *job) release(ctx context.Context, alloc string) error {
	if pub := j.rec.GetPublishes()[alloc]; pub != nil {
		return fmt.Errorf("%w: alloc %s has volume %s mounted at %s (state %s); unmount it first",
			ErrInUse, alloc, j.key, pub.GetTargetPath(), pub.GetState())
	}
	if _, err := j.volume(ctx); err != nil {
		return err
	}
	return j.releaseClaim(ctx, alloc, model.ClaimStateReadyToFree, "")
}

// forceDetach is an operator's detach of the volume from nodeID. It is
// refused while the volume is staged or published here, unless nodeID is
// another node whose attachment the fleet recorded: that attachment is the
// other node's own.
func (j *job) forceDetach(ctx context.Context, nodeID string) error {
	own := j.rec.GetAttachment() != nil && j.rec.GetAttachment().GetNodeId() == nodeID
	another := "" // the fleet node whose recorded attachment this is
	if j.env.fleet != nil && !own {
		target, recorded, err := j.detachTarget(ctx, nodeID)
		if err != nil {
			return err
		}
		nodeID, another = target, recorded
	}
	if allocs := publishedAllocs(j.rec); another == "" && (len(allocs) > 0 || j.rec.GetStage() != nil) {
		return fmt.Errorf("%w: volume %s is staged or published on this node (allocs %v); unmount them first", ErrInUse, j.key, allocs)
	}
	vol, err := j.volume(ctx)
	if err != nil {
		return err
	}
	if own {
		return j.detach(ctx)
	}
	if recordEmpty(j.rec) {
		if err := j.adopt(vol); err != nil {
			return err
		}
	}
	ctrl, _, err := j.controllerClient(ctx, "")
	if err != nil {
		return err
	}
	if required, err := j.attachRequired(ctx, ctrl); err != nil || !required {
		return err
	}
	_, err = ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{
		VolumeId: vol.PluginVolumeID(), NodeId: nodeID, Secrets: vol.Secrets,
	})
	if err != nil && !errors.Is(err, csi.ErrNotFound) {
		return err
	}
	j.log.Info("volume detached from another node", "node_id", nodeID, "fleet_node", another)
	if another != "" {
		return j.forgetAttachment(ctx, another)
	}
	return nil
}
