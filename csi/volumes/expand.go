package volumes

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// NodeExpandResult is the outcome of NodeExpand.
type NodeExpandResult struct {
	// Expanded says NodeExpandVolume was sent and succeeded.
	Expanded bool
	// CapacityBytes is the node plugin's answer (0 when it gave none).
	CapacityBytes int64
	// VolumePath is the target path NodeExpandVolume was sent for.
	VolumePath string
	// Note says why nothing was expanded, when Expanded is false.
	Note string
}

// NodeExpand finishes, on this node, an expansion the controller made:
// it sends NodeExpandVolume for the volume at one of its target paths
// (with its staging path when staged), with the volume's capability and
// capacityBytes as the required bytes. It runs in the volume's queue, one
// operation at a time like a mount. A volume not published on this node
// keeps the expansion pending, durably, and is expanded right after its
// next mount here: the result says so, without error. A node plugin
// that does not advertise EXPAND_VOLUME is csi.ErrUnimplemented.
func (m *Manager) NodeExpand(ctx context.Context, namespace, id string, capacityBytes int64) (NodeExpandResult, error) {
	namespace = defaultNamespace(namespace)
	if err := checkIDs("namespace", namespace, "volume ID", id); err != nil {
		return NodeExpandResult{}, err
	}
	if capacityBytes <= 0 {
		return NodeExpandResult{}, invalid(fmt.Sprintf("capacity bytes must be positive, not %d: the size the controller expanded the volume to", capacityBytes))
	}
	answer, err := m.call(ctx, "node expand", func(replyTo *actor.PID) proto.Message {
		return &messages.NodeExpandAllocVolume{Namespace: namespace, VolumeId: id, CapacityBytes: capacityBytes, ReplyTo: replyTo}
	})
	if err != nil {
		return NodeExpandResult{}, err
	}
	resp := answer.(*messages.NodeExpandAllocVolumeResponse)
	if err := messages.ErrorFromProto(resp.GetError()); err != nil {
		return NodeExpandResult{}, err
	}
	return NodeExpandResult{Expanded: resp.GetExpanded(), CapacityBytes: resp.GetCapacityBytes(),
		VolumePath: resp.GetVolumePath(), Note: resp.GetNote()}, nil
}

// ExpandOnNodes implements controller.NodeExpander with NodeExpand: the
// agent's one node is the only node the manager knows of. It reports
// whether this node expanded the volume.
func (m *Manager) ExpandOnNodes(ctx context.Context, v *model.CSIVolume, capacityBytes int64) (bool, error) {
	res, err := m.NodeExpand(ctx, v.Namespace, v.ID, capacityBytes)
	return res.Expanded, err
}

// nodeExpand is the body of a node-expand operation. A volume not
// published on this node keeps the expansion pending in its record (see
// finishPendingExpand).
func (j *job) nodeExpand(ctx context.Context, capacityBytes int64) (NodeExpandResult, error) {
	vol, err := j.volume(ctx)
	if err != nil {
		return NodeExpandResult{}, err
	}
	pub := firstPublished(j.rec)
	if pub == nil {
		return j.pendExpand(vol, capacityBytes)
	}
	return j.expandAt(ctx, vol, pub, capacityBytes)
}

// pendExpand records that the volume, not published here, needs a node
// expansion to capacityBytes at its next mount on this node.
func (j *job) pendExpand(vol *model.CSIVolume, capacityBytes int64) (NodeExpandResult, error) {
	if err := j.adopt(vol); err != nil {
		return NodeExpandResult{}, err
	}
	j.rec.PendingExpandBytes = max(j.rec.GetPendingExpandBytes(), capacityBytes)
	j.rec.PendingExpandError = ""
	if err := j.save(); err != nil {
		return NodeExpandResult{}, err
	}
	j.log.Info("node expansion pending: the volume is not published on this node; it is expanded at its next mount here",
		"capacity_bytes", j.rec.GetPendingExpandBytes())
	return NodeExpandResult{Note: fmt.Sprintf("volume %s is not published on this node: NodeExpandVolume is sent at its next mount here", j.key)}, nil
}

// finishPendingExpand sends the node expansion the record holds pending,
// right after a mount published the volume at pub. A failure fails not
// the mount (the volume is usable, at its old size) but keeps the
// expansion pending, with its error, for the next mount.
func (j *job) finishPendingExpand(ctx context.Context, vol *model.CSIVolume, pub *messages.VolumePublish) {
	want := j.rec.GetPendingExpandBytes()
	if want == 0 {
		return
	}
	_, err := j.expandAt(ctx, vol, pub, want)
	if err != nil {
		j.log.Warn("the pending node expansion failed: the volume is mounted at its old size", "capacity_bytes", want, "error", err)
		j.rec.PendingExpandError = err.Error()
	} else {
		j.rec.PendingExpandBytes, j.rec.PendingExpandError = 0, ""
	}
	if err := j.save(); err != nil {
		j.log.Warn("could not record the outcome of the pending node expansion", "error", err)
	}
}

// expandAt sends NodeExpandVolume for the volume at pub's target path.
func (j *job) expandAt(ctx context.Context, vol *model.CSIVolume, pub *messages.VolumePublish, capacityBytes int64) (NodeExpandResult, error) {
	node, err := j.nodeClient(ctx, pub.GetNodeSocket())
	if err != nil {
		return NodeExpandResult{}, err
	}
	caps, err := node.NodeGetCapabilities(ctx)
	if err != nil {
		return NodeExpandResult{}, err
	}
	if !caps.ExpandVolume {
		return NodeExpandResult{}, fmt.Errorf("node expansion of volume %s: %w: the node plugin %q does not advertise EXPAND_VOLUME",
			j.key, csi.ErrUnimplemented, j.rec.GetPluginId())
	}
	resp, err := node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: j.rec.GetExternalId(), VolumePath: pub.GetTargetPath(),
		CapacityRange:     &csipb.CapacityRange{RequiredBytes: capacityBytes},
		StagingTargetPath: j.rec.GetStage().GetStagingPath(), VolumeCapability: capability(j.rec, vol),
		Secrets: vol.Secrets,
	})
	if err != nil {
		return NodeExpandResult{}, err
	}
	j.log.Info("volume expanded on the node", "volume_path", pub.GetTargetPath(), "capacity_bytes", resp.GetCapacityBytes())
	return NodeExpandResult{Expanded: true, CapacityBytes: resp.GetCapacityBytes(), VolumePath: pub.GetTargetPath()}, nil
}

// firstPublished is the publish of the first alloc (by ID) whose state is
// published, or nil.
func firstPublished(rec *messages.VolumeRecord) *messages.VolumePublish {
	for _, alloc := range publishedAllocs(rec) {
		if p := rec.GetPublishes()[alloc]; p.GetState() == statePublished {
			return p
		}
	}
	return nil
}
