package catalog

import (
	"cmp"
	"context"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// This file holds the catalog actor's writes for the controller operations
// (create, delete, expand): one plugin volume per catalog volume, the
// Deleting marker, and the capacity the plugin reports.

// externalIDTaken refuses a registration of v under key whose plugin
// volume (plugin, external ID) another catalog volume holds.
func (a *catalogActor) externalIDTaken(key volumeKey, v *model.CSIVolume) error {
	others := make([]*model.CSIVolume, 0, len(a.state.volumes))
	for _, k := range a.state.sortedVolumeKeys() {
		if k != key {
			others = append(others, a.state.volumes[k])
		}
	}
	return model.PluginVolumeTaken(v, others)
}

func (a *catalogActor) applyMarkDeleting(w *catalogWrite, cmd *messages.MarkVolumeDeleting) (catalogChange, error) {
	return a.changeVolume(w, cmd.GetNamespace(), cmd.GetVolumeId(), nil, model.MarkDeletingOn)
}

func (a *catalogActor) applyRecordCapacity(w *catalogWrite, cmd *messages.RecordVolumeCapacity) (catalogChange, error) {
	var faceErr error
	if cmd.GetCapacityBytes() < 0 {
		faceErr = model.Refusef(model.ErrInvalid, "volume %s/%s: capacity %d bytes is negative", cmp.Or(cmd.GetNamespace(), model.DefaultNamespace),
			cmd.GetVolumeId(), cmd.GetCapacityBytes())
	}
	return a.changeVolume(w, cmd.GetNamespace(), cmd.GetVolumeId(), faceErr, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		return model.RecordCapacityOn(v, cmd.GetCapacityBytes())
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

// MarkVolumeDeleting marks a volume as being deleted, before DeleteVolume,
// and returns it (with its secrets, for the RPC). A volume with any claim,
// held or being released, is refused with model.ErrVolumeInUse naming the allocs;
// once marked, claims are refused with model.ErrVolumeDeleting. Marking again
// changes nothing. An empty namespace means the default one.
func (c *Catalog) MarkVolumeDeleting(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	resp, err := catalogCall[*messages.MarkVolumeDeletingResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.MarkVolumeDeleting{Namespace: namespace, VolumeId: id, ReplyTo: replyTo}
	})
	return volumeAnswer(resp, err)
}

// RecordVolumeCapacity records the capacity the plugin reported for a
// volume (after ControllerExpandVolume) and returns the volume. Claims do
// not stop it; a volume being deleted is refused with model.ErrVolumeDeleting.
func (c *Catalog) RecordVolumeCapacity(ctx context.Context, namespace, id string, capacityBytes int64) (*model.CSIVolume, error) {
	resp, err := catalogCall[*messages.RecordVolumeCapacityResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.RecordVolumeCapacity{Namespace: namespace, VolumeId: id, CapacityBytes: capacityBytes, ReplyTo: replyTo}
	})
	return volumeAnswer(resp, err)
}

// CheckTopologyRequired is model.TopologyRequiredOf against the plugin as this
// node's catalog last recorded it durably (its fingerprints are this
// node's own, in a fleet too): the edge's look before any RPC.
func (c *Catalog) CheckTopologyRequired(v *model.CSIVolume, withRequirements bool) error {
	return model.TopologyRequiredOf(v, c.durable.Load().plugins[v.PluginID], withRequirements)
}
