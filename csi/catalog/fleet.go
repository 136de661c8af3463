package catalog

import (
	"cmp"
	"context"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// Fleet is the cluster-wide catalog that a node's catalog defers to in
// cluster mode: volumes, claims and every node's plugin health live there.
type Fleet interface {
	RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error)
	DeregisterVolume(ctx context.Context, namespace, id string) error
	ListVolumes(ctx context.Context, namespace string) ([]*model.CSIVolumeStub, error)
	GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error)
	// Claim applies c (c.NodeID is the claiming node) with the model's rules, atomically.
	Claim(ctx context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error)
	// Release moves c.AllocID's claim to c.State (ready-to-free removes it), atomically.
	Release(ctx context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error)
	MarkVolumeDeleting(ctx context.Context, namespace, id string) (*model.CSIVolume, error)
	RecordVolumeCapacity(ctx context.Context, namespace, id string, capacityBytes int64) (*model.CSIVolume, error)
	// Plugins are the plugins with health counts over every live node.
	Plugins(ctx context.Context) ([]*model.CSIPlugin, error)
	// PutFingerprints replaces this node's fingerprints (under its lease).
	PutFingerprints(ctx context.Context, fps []*messages.CSIFingerprint) error
	// Attach records a (a.NodeID is the attaching node) with the model's
	// rules, atomically: before ControllerPublishVolume is sent.
	Attach(ctx context.Context, namespace, id string, a *model.Attachment) (*model.CSIVolume, error)
	// Detach removes the attachment to node, atomically: once
	// ControllerUnpublishVolume has succeeded.
	Detach(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error)
	// MarkDetaching marks the attachment to node as being detached by
	// this node, atomically, before ControllerUnpublishVolume: refused
	// (ErrVolumeInUse) while node is up or holds a claim on the volume;
	// node cannot attach the volume again until Detach.
	MarkDetaching(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error)
	// CheckRoom is nil when the volume (namespace, id) could be registered
	// now as far as the fleet's volume limit goes, else ErrVolumeLimit.
	CheckRoom(ctx context.Context, namespace, id string) error
}

// The catalog's rules for one volume, as pure functions, so that a Fleet
// decides exactly as the catalog actor does and its errors match the same
// sentinels (and read the same) as the actor's.

// Errors of a fleet's node commands (drain, eligibility, forced free).
// Nothing changed when one is returned.
var (
	// ErrNodeNotFound: the fleet knows no such node: it is not up, is not
	// draining, and holds no claim and no attachment.
	ErrNodeNotFound = errclass.New(errclass.NotFound, "node not found")
	// ErrNodeDraining: the node is draining already (a drain), or is not
	// draining (a forced free of its claims).
	ErrNodeDraining = errclass.New(errclass.Conflict, "node drain state")
)

// DrainRefusal is the refusal, matching csi.ErrClaimRefused, of a new
// claim by an alloc of node, which has been draining since since.
func DrainRefusal(node string, since time.Time) error {
	return catalogErrorf(csi.ErrClaimRefused, "node %q is draining (since %s): it takes no new claim; plugvisor node eligibility -enable %s ends the drain",
		node, since.Format(time.RFC3339), node)
}

// FleetErrorf returns an error of the catalog that matches sentinel and
// reads "csi: catalog: <sentinel>: <detail>".
func FleetErrorf(sentinel error, format string, args ...any) error {
	return catalogErrorf(sentinel, format, args...)
}

// VolumeKey checks a namespace (empty means the default one) and a volume
// ID, and returns the namespace to use; bad ones are ErrInvalid.
func VolumeKey(namespace, id string) (string, error) {
	key, err := catalogVolumeKey(namespace, id)
	return key.namespace, err
}

// NotFound is the ErrVolumeNotFound error of the volume (namespace, id).
func NotFound(namespace, id string) error {
	return catalogErrorf(ErrVolumeNotFound, "no volume %q in namespace %q", id, namespace)
}

// RegisterOver is the registration of v over old (nil when the volume is
// new) by the catalog's rules: v is checked on its face (safe IDs, known
// modes, no claims: ErrInvalid); a volume being deleted is
// ErrVolumeDeleting; a plain registration over a volume created through
// the controller is ErrVolumeConflict; the same description again returns
// old itself; a new description of a volume in use is ErrVolumeInUse. It
// returns the volume to store: a copy of v with its external ID filled in,
// keeping old's create index and resource exhaustion; old and v are never
// changed. The uniqueness of plugin volumes and the volume limit are the
// caller's to check.
func RegisterOver(old, v *model.CSIVolume) (*model.CSIVolume, error) {
	v = v.Copy()
	v.Namespace = cmp.Or(v.Namespace, model.DefaultNamespace)
	key, err := catalogVolumeKey(v.Namespace, v.ID)
	if err == nil {
		err = checkRegistration(v)
	}
	if err != nil {
		return nil, err
	}
	v.ExternalID, v.Deleting = v.PluginVolumeID(), false
	switch {
	case old != nil && old.Deleting:
		return nil, deletingError(key)
	case createdConflicts(old, v):
		return nil, createdConflictError(key, old)
	case old.Equal(v):
		return old, nil
	case old != nil && old.InUse():
		return nil, catalogErrorf(ErrVolumeInUse, "volume %s is claimed by allocs %s: its description cannot change until they release it",
			key, claimants(old))
	case old != nil && len(old.Attachments) > 0:
		return nil, attachedError(old, "described anew")
	}
	v.CreateIndex, v.ModifyIndex, v.ResourceExhausted, v.Attachments = 0, 0, time.Time{}, nil
	if old != nil {
		v.CreateIndex, v.ResourceExhausted = old.CreateIndex, old.ResourceExhausted
	}
	return v, nil
}

// ClaimOn applies c, a claim in state taken, to v by the catalog's rules:
// c is checked on its face (ErrInvalid), a volume being deleted is
// ErrVolumeDeleting, and a refusal of the model is ErrClaimRefused with the
// model's sentinel. It returns a changed copy of v, or v itself when the
// claim changes nothing (the alloc holds it already); v is never changed.
func ClaimOn(v *model.CSIVolume, c *model.Claim) (*model.CSIVolume, error) {
	if err := checkClaim(c); err != nil {
		return nil, err
	}
	if v.Deleting {
		return nil, deletingError(volumeKey{v.Namespace, v.ID})
	}
	return changedClaims(v, func(v *model.CSIVolume) error { return v.Claim(c) })
}

// NodeFitOn is nil when the node that claims with c can take v by what
// its plugin said of it (node, nil when unknown), onNode being the other
// volumes of the plugin claimed there as "namespace/id"; else
// ErrClaimRefused with model.ErrTopologyMismatch or model.ErrNodeVolumeLimit
// (see model.CSIVolume.NodeFit). A Fleet calls it with the counts it read
// in, or guarded by, the claim's transaction.
func NodeFitOn(v *model.CSIVolume, c *model.Claim, node *model.NodeInfo, onNode []string) error {
	if err := v.NodeFit(c, node, onNode); err != nil {
		return catalogModelError(err)
	}
	return nil
}

// ReleaseOn moves the claim of c.AllocID on v to c.State (empty means
// ready-to-free, which removes it) by the catalog's rules: the node and
// mode are the held claim's (c need not name them), freeing a claim not
// held changes nothing, and a release to state taken is ErrInvalid. It returns a changed copy
// of v, or v itself when nothing changes; v is never changed.
func ReleaseOn(v *model.CSIVolume, c *model.Claim) (*model.CSIVolume, error) {
	claim := c.Copy()
	if claim.State == "" {
		claim.State = model.ClaimStateReadyToFree
	}
	if claim.Mode == "" {
		claim.Mode = model.ClaimModeRead
	}
	held := v.WriteClaims[claim.AllocID]
	if held == nil {
		held = v.ReadClaims[claim.AllocID]
	}
	switch {
	case held != nil:
		claim.NodeID, claim.Mode = held.NodeID, held.Mode
	case claim.State == model.ClaimStateReadyToFree:
		if err := names.Check("alloc ID", claim.AllocID); err != nil {
			return nil, catalogWrap(ErrInvalid, err)
		}
		return v, nil // nothing to free
	}
	if err := checkClaim(claim); err != nil {
		return nil, err
	}
	if claim.State == model.ClaimStateTaken {
		return nil, catalogErrorf(ErrInvalid, "release of alloc %s: state %q takes a claim; releasing needs a later state",
			claim.AllocID, claim.State)
	}
	return changedClaims(v, func(v *model.CSIVolume) error { return v.ClaimRelease(claim) })
}

// changedClaims runs a claim operation on a copy of v and returns the copy,
// or v itself when the operation changes no claim.
func changedClaims(v *model.CSIVolume, op func(*model.CSIVolume) error) (*model.CSIVolume, error) {
	changed := v.Copy()
	if err := op(changed); err != nil {
		return nil, catalogModelError(err)
	}
	if reflect.DeepEqual(
		[]map[string]*model.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims},
		[]map[string]*model.Claim{changed.ReadClaims, changed.WriteClaims, changed.PastClaims}) {
		return v, nil
	}
	return changed, nil
}

// AttachOn records a, the attachment of v to a.NodeID, by the catalog's
// rules: a is checked on its face (ErrInvalid); a node that holds no
// claim on v, and a second node's attachment of a single-node volume, are
// refused with ErrClaimRefused and the model's sentinel (ErrAttachRefused,
// ErrAttachConflict). It returns a changed copy of v, or v itself when the
// attachment is recorded already; v is never changed.
func AttachOn(v *model.CSIVolume, a *model.Attachment) (*model.CSIVolume, error) {
	if a == nil {
		return nil, catalogErrorf(ErrInvalid, "attachment must not be nil")
	}
	if reflect.DeepEqual(v.Attachments[a.NodeID], a) {
		return v, nil
	}
	changed := v.Copy()
	if err := changed.Attach(a); err != nil {
		return nil, catalogModelError(err)
	}
	return changed, nil
}

// DetachOn removes the attachment of v to node, by the catalog's rules: a
// bad node ID is ErrInvalid. It returns a changed copy of v, or v
// itself when v has no attachment to node; v is never changed.
func DetachOn(v *model.CSIVolume, node string) (*model.CSIVolume, error) {
	if err := names.Check("node ID", node); err != nil {
		return nil, catalogWrap(ErrInvalid, err)
	}
	if _, ok := v.Attachments[node]; !ok {
		return v, nil
	}
	changed := v.Copy()
	changed.Detach(node)
	return changed, nil
}

// MarkDetachingOn marks v's attachment to node as being detached by
// another node, by the catalog's rules: while node is up (up) or holds a
// claim on v, held or being released, it is refused with ErrVolumeInUse
// naming the remedy. An attachment marked already stays so (the detach
// goes on whatever node does since: it cannot attach meanwhile), and no
// attachment changes nothing. It returns a changed copy of v, or v itself
// when nothing changes; v is never changed.
func MarkDetachingOn(v *model.CSIVolume, node string, up bool) (*model.CSIVolume, error) {
	a := v.Attachments[node]
	if a == nil || a.State == model.AttachmentStateDetaching {
		return v, nil
	}
	if up {
		return nil, catalogErrorf(ErrVolumeInUse, "volume %s/%s is attached to node %s, which is up: that node detaches it itself once its last alloc unmounts it (its GC step retries a detach that failed); detach from another node only once it is down",
			v.Namespace, v.ID, node)
	}
	var allocs []string
	for _, c := range v.AllClaims() {
		if c.NodeID == node {
			allocs = append(allocs, c.AllocID)
		}
	}
	slices.Sort(allocs)
	if allocs = slices.Compact(allocs); len(allocs) > 0 { // a claim being released is held still
		return nil, catalogErrorf(ErrVolumeInUse, "node %s is down, but allocs %s still hold claims on volume %s/%s there: the fleet's GC frees them once the node has been down for the grace period (-cluster-gc-grace), or release them with `plugvisor volume release %s ALLOC`",
			node, strings.Join(allocs, ", "), v.Namespace, v.ID, v.ID)
	}
	changed := v.Copy()
	changed.MarkDetaching(node)
	return changed, nil
}
