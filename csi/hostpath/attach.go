package hostpath

import (
	"context"
	"crypto/rand"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The keys of the publish context ControllerPublishVolume returns when
// Config.AttachRequired is set. A node refuses NodeStageVolume and
// NodePublishVolume without them, or with values of another attachment.
const (
	// PublishContextAttachmentID holds the attachment's random ID, new at
	// each attach: a publish context kept from before a detach is stale.
	PublishContextAttachmentID = "hostpath.csi.plugvisor.io/attachment-id"
	// PublishContextNodeID holds the node the volume is attached to.
	PublishContextNodeID = "hostpath.csi.plugvisor.io/node-id"
)

// errNoAttach answers the attach RPCs of a driver that does not advertise
// PUBLISH_UNPUBLISH_VOLUME.
var errNoAttach = status.Error(codes.Unimplemented, "hostpath: ControllerPublishVolume and ControllerUnpublishVolume need -attach-required")

// ControllerPublishVolume attaches a volume to a node (AttachRequired only)
// and returns the publish context its node calls must carry. Attaching again
// with the same capability and read-only flag returns the same context; with
// others it fails with AlreadyExists. A volume attached to another node fails
// with FailedPrecondition (every mode is single-node), an unknown volume or
// node with NotFound, and attaching more than MaxVolumes volumes to this
// driver's own node with ResourceExhausted.
func (s *controllerServer) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	d := s.d
	if !d.cfg.AttachRequired {
		return nil, errNoAttach
	}
	id, node := req.GetVolumeId(), req.GetNodeId()
	if err := errors.Join(checkID("volume", id), checkID("node", node), checkCapability(req.GetVolumeCapability())); err != nil {
		return nil, invalidArgument(err)
	}
	want := attachment{Readonly: req.GetReadonly(), AccessMode: req.GetVolumeCapability().GetAccessMode().GetMode()}
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, err := d.requireVolumeLocked(id)
	if err != nil {
		return nil, err
	}
	if err := d.requireNode(node); err != nil {
		return nil, err
	}
	if have, ok := rec.Attachments[node]; ok {
		if have.Readonly != want.Readonly || have.AccessMode != want.AccessMode {
			return nil, status.Errorf(codes.AlreadyExists, "hostpath: volume %s is already attached to node %s with readonly=%t and access mode %s", id, node, have.Readonly, have.AccessMode)
		}
		return &csi.ControllerPublishVolumeResponse{PublishContext: have.publishContext(node)}, nil
	}
	if others := slices.Sorted(maps.Keys(rec.Attachments)); len(others) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is attached to node %s; access mode %s allows one node: detach it there first", id, strings.Join(others, ", "), want.AccessMode)
	}
	if err := d.checkAttachLimit(node); err != nil {
		return nil, err
	}
	want.ID = rand.Text()
	if rec.Attachments == nil {
		rec.Attachments = map[string]attachment{}
	}
	rec.Attachments[node] = want
	if err := writeJSON(d.volumeFile(id), rec); err != nil {
		return nil, internal(err)
	}
	d.log.Info("hostpath: attached volume", "volume_id", id, "node_id", node, "readonly", want.Readonly)
	return &csi.ControllerPublishVolumeResponse{PublishContext: want.publishContext(node)}, nil
}

// publishContext is the publish context of the attachment to node.
func (a attachment) publishContext(node string) map[string]string {
	return map[string]string{PublishContextAttachmentID: a.ID, PublishContextNodeID: node}
}

// requireNode fails with NotFound unless a node plugin of that ID has
// started on the root (or it is this driver's own node).
func (d *Driver) requireNode(node string) error {
	if node == d.cfg.NodeID && d.cfg.Mode.node() {
		return nil
	}
	exists, err := d.nodeExists(node)
	if err != nil {
		return internal(err)
	}
	if !exists {
		return status.Errorf(codes.NotFound, "hostpath: node %s does not exist: no node plugin with that ID has started on root %s", node, d.cfg.Root)
	}
	return nil
}

// checkAttachLimit fails with ResourceExhausted when node is this driver's
// own node and already has MaxVolumes volumes attached. The limit of other
// nodes is theirs to report.
func (d *Driver) checkAttachLimit(node string) error {
	limit := d.cfg.MaxVolumes
	if limit == 0 || node != d.cfg.NodeID {
		return nil
	}
	ids, err := d.volumeIDs()
	if err != nil {
		return internal(err)
	}
	var n int64
	for _, id := range ids {
		rec, _, err := d.loadVolume(id)
		if err != nil {
			return internal(err)
		}
		if _, ok := rec.Attachments[node]; ok {
			n++
		}
	}
	if n >= limit {
		return status.Errorf(codes.ResourceExhausted, "hostpath: node %s already has %d volumes attached, its limit", node, n)
	}
	return nil
}

// ControllerUnpublishVolume detaches a volume from a node, or from every
// node when node_id is empty (AttachRequired only). A volume or node that is
// unknown, or a volume not attached there, is already detached. A volume the
// node still stages or publishes is not detached (FailedPrecondition): a
// strict driver never pulls a disk from under a mount.
func (s *controllerServer) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	d := s.d
	if !d.cfg.AttachRequired {
		return nil, errNoAttach
	}
	id, node := req.GetVolumeId(), req.GetNodeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	if node != "" {
		if err := checkID("node", node); err != nil {
			return nil, invalidArgument(err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, found, err := d.loadVolume(id)
	if err != nil {
		return nil, internal(err)
	}
	nodes := []string{node}
	if node == "" {
		nodes = slices.Sorted(maps.Keys(rec.Attachments))
	}
	var detach []string
	for _, n := range nodes {
		if _, ok := rec.Attachments[n]; !found || !ok {
			continue
		}
		uses, err := d.nodeUses(n, id)
		if err != nil {
			return nil, internal(err)
		}
		if uses {
			return nil, status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is still staged or published on node %s: unpublish and unstage it there before detaching", id, n)
		}
		detach = append(detach, n)
	}
	if len(detach) == 0 {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	for _, n := range detach {
		delete(rec.Attachments, n)
	}
	if err := writeJSON(d.volumeFile(id), rec); err != nil {
		return nil, internal(err)
	}
	d.log.Info("hostpath: detached volume", "volume_id", id, "node_id", strings.Join(detach, ","))
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// checkAttached is what a node checks in AttachRequired mode before staging
// or publishing volume rec: that it is attached to this node, and that the
// publish context is that attachment's. A missing context is InvalidArgument
// (the CO did not pass it back); no attachment, or a context of another
// attachment, is FailedPrecondition.
func (d *Driver) checkAttached(rec volumeRecord, publishContext map[string]string) error {
	if !d.cfg.AttachRequired {
		return nil
	}
	node := d.cfg.NodeID
	a, ok := rec.Attachments[node]
	if !ok {
		return status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is not attached to node %s: call ControllerPublishVolume first", rec.ID, node)
	}
	got, ok := publishContext[PublishContextAttachmentID]
	if !ok {
		return status.Errorf(codes.InvalidArgument, "hostpath: publish context lacks %s: pass back the publish context ControllerPublishVolume returned", PublishContextAttachmentID)
	}
	if got != a.ID || publishContext[PublishContextNodeID] != node {
		return status.Errorf(codes.FailedPrecondition, "hostpath: publish context is not that of the attachment of volume %s to node %s: it is stale or from another node", rec.ID, node)
	}
	return nil
}

// attachedNodes returns the nodes rec is attached to or that stage or
// publish it, sorted: its published_node_ids.
func (d *Driver) attachedNodes(rec volumeRecord) ([]string, error) {
	using, err := d.nodesUsing(rec.ID)
	if err != nil {
		return nil, err
	}
	nodes := slices.AppendSeq(using, maps.Keys(rec.Attachments))
	slices.Sort(nodes)
	return slices.Compact(nodes), nil
}

// errInUse is the FailedPrecondition DeleteVolume answers for a volume in use.
func errInUse(id string, nodes []string) error {
	return status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is still attached, staged or published on node %s", id, strings.Join(nodes, ", "))
}
