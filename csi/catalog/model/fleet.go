package model

import (
	"context"

	"github.com/plugvisor/plugvisor/messages"
)

// Fleet is the cluster-wide catalog that a node's catalog defers to in
// cluster mode: volumes, claims and every node's plugin health live there.
type Fleet interface {
	RegisterVolume(ctx context.Context, v *CSIVolume) (*CSIVolume, error)
	DeregisterVolume(ctx context.Context, namespace, id string) error
	ListVolumes(ctx context.Context, namespace string) ([]*CSIVolumeStub, error)
	GetVolume(ctx context.Context, namespace, id string) (*CSIVolume, error)
	// Claim applies c (c.NodeID is the claiming node) with the model's rules, atomically.
	Claim(ctx context.Context, namespace, id string, c *Claim) (*CSIVolume, error)
	// Release moves c.AllocID's claim to c.State (ready-to-free removes it), atomically.
	Release(ctx context.Context, namespace, id string, c *Claim) (*CSIVolume, error)
	MarkVolumeDeleting(ctx context.Context, namespace, id string) (*CSIVolume, error)
	RecordVolumeCapacity(ctx context.Context, namespace, id string, capacityBytes int64) (*CSIVolume, error)
	// Plugins are the plugins with health counts over every live node.
	Plugins(ctx context.Context) ([]*CSIPlugin, error)
	// PutFingerprints replaces this node's fingerprints (under its lease).
	PutFingerprints(ctx context.Context, fps []*messages.CSIFingerprint) error
	// Attach records a (a.NodeID is the attaching node) with the model's
	// rules, atomically: before ControllerPublishVolume is sent.
	Attach(ctx context.Context, namespace, id string, a *Attachment) (*CSIVolume, error)
	// Detach removes the attachment to node, atomically: once
	// ControllerUnpublishVolume has succeeded.
	Detach(ctx context.Context, namespace, id, node string) (*CSIVolume, error)
	// MarkDetaching marks the attachment to node as being detached by
	// this node, atomically, before ControllerUnpublishVolume: refused
	// (ErrVolumeInUse) while node is up or holds a claim on the volume;
	// node cannot attach the volume again until Detach.
	MarkDetaching(ctx context.Context, namespace, id, node string) (*CSIVolume, error)
	// CheckRoom is nil when the volume (namespace, id) could be registered
	// now as far as the fleet's volume limit goes, else ErrVolumeLimit.
	CheckRoom(ctx context.Context, namespace, id string) error
}

// BatchFleet is a Fleet that registers and deregisters batches, all or
// nothing, in one transaction. A Fleet without it refuses batches.
type BatchFleet interface {
	// RegisterVolumes registers vs by the catalog's rules (RegisterOver,
	// the plugin volumes' uniqueness and the volume limit), all of them or
	// none, and returns them as registered, in order.
	RegisterVolumes(ctx context.Context, vs []*CSIVolume) ([]*CSIVolume, error)
	// DeregisterVolumes forgets the volumes ids of namespace by the
	// catalog's rules (DeregisterOf), all of them or none.
	DeregisterVolumes(ctx context.Context, namespace string, ids []string) error
}

// ModifyFleet is a Fleet that records the mutable parameters a
// ControllerModifyVolume set. A Fleet without it refuses the record.
type ModifyFleet interface {
	// RecordVolumeModify merges params into the volume's mutable
	// parameters by the catalog's rule (RecordModifyOn), atomically.
	RecordVolumeModify(ctx context.Context, namespace, id string, params map[string]string) (*CSIVolume, error)
}

// NodeClaims is what a fleet's claim index says of one volume on one
// node, as the node's watch of its index sees each change (fleet's
// Store.WatchNode): which allocs of the node hold a claim on the volume.
// The node's volume manager takes down a publish whose alloc is no longer
// among them.
type NodeClaims struct {
	Namespace, VolumeID string
	// Allocs are the allocs of the node that hold a claim (in any state)
	// on the volume, sorted; none once the node holds no claim on it.
	Allocs []string
	// Known is false when the index did not say which allocs (its key was
	// written by an agent of an earlier version): the volume must be read.
	Known bool
}

// Holds reports whether alloc holds a claim, as far as c knows: true
// when c does not know.
func (c NodeClaims) Holds(alloc string) bool {
	if !c.Known {
		return true
	}
	for _, a := range c.Allocs {
		if a == alloc {
			return true
		}
	}
	return false
}
