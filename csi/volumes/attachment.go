package volumes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// listPrefix starts the last error a reconcile records on an attachment
// whose volume the controller no longer lists; fleetPrefix the one whose
// attachment the fleet refuses again.
const (
	listPrefix  = "ListVolumes: "
	fleetPrefix = "fleet: "
)

// maxListPages bounds how many pages of ListVolumes a reconcile reads
// looking for one volume, so that a plugin whose next token never ends
// cannot hold the volume's queue.
const maxListPages = 1000

// checkAttachment records the attachment in the fleet again (in a fleet:
// etcd may have lost it, restored from an older backup), and asks the
// controller, where it can say (LIST_VOLUMES with
// LIST_VOLUMES_PUBLISHED_NODES), whether the attached volume is still
// published to this node. An attachment the controller lost is published
// again (ControllerPublishVolume is idempotent), since the node still has
// the volume staged or published; a volume the controller no longer lists
// is recorded as the attachment's last error, and nothing else changes. A
// controller that cannot answer changes nothing.
func (j *job) checkAttachment(ctx context.Context) error {
	a := j.rec.GetAttachment()
	if a == nil || a.GetState() != stateAttached || firstPublished(j.rec) == nil {
		return nil
	}
	if err := j.recordAttachment(ctx, a); errors.Is(err, ErrClaimRefused) {
		// The node was away: its claim freed and maybe another node
		// holding the volume. Nothing is published to this node again.
		j.log.Warn("the fleet refuses this node's attachment: the volume is not published to this node again", "error", err)
		return j.noteAttachment(fleetPrefix + err.Error())
	} else if err != nil {
		j.log.Warn("could not record this node's attachment in the fleet again", "error", err)
	}
	ctrl, _, err := j.controllerClient(ctx, a.GetControllerSocket())
	if err != nil {
		j.log.Warn("cannot reach the controller: the attachment is not checked", "error", err)
		return nil
	}
	caps, err := ctrl.ControllerGetCapabilities(ctx)
	if err != nil || !caps.ListVolumes || !caps.ListVolumesPublishedNodes {
		return nil
	}
	nodes, listed, err := listedNodes(ctx, ctrl, j.rec.GetExternalId())
	if err != nil {
		j.log.Warn("ListVolumes failed: the attachment is not checked", "error", err)
		return nil
	}
	switch {
	case !listed:
		j.log.Warn("the controller no longer lists the attached volume", "external_id", j.rec.GetExternalId())
		return j.noteAttachment(listPrefix + fmt.Sprintf("the controller does not list volume %q", j.rec.GetExternalId()))
	case slices.Contains(nodes, a.GetNodeId()):
		return j.noteAttachment("")
	}
	j.log.Warn("the controller lost the attachment: attaching again", "node_id", a.GetNodeId(), "published_node_ids", nodes)
	vol, err := j.volume(ctx)
	if err != nil {
		return err
	}
	return j.controllerPublish(ctx, ctrl, vol, a)
}

// recordAttachment records attachment a, as far as it has come, under
// this node's ID in the fleet (cluster mode), with the plugin's node ID;
// on a single node the record is enough.
func (j *job) recordAttachment(ctx context.Context, a *messages.VolumeAttachment) error {
	if j.env.fleet == nil {
		return nil
	}
	state := model.AttachmentStateAttaching
	if a.GetState() == stateAttached {
		state = model.AttachmentStateAttached
	}
	_, err := j.env.fleet.Attach(ctx, j.key.namespace, j.key.id, &model.Attachment{NodeID: j.env.nodeID, ExternalNodeID: a.GetNodeId(), State: state})
	return catalogError(err, ErrClaimRefused)
}

// forgetAttachment removes the attachment of the fleet node node (this one
// when empty) from the fleet (cluster mode), once the controller has
// unpublished it; a volume that is gone holds none.
func (j *job) forgetAttachment(ctx context.Context, node string) error {
	if j.env.fleet == nil {
		return nil
	}
	_, err := j.env.fleet.Detach(ctx, j.key.namespace, j.key.id, cmp.Or(node, j.env.nodeID))
	err = catalogError(err, ErrClaimRefused)
	if errors.Is(err, ErrVolumeNotFound) {
		return nil
	}
	return err
}

// detachTarget is the plugin node ID an operator's detach of the volume
// from node sends to the controller. For a node of the fleet with a
// recorded attachment (named by its node ID or its plugin node ID), it is
// the recorded plugin node ID, with that fleet node as recorded, marked
// detaching in the fleet: that holds only while the node is down and
// claims nothing (ErrInUse otherwise), so a node that comes back keeps its
// attachment, and cannot attach again until the detach is done. Any other
// name is taken as a plugin node ID, and recorded is empty.
func (j *job) detachTarget(ctx context.Context, node string) (target, recorded string, err error) {
	v, err := j.env.fleet.GetVolume(ctx, j.key.namespace, j.key.id)
	if err != nil {
		return "", "", catalogError(err, ErrClaimRefused)
	}
	a := v.AttachmentNamed(node)
	if a == nil {
		return node, "", nil
	}
	if _, err := j.env.fleet.MarkDetaching(ctx, j.key.namespace, j.key.id, a.NodeID); err != nil {
		return "", "", catalogError(err, ErrInUse)
	}
	return a.ExternalNodeID, a.NodeID, nil
}

// noteAttachment records want as the attachment's last error, clearing
// one a reconcile recorded before; other errors stay.
func (j *job) noteAttachment(want string) error {
	a := j.rec.GetAttachment()
	last := a.GetLastError()
	if last == want || (want == "" && !strings.HasPrefix(last, listPrefix) && !strings.HasPrefix(last, fleetPrefix)) {
		return nil
	}
	a.LastError = want
	return j.save()
}

// listedNodes pages through the controller's ListVolumes until it finds
// volume id, and returns the nodes it is published to.
func listedNodes(ctx context.Context, ctrl *csi.Client, id string) (nodes []string, listed bool, err error) {
	token := ""
	for range maxListPages {
		resp, err := ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: token})
		if err != nil {
			return nil, false, err
		}
		for _, e := range resp.GetEntries() {
			if e.GetVolume().GetVolumeId() == id {
				return e.GetStatus().GetPublishedNodeIds(), true, nil
			}
		}
		if resp.GetNextToken() == "" || resp.GetNextToken() == token {
			return nil, false, nil
		}
		token = resp.GetNextToken()
	}
	return nil, false, fmt.Errorf("ListVolumes still had pages after %d", maxListPages)
}
