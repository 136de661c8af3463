package catalog

import (
	"context"
	"maps"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// RecordVolumeModify records the mutable parameters a ControllerModifyVolume
// set on a volume, merged into those it has (a key given again takes its
// new value), and returns the volume. Claims do not stop it; a volume
// being deleted is refused with model.ErrVolumeDeleting, bad parameters (none,
// an empty key, more than model.MaxMutableParameters in all) with
// model.ErrInvalid. In cluster mode the fleet records them (model.ModifyFleet).
func (c *Catalog) RecordVolumeModify(ctx context.Context, namespace, id string, params map[string]string) (*model.CSIVolume, error) {
	resp, err := catalogCall[*messages.RecordVolumeModifyResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.RecordVolumeModify{Namespace: namespace, VolumeId: id, MutableParameters: maps.Clone(params), ReplyTo: replyTo}
	})
	return volumeAnswer(resp, err)
}

func (a *catalogActor) applyRecordModify(w *catalogWrite, cmd *messages.RecordVolumeModify) (catalogChange, error) {
	return a.changeVolume(w, cmd.GetNamespace(), cmd.GetVolumeId(), nil, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		return model.RecordModifyOn(v, cmd.GetMutableParameters())
	})
}

// modifyFleetCall is the Fleet call of a RecordVolumeModify, or nil for
// another command. A Fleet that is not a model.ModifyFleet refuses it.
func modifyFleetCall(f model.Fleet, cmd proto.Message) func(context.Context) proto.Message {
	record, ok := cmd.(*messages.RecordVolumeModify)
	if !ok {
		return nil
	}
	return func(ctx context.Context) proto.Message {
		mf, ok := f.(model.ModifyFleet)
		if !ok {
			return fleetResponse(cmd, nil, model.Refusef(model.ErrInvalid, "this fleet does not record mutable parameters"))
		}
		v, err := mf.RecordVolumeModify(ctx, record.GetNamespace(), record.GetVolumeId(), record.GetMutableParameters())
		return fleetResponse(cmd, v, err)
	}
}
