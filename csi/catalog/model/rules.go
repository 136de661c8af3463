package model

import (
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/plugvisor/plugvisor/names"
)

// The catalog's rules for one volume, as pure functions, so that a Fleet
// decides exactly as the catalog actor does and its errors match the same
// sentinels (and read the same) as the actor's.

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
func RegisterOver(old, v *CSIVolume) (*CSIVolume, error) {
	v = v.Copy()
	v.Namespace = cmp.Or(v.Namespace, DefaultNamespace)
	_, err := VolumeKey(v.Namespace, v.ID)
	if err == nil {
		err = CheckRegistration(v)
	}
	if err != nil {
		return nil, err
	}
	v.ExternalID, v.Deleting = v.PluginVolumeID(), false
	switch {
	case old != nil && old.Deleting:
		return nil, deletingError(v)
	case createdConflicts(old, v):
		return nil, createdConflictError(v, old)
	case old.Equal(v):
		return old, nil
	case old != nil && old.InUse():
		return nil, Refusef(ErrVolumeInUse, "volume %s/%s is claimed by allocs %s: its description cannot change until they release it",
			v.Namespace, v.ID, claimants(old))
	case old != nil && len(old.Attachments) > 0:
		return nil, attachedError(old, "described anew")
	}
	v.CreateIndex, v.ModifyIndex, v.ResourceExhausted, v.Attachments = 0, 0, time.Time{}, nil
	if old != nil {
		v.CreateIndex, v.ResourceExhausted = old.CreateIndex, old.ResourceExhausted
	}
	if old != nil && old.PluginID == v.PluginID && old.PluginVolumeID() == v.PluginVolumeID() {
		// The parameters a modify set belong to the plugin's volume: a
		// description that names another keeps none of them.
		v.MutableParameters = maps.Clone(old.MutableParameters)
	}
	return v, nil
}

// ClaimOn applies c, a claim in state taken, to v by the catalog's rules:
// c is checked on its face (ErrInvalid), a volume being deleted is
// ErrVolumeDeleting, and a refusal of the model is ErrClaimRefused with the
// model's sentinel. It returns a changed copy of v, or v itself when the
// claim changes nothing (the alloc holds it already); v is never changed.
func ClaimOn(v *CSIVolume, c *Claim) (*CSIVolume, error) {
	if err := CheckClaim(c); err != nil {
		return nil, err
	}
	if v.Deleting {
		return nil, deletingError(v)
	}
	return changedClaims(v, func(v *CSIVolume) error { return v.Claim(c) })
}

// NodeFitOn is nil when the node that claims with c can take v by what
// its plugin said of it (node, nil when unknown), onNode being the other
// volumes of the plugin claimed there as "namespace/id"; else
// ErrClaimRefused with ErrTopologyMismatch or ErrNodeVolumeLimit
// (see CSIVolume.NodeFit). A Fleet calls it with the counts it read
// in, or guarded by, the claim's transaction.
func NodeFitOn(v *CSIVolume, c *Claim, node *NodeInfo, onNode []string) error {
	if err := v.NodeFit(c, node, onNode); err != nil {
		return Classify(err)
	}
	return nil
}

// ReleaseOn moves the claim of c.AllocID on v to c.State (empty means
// ready-to-free, which removes it) by the catalog's rules: the node and
// mode are the held claim's (c need not name them), freeing a claim not
// held changes nothing, and a release to state taken is ErrInvalid. It returns a changed copy
// of v, or v itself when nothing changes; v is never changed.
func ReleaseOn(v *CSIVolume, c *Claim) (*CSIVolume, error) {
	claim := c.Copy()
	if claim.State == "" {
		claim.State = ClaimStateReadyToFree
	}
	if claim.Mode == "" {
		claim.Mode = ClaimModeRead
	}
	held := v.WriteClaims[claim.AllocID]
	if held == nil {
		held = v.ReadClaims[claim.AllocID]
	}
	switch {
	case held != nil:
		claim.NodeID, claim.Mode = held.NodeID, held.Mode
	case claim.State == ClaimStateReadyToFree:
		if err := names.Check("alloc ID", claim.AllocID); err != nil {
			return nil, Refusal(ErrInvalid, err)
		}
		return v, nil // nothing to free
	}
	if err := CheckClaim(claim); err != nil {
		return nil, err
	}
	if claim.State == ClaimStateTaken {
		return nil, Refusef(ErrInvalid, "release of alloc %s: state %q takes a claim; releasing needs a later state",
			claim.AllocID, claim.State)
	}
	return changedClaims(v, func(v *CSIVolume) error { return v.ClaimRelease(claim) })
}

// changedClaims runs a claim operation on a copy of v and returns the copy,
// or v itself when the operation changes no claim.
func changedClaims(v *CSIVolume, op func(*CSIVolume) error) (*CSIVolume, error) {
	changed := v.Copy()
	if err := op(changed); err != nil {
		return nil, Classify(err)
	}
	if reflect.DeepEqual(
		[]map[string]*Claim{v.ReadClaims, v.WriteClaims, v.PastClaims},
		[]map[string]*Claim{changed.ReadClaims, changed.WriteClaims, changed.PastClaims}) {
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
func AttachOn(v *CSIVolume, a *Attachment) (*CSIVolume, error) {
	if a == nil {
		return nil, Refusef(ErrInvalid, "attachment must not be nil")
	}
	if reflect.DeepEqual(v.Attachments[a.NodeID], a) {
		return v, nil
	}
	changed := v.Copy()
	if err := changed.Attach(a); err != nil {
		return nil, Classify(err)
	}
	return changed, nil
}

// DetachOn removes the attachment of v to node, by the catalog's rules: a
// bad node ID is ErrInvalid. It returns a changed copy of v, or v
// itself when v has no attachment to node; v is never changed.
func DetachOn(v *CSIVolume, node string) (*CSIVolume, error) {
	if err := names.Check("node ID", node); err != nil {
		return nil, Refusal(ErrInvalid, err)
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
func MarkDetachingOn(v *CSIVolume, node string, up bool) (*CSIVolume, error) {
	a := v.Attachments[node]
	if a == nil || a.State == AttachmentStateDetaching {
		return v, nil
	}
	if up {
		return nil, Refusef(ErrVolumeInUse, "volume %s/%s is attached to node %s, which is up: that node detaches it itself once its last alloc unmounts it (its GC step retries a detach that failed); detach from another node only once it is down",
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
		return nil, Refusef(ErrVolumeInUse, "node %s is down, but allocs %s still hold claims on volume %s/%s there: the fleet's GC frees them once the node has been down for the grace period (-cluster-gc-grace), or release them with `plugvisor volume release %s ALLOC`",
			node, strings.Join(allocs, ", "), v.Namespace, v.ID, v.ID)
	}
	changed := v.Copy()
	changed.MarkDetaching(node)
	return changed, nil
}

// createdConflicts reports whether a plain registration of v over old, a
// volume created through the controller, must be refused: it would drop
// the plugin-side fields (the plugin's ID, the secrets) of a volume
// plugvisor must still delete.
func createdConflicts(old, v *CSIVolume) bool {
	return old != nil && old.Created && !v.Created
}

// createdConflictError is the refusal createdConflicts calls for.
func createdConflictError(v, old *CSIVolume) error {
	return Refusef(ErrVolumeConflict,
		"volume %s/%s was created through plugin %q's controller (plugin volume %q): a registration cannot replace it; delete it, or register under another ID",
		v.Namespace, v.ID, old.PluginID, old.PluginVolumeID())
}

// deletingError is the refusal of a claim or registration of a volume
// being deleted.
func deletingError(v *CSIVolume) error {
	return Refusef(ErrVolumeDeleting, "volume %s/%s is being deleted: it takes no claim or new description; run the delete again to finish it", v.Namespace, v.ID)
}

// MarkDeletingOn marks v as being deleted by the catalog's rules: a volume
// with any claim, held or being released, is ErrVolumeInUse naming the
// allocs; one marked already is returned as it is. v is never changed.
func MarkDeletingOn(v *CSIVolume) (*CSIVolume, error) {
	switch {
	case v.InUse() || len(v.PastClaims) > 0:
		return nil, Refusef(ErrVolumeInUse, "volume %s/%s is claimed by allocs %s: they must release it before it is deleted",
			v.Namespace, v.ID, strings.Join(v.Claimants(), ", "))
	case len(v.Attachments) > 0:
		return nil, attachedError(v, "deleted")
	case v.Deleting:
		return v, nil
	}
	changed := v.Copy()
	changed.Deleting = true
	return changed, nil
}

// RecordCapacityOn records the capacity the plugin reported for v by the
// catalog's rules: negative is ErrInvalid, a volume being deleted
// ErrVolumeDeleting; the same capacity returns v itself. v is never changed.
func RecordCapacityOn(v *CSIVolume, capacityBytes int64) (*CSIVolume, error) {
	switch {
	case capacityBytes < 0:
		return nil, Refusef(ErrInvalid, "volume %s/%s: capacity %d bytes is negative", v.Namespace, v.ID, capacityBytes)
	case v.Deleting:
		return nil, deletingError(v)
	case v.CapacityBytes == capacityBytes:
		return v, nil
	}
	changed := v.Copy()
	changed.CapacityBytes = capacityBytes
	return changed, nil
}

// RecordModifyOn merges params, the mutable parameters a
// ControllerModifyVolume set, into v's: a key given again takes its new
// value. It returns a changed copy of v, or v itself when nothing changes.
// Bad params (none, an empty key, more than MaxMutableParameters in all)
// are ErrInvalid naming the field; a volume being deleted is
// ErrVolumeDeleting. v is never changed.
func RecordModifyOn(v *CSIVolume, params map[string]string) (*CSIVolume, error) {
	merged := maps.Clone(v.MutableParameters)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, params)
	switch _, empty := params[""]; {
	case len(params) == 0:
		return nil, Refusef(ErrInvalid, "volume %s/%s: mutable_parameters must not be empty", v.Namespace, v.ID)
	case empty:
		return nil, Refusef(ErrInvalid, "volume %s/%s: mutable_parameters has an empty key", v.Namespace, v.ID)
	case len(merged) > MaxMutableParameters:
		return nil, Refusef(ErrInvalid, "volume %s/%s: mutable_parameters would hold %d keys, over the limit of %d (model.MaxMutableParameters)",
			v.Namespace, v.ID, len(merged), MaxMutableParameters)
	case v.Deleting:
		return nil, deletingError(v)
	case maps.Equal(merged, v.MutableParameters):
		return v, nil
	}
	changed := v.Copy()
	changed.MutableParameters = merged
	return changed, nil
}

// DeregisterOf refuses, with ErrVolumeInUse naming the allocs or the
// nodes, to deregister v while allocs hold claims on it or nodes hold
// attachments of it.
func DeregisterOf(v *CSIVolume) error {
	if v.InUse() {
		return Refusef(ErrVolumeInUse, "volume %s/%s is claimed by allocs %s: they must release it before it is deregistered",
			v.Namespace, v.ID, claimants(v))
	}
	if len(v.Attachments) > 0 {
		return attachedError(v, "deregistered")
	}
	return nil
}

// attachedError is the refusal to let v go (be deleted or deregistered,
// as what says) while nodes hold attachments of it.
func attachedError(v *CSIVolume, what string) error {
	return Refusef(ErrVolumeInUse, "volume %s/%s is attached to nodes %s: it must be detached from them before it is %s (plugvisor volume detach %s NODE, once the node is down)",
		v.Namespace, v.ID, strings.Join(slices.Sorted(maps.Keys(v.Attachments)), ", "), what, v.ID)
}

// CheckRegistration checks the description of a volume to register: safe
// IDs, known modes, well-formed topologies, and no claims.
func CheckRegistration(v *CSIVolume) error {
	if err := names.Check("plugin ID", v.PluginID); err != nil {
		return Refusal(ErrInvalid, err)
	}
	if v.InUse() || len(v.PastClaims) > 0 {
		return Refusef(ErrInvalid, "volume %q: a registration carries no claims (allocs claim with ClaimVolume)", v.ID)
	}
	if err := v.Validate(); err != nil {
		return Refusal(ErrInvalid, err)
	}
	return nil
}

// claimants lists, sorted, the allocs that hold claims on v.
func claimants(v *CSIVolume) string {
	allocs := slices.Concat(slices.Collect(maps.Keys(v.ReadClaims)), slices.Collect(maps.Keys(v.WriteClaims)))
	slices.Sort(allocs)
	return strings.Join(allocs, ", ")
}

// CheckClaim checks a claim's alloc, node and mode on their face.
func CheckClaim(c *Claim) error {
	if err := cmp.Or(names.Check("alloc ID", c.AllocID), names.Check("node ID", c.NodeID)); err != nil {
		return Refusal(ErrInvalid, err)
	}
	if err := cmp.Or(c.Mode.Validate(), c.State.Validate()); err != nil {
		return Refusal(ErrInvalid, err)
	}
	return nil
}
