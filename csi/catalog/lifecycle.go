package catalog

import (
	"context"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// This file holds the catalog actor's writes for the controller operations
// (create, delete, expand): one plugin volume per catalog volume, the
// Deleting marker, and the capacity the plugin reports.

// createdConflict refuses, in w.err, a plain registration of v over a
// volume that was created through the controller: it would drop the
// plugin-side fields (the plugin's ID, the secrets) of a volume plugvisor
// must still delete.
func createdConflict(w *catalogWrite, key volumeKey, old, v *model.CSIVolume) bool {
	if old == nil || !old.Created || v.Created {
		return false
	}
	w.err = catalogErrorf(ErrVolumeConflict,
		"volume %s was created through plugin %q's controller (plugin volume %q): a registration cannot replace it; delete it, or register under another ID",
		key, old.PluginID, old.PluginVolumeID())
	return true
}

// externalIDTaken refuses, in w.err, a registration of v under key whose
// plugin volume (plugin, external ID) another catalog volume holds.
func (a *catalogActor) externalIDTaken(w *catalogWrite, key volumeKey, v *model.CSIVolume) bool {
	for _, other := range a.state.sortedVolumeKeys() {
		o := a.state.volumes[other]
		if other != key && o.PluginID == v.PluginID && o.PluginVolumeID() == v.ExternalID {
			w.err = catalogErrorf(ErrVolumeConflict,
				"volume %s: plugin %q volume %q is already catalog volume %q in namespace %q; a plugin volume lives in one namespace only (use that volume, or deregister it first)",
				key, v.PluginID, v.ExternalID, o.ID, o.Namespace)
			return true
		}
	}
	return false
}

// deletingError is the refusal of a claim or registration of a volume
// being deleted.
func deletingError(key volumeKey) error {
	return catalogErrorf(ErrVolumeDeleting, "volume %s is being deleted: it takes no claim or new description; run the delete again to finish it", key)
}

func (a *catalogActor) applyMarkDeleting(w *catalogWrite, cmd *messages.MarkVolumeDeleting) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(cmd.GetNamespace(), cmd.GetVolumeId())
	if err != nil {
		return change, err
	}
	v, err := a.state.volume(key)
	switch {
	case err != nil:
		w.err = err
	case v.InUse() || len(v.PastClaims) > 0:
		w.err = catalogErrorf(ErrVolumeInUse, "volume %s is claimed by allocs %s: they must release it before it is deleted",
			key, strings.Join(v.Claimants(), ", "))
	case v.Deleting:
		w.volume = v // marked already: nothing changes
	default:
		changed := v.Copy()
		changed.Deleting = true
		change.putVolume(key, changed)
		w.volume = changed
	}
	return change, nil
}

func (a *catalogActor) applyRecordCapacity(w *catalogWrite, cmd *messages.RecordVolumeCapacity) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(cmd.GetNamespace(), cmd.GetVolumeId())
	if err == nil && cmd.GetCapacityBytes() < 0 {
		err = catalogErrorf(ErrCatalogInvalid, "volume %s: capacity %d bytes is negative", key, cmd.GetCapacityBytes())
	}
	if err != nil {
		return change, err
	}
	v, err := a.state.volume(key)
	switch {
	case err != nil:
		w.err = err
	case v.Deleting:
		w.err = deletingError(key)
	case v.CapacityBytes == cmd.GetCapacityBytes():
		w.volume = v
	default:
		changed := v.Copy()
		changed.CapacityBytes = cmd.GetCapacityBytes()
		change.putVolume(key, changed)
		w.volume = changed
	}
	return change, nil
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
