package model

import (
	"maps"
	"slices"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// AttachmentState is how far a volume's attachment to a node has come.
type AttachmentState string

// The states of an attachment.
const (
	// AttachmentStateAttaching: ControllerPublishVolume is (or may have
	// been) sent; the node may hold the volume.
	AttachmentStateAttaching AttachmentState = "attaching"
	// AttachmentStateAttached: the controller published the volume to the
	// node.
	AttachmentStateAttached AttachmentState = "attached"
	// AttachmentStateDetaching: another node is detaching the volume from
	// this one, which is down and holds no claim on it; the node cannot
	// attach it again until the detach is done.
	AttachmentStateDetaching AttachmentState = "detaching"
)

// maxExternalNodeID is the CSI spec's bound on a node ID.
const maxExternalNodeID = 256

// Attachment is a volume published to a node by its plugin's controller
// (ControllerPublishVolume), as a fleet records it: it is recorded before
// the controller is asked and removed only once the controller has
// unpublished it, so a node that holds the volume always has one.
type Attachment struct {
	// NodeID is the agent's node the volume is attached to.
	NodeID string
	// ExternalNodeID is the plugin's ID of that node (NodeGetInfo), the one
	// ControllerUnpublishVolume takes: with it, any node that runs the
	// controller can detach the volume from a node that is down.
	ExternalNodeID string
	State          AttachmentState
}

// Copy returns a copy of a; nil for nil.
func (a *Attachment) Copy() *Attachment {
	if a == nil {
		return nil
	}
	out := *a
	return &out
}

// Validate returns nil when every field of a is set to a known value, and
// an error matching ErrInvalidAttachment otherwise.
func (a *Attachment) Validate() error { return a.check() }

func (a *Attachment) check() error {
	switch {
	case a == nil:
		return errorf(ErrInvalidAttachment, "attachment is nil")
	case a.NodeID == "":
		return errorf(ErrInvalidAttachment, "attachment: node ID must not be empty")
	case a.ExternalNodeID == "" || len(a.ExternalNodeID) > maxExternalNodeID:
		return errorf(ErrInvalidAttachment, "attachment to node %s: the plugin's node ID must be 1 to %d bytes, not %d",
			a.NodeID, maxExternalNodeID, len(a.ExternalNodeID))
	case a.State != AttachmentStateAttaching && a.State != AttachmentStateAttached && a.State != AttachmentStateDetaching:
		return errorf(ErrInvalidAttachment, "attachment to node %s: state %q is not %q, %q or %q",
			a.NodeID, a.State, AttachmentStateAttaching, AttachmentStateAttached, AttachmentStateDetaching)
	}
	if err := names.Check("node ID", a.NodeID); err != nil {
		return errorf(ErrInvalidAttachment, "attachment: %v", err)
	}
	return nil
}

// Attach records a, the attachment of v to a.NodeID, in v. The node must
// hold a claim on v (ErrAttachRefused otherwise), and a volume whose
// access mode allows a single node is attached to one node at a time:
// while another node holds an attachment, a is refused with
// ErrAttachConflict, as kubelet refuses a second attachment of a
// ReadWriteOnce volume. Recording again what is recorded changes nothing.
func (v *CSIVolume) Attach(a *Attachment) error {
	if err := a.check(); err != nil {
		return err
	}
	if !slices.Contains(v.claimNodes(), a.NodeID) {
		return errorf(ErrAttachRefused, "volume %s: node %s holds no claim on it: claim it before attaching it", v.ID, a.NodeID)
	}
	if old := v.Attachments[a.NodeID]; old != nil && old.State == AttachmentStateDetaching {
		return errorf(ErrAttachConflict, "volume %s is being detached from node %s by another node, while node %s was down: retry once the detach is done",
			v.ID, a.NodeID, a.NodeID)
	}
	if v.AccessMode.SingleNode() {
		for _, node := range slices.Sorted(maps.Keys(v.Attachments)) {
			if other := v.Attachments[node]; node != a.NodeID {
				return errorf(ErrAttachConflict,
					"volume %s (%s) is attached to node %s (%s, plugin node ID %q): it must be detached there first, by that node, or, once it is down, from any node with `plugvisor volume detach %s %s`",
					v.ID, v.AccessMode, node, other.State, other.ExternalNodeID, v.ID, node)
			}
		}
	}
	if v.Attachments == nil {
		v.Attachments = map[string]*Attachment{}
	}
	v.Attachments[a.NodeID] = a.Copy()
	return nil
}

// MarkDetaching marks v's attachment to node as being detached by another
// node, so that node cannot attach v again meanwhile. It reports whether
// there was an attachment to mark. Whether node may be detached from
// another node (down, no claim) is the caller's to check.
func (v *CSIVolume) MarkDetaching(node string) bool {
	a := v.Attachments[node]
	if a == nil {
		return false
	}
	a.State = AttachmentStateDetaching
	return true
}

// Detach removes the attachment of v to node; it reports whether there was
// one.
func (v *CSIVolume) Detach(node string) bool {
	_, ok := v.Attachments[node]
	delete(v.Attachments, node)
	return ok
}

// checkAttachments reports, through bad and within, what is wrong with v's
// attachments.
// AttachmentNamed is v's attachment to node, named by its node ID or by
// its plugin node ID (the first by node ID when several share one), or
// nil.
func (v *CSIVolume) AttachmentNamed(node string) *Attachment {
	for _, n := range slices.Sorted(maps.Keys(v.Attachments)) {
		if a := v.Attachments[n]; a.NodeID == node || a.ExternalNodeID == node {
			return a
		}
	}
	return nil
}

func (v *CSIVolume) checkAttachments(bad func(string, ...any), add func(error)) {
	for _, node := range slices.Sorted(maps.Keys(v.Attachments)) {
		a := v.Attachments[node]
		if err := a.check(); err != nil {
			add(within(err, ErrInvalidVolume, "attachment filed under node %s", node))
		} else if a.NodeID != node {
			bad("attachment filed under node %s belongs to node %s", node, a.NodeID)
		}
	}
	if n := len(v.Attachments); v.AccessMode.SingleNode() && n > 1 {
		bad("is attached to %d nodes (%v); %s allows one node", n, slices.Sorted(maps.Keys(v.Attachments)), v.AccessMode)
	}
}

// AttachmentToProto returns a in its protobuf form.
func AttachmentToProto(a *Attachment) *messages.CatalogAttachment {
	return &messages.CatalogAttachment{NodeId: a.NodeID, ExternalNodeId: a.ExternalNodeID, State: string(a.State)}
}

// AttachmentFromProto returns the attachment m describes, taken as spelled:
// run Validate on it.
func AttachmentFromProto(m *messages.CatalogAttachment) *Attachment {
	return &Attachment{NodeID: m.GetNodeId(), ExternalNodeID: m.GetExternalNodeId(), State: AttachmentState(m.GetState())}
}
