package catalog

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// This file holds the catalog actor's writes for the controller operations
// (create, delete, expand): one plugin volume per catalog volume, the
// Deleting marker, and the capacity the plugin reports.

// createdConflicts reports whether a plain registration of v over old, a
// volume created through the controller, must be refused: it would drop
// the plugin-side fields (the plugin's ID, the secrets) of a volume
// plugvisor must still delete.
func createdConflicts(old, v *model.CSIVolume) bool {
	return old != nil && old.Created && !v.Created
}

// createdConflictError is the refusal createdConflicts calls for.
func createdConflictError(key volumeKey, old *model.CSIVolume) error {
	return catalogErrorf(ErrVolumeConflict,
		"volume %s was created through plugin %q's controller (plugin volume %q): a registration cannot replace it; delete it, or register under another ID",
		key, old.PluginID, old.PluginVolumeID())
}

// externalIDTaken refuses a registration of v under key whose plugin
// volume (plugin, external ID) another catalog volume holds.
func (a *catalogActor) externalIDTaken(key volumeKey, v *model.CSIVolume) error {
	others := make([]*model.CSIVolume, 0, len(a.state.volumes))
	for _, k := range a.state.sortedVolumeKeys() {
		if k != key {
			others = append(others, a.state.volumes[k])
		}
	}
	return PluginVolumeTaken(v, others)
}

// PluginVolumeTaken refuses, with ErrVolumeConflict naming the volume that
// holds it, a registration of v whose plugin volume (plugin, external ID)
// one of others, volumes other than v, holds: a plugin volume lives in one
// catalog volume only.
func PluginVolumeTaken(v *model.CSIVolume, others []*model.CSIVolume) error {
	for _, o := range others {
		if o.PluginID == v.PluginID && o.PluginVolumeID() == v.PluginVolumeID() {
			return catalogErrorf(ErrVolumeConflict,
				"volume %s/%s: plugin %q volume %q is already catalog volume %q in namespace %q; a plugin volume lives in one namespace only (use that volume, or deregister it first)",
				v.Namespace, v.ID, v.PluginID, v.PluginVolumeID(), o.ID, o.Namespace)
		}
	}
	return nil
}

// deletingError is the refusal of a claim or registration of a volume
// being deleted.
func deletingError(key volumeKey) error {
	return catalogErrorf(ErrVolumeDeleting, "volume %s is being deleted: it takes no claim or new description; run the delete again to finish it", key)
}

func (a *catalogActor) applyMarkDeleting(w *catalogWrite, cmd *messages.MarkVolumeDeleting) (catalogChange, error) {
	return a.changeVolume(w, cmd.GetNamespace(), cmd.GetVolumeId(), nil, MarkDeletingOn)
}

func (a *catalogActor) applyRecordCapacity(w *catalogWrite, cmd *messages.RecordVolumeCapacity) (catalogChange, error) {
	var faceErr error
	if cmd.GetCapacityBytes() < 0 {
		faceErr = catalogErrorf(ErrInvalid, "volume %s/%s: capacity %d bytes is negative", cmp.Or(cmd.GetNamespace(), model.DefaultNamespace),
			cmd.GetVolumeId(), cmd.GetCapacityBytes())
	}
	return a.changeVolume(w, cmd.GetNamespace(), cmd.GetVolumeId(), faceErr, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		return RecordCapacityOn(v, cmd.GetCapacityBytes())
	})
}

// changeVolume runs rule on the volume (namespace, id) and returns the
// change it makes; a bad key, or faceErr, is bad on its face.
func (a *catalogActor) changeVolume(w *catalogWrite, namespace, id string, faceErr error,
	rule func(*model.CSIVolume) (*model.CSIVolume, error)) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(namespace, id)
	if err = cmp.Or(err, faceErr); err != nil {
		return change, err
	}
	v, err := a.state.volume(key)
	if err != nil {
		w.err = err
		return change, nil
	}
	return a.changeClaims(w, key, v, rule), nil
}

// MarkDeletingOn marks v as being deleted by the catalog's rules: a volume
// with any claim, held or being released, is ErrVolumeInUse naming the
// allocs; one marked already is returned as it is. v is never changed.
func MarkDeletingOn(v *model.CSIVolume) (*model.CSIVolume, error) {
	switch {
	case v.InUse() || len(v.PastClaims) > 0:
		return nil, catalogErrorf(ErrVolumeInUse, "volume %s/%s is claimed by allocs %s: they must release it before it is deleted",
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
func RecordCapacityOn(v *model.CSIVolume, capacityBytes int64) (*model.CSIVolume, error) {
	switch {
	case capacityBytes < 0:
		return nil, catalogErrorf(ErrInvalid, "volume %s/%s: capacity %d bytes is negative", v.Namespace, v.ID, capacityBytes)
	case v.Deleting:
		return nil, deletingError(volumeKey{v.Namespace, v.ID})
	case v.CapacityBytes == capacityBytes:
		return v, nil
	}
	changed := v.Copy()
	changed.CapacityBytes = capacityBytes
	return changed, nil
}

// DeregisterOf refuses, with ErrVolumeInUse naming the allocs or the
// nodes, to deregister v while allocs hold claims on it or nodes hold
// attachments of it.
func DeregisterOf(v *model.CSIVolume) error {
	if v.InUse() {
		return catalogErrorf(ErrVolumeInUse, "volume %s/%s is claimed by allocs %s: they must release it before it is deregistered",
			v.Namespace, v.ID, claimants(v))
	}
	if len(v.Attachments) > 0 {
		return attachedError(v, "deregistered")
	}
	return nil
}

// attachedError is the refusal to let v go (be deleted or deregistered,
// as what says) while nodes hold attachments of it.
func attachedError(v *model.CSIVolume, what string) error {
	return catalogErrorf(ErrVolumeInUse, "volume %s/%s is attached to nodes %s: it must be detached from them before it is %s (plugvisor volume detach %s NODE, once the node is down)",
		v.Namespace, v.ID, strings.Join(slices.Sorted(maps.Keys(v.Attachments)), ", "), what, v.ID)
}

// MarkVolumeDeleting marks a volume as being deleted, before DeleteVolume,
// and returns it (with its secrets, for the RPC). A volume with any claim,
// held or being released, is refused with ErrVolumeInUse naming the allocs;
// once marked, claims are refused with ErrVolumeDeleting. Marking again
// changes nothing. An empty namespace means the default one.
func (c *Catalog) MarkVolumeDeleting(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	resp, err := catalogCall[*messages.MarkVolumeDeletingResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.MarkVolumeDeleting{Namespace: namespace, VolumeId: id, ReplyTo: replyTo}
	})
	return volumeAnswer(resp, err)
}

// RecordVolumeCapacity records the capacity the plugin reported for a
// volume (after ControllerExpandVolume) and returns the volume. Claims do
// not stop it; a volume being deleted is refused with ErrVolumeDeleting.
func (c *Catalog) RecordVolumeCapacity(ctx context.Context, namespace, id string, capacityBytes int64) (*model.CSIVolume, error) {
	resp, err := catalogCall[*messages.RecordVolumeCapacityResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.RecordVolumeCapacity{Namespace: namespace, VolumeId: id, CapacityBytes: capacityBytes, ReplyTo: replyTo}
	})
	return volumeAnswer(resp, err)
}

// TopologyRequiredOf refuses v, a volume to register or create, when it
// names no topology (topologies, or a create's requirements, as
// withRequirements says) and its plugin p advertises
// VOLUME_ACCESSIBILITY_CONSTRAINTS: ErrTopologyRequired and
// ErrInvalid, naming the field and the remedy.
func TopologyRequiredOf(v *model.CSIVolume, p *model.CSIPlugin, withRequirements bool) error {
	if !p.TopologyRequired() || len(v.Topologies) > 0 || withRequirements {
		return nil
	}
	return &catalogError{
		text: fmt.Sprintf("csi: catalog: %v: %v: volume %s/%s: topologies: plugin %q advertises VOLUME_ACCESSIBILITY_CONSTRAINTS, so each of its volumes needs a topology: "+
			"give one (volume register -topology KEY=VALUE, the API's topologies; volume create -requisite or -preferred)",
			ErrInvalid, ErrTopologyRequired, cmp.Or(v.Namespace, model.DefaultNamespace), v.ID, v.PluginID),
		kinds: []error{ErrInvalid, ErrTopologyRequired},
	}
}

// CheckTopologyRequired is TopologyRequiredOf against the plugin as this
// node's catalog last recorded it durably (its fingerprints are this
// node's own, in a fleet too): the edge's look before any RPC.
func (c *Catalog) CheckTopologyRequired(v *model.CSIVolume, withRequirements bool) error {
	return TopologyRequiredOf(v, c.durable.Load().plugins[v.PluginID], withRequirements)
}
