package catalog

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// Batches (Nomad's Volumes[] and VolumeIDs[]): several volumes registered
// or deregistered by one command, all of them or none. On a node the
// command is one write of the catalog actor, so one bbolt transaction; in
// a fleet it is one etcd transaction (fleet.Store.RegisterVolumes). Each
// refusal names the item: "volumes[i] (volume "id"): …".

// applyRegisterBatch runs each registration of cmd against the working
// state, each seeing the ones before it, and returns their changes as one.
// The first refusal, named by its item, refuses them all.
func (a *catalogActor) applyRegisterBatch(w *catalogWrite, cmd *messages.RegisterVolumes) (catalogChange, error) {
	var change catalogChange
	vs := make([]*model.CSIVolume, len(cmd.GetVolumes()))
	for i, m := range cmd.GetVolumes() {
		vs[i] = model.VolumeFromProto(m)
	}
	if err := model.CheckRegisterBatch(vs); err != nil {
		return change, err
	}
	saved := a.state.clone()
	defer func() { a.state = saved }() // the batch's change is committed by apply, once
	for i, m := range cmd.GetVolumes() {
		item := &catalogWrite{}
		one, err := a.applyRegister(item, &messages.RegisterVolume{Volume: m})
		if err == nil && item.err != nil {
			w.err = model.BatchItemError(i, m.GetId(), item.err)
		}
		if err != nil || w.err != nil {
			return catalogChange{}, itemOrNil(i, m.GetId(), err)
		}
		for key, v := range one.volumes {
			change.putVolume(key, v)
			a.state.volumes[key] = v // the next items see it
		}
		w.volumes = append(w.volumes, item.volume)
	}
	return change, nil
}

// applyDeregisterBatch deregisters each volume of cmd, all or none.
func (a *catalogActor) applyDeregisterBatch(w *catalogWrite, cmd *messages.DeregisterVolumes) (catalogChange, error) {
	var change catalogChange
	if err := model.CheckDeregisterBatch(cmd.GetNamespace(), cmd.GetVolumeIds()); err != nil {
		return change, err
	}
	for i, id := range cmd.GetVolumeIds() {
		item := &catalogWrite{}
		one, err := a.applyDeregister(item, &messages.DeregisterVolume{Namespace: cmd.GetNamespace(), VolumeId: id})
		if err == nil && item.err != nil {
			w.err = model.BatchItemError(i, id, item.err)
		}
		if err != nil || w.err != nil {
			return catalogChange{}, itemOrNil(i, id, err)
		}
		for key := range one.volumes {
			change.putVolume(key, nil)
		}
	}
	return change, nil
}

// itemOrNil is err naming item i, or nil.
func itemOrNil(i int, id string, err error) error {
	if err == nil {
		return nil
	}
	return model.BatchItemError(i, id, err)
}

// batchFleetCall is the Fleet call of a batch command, or nil for another
// command. A Fleet that is not a model.BatchFleet refuses batches.
func batchFleetCall(f model.Fleet, cmd proto.Message) func(context.Context) proto.Message {
	bf, ok := f.(model.BatchFleet)
	switch cmd := cmd.(type) {
	case *messages.RegisterVolumes:
		return func(ctx context.Context) proto.Message {
			if !ok {
				return &messages.RegisterVolumesResponse{Error: messages.ErrorToProto(noBatches())}
			}
			vs := make([]*model.CSIVolume, len(cmd.GetVolumes()))
			for i, m := range cmd.GetVolumes() {
				vs[i] = model.VolumeFromProto(m)
			}
			out, err := bf.RegisterVolumes(ctx, vs)
			return registerVolumesResponse(out, err)
		}
	case *messages.DeregisterVolumes:
		return func(ctx context.Context) proto.Message {
			err := noBatches()
			if ok {
				err = bf.DeregisterVolumes(ctx, cmd.GetNamespace(), cmd.GetVolumeIds())
			}
			return &messages.DeregisterVolumesResponse{Error: messages.ErrorToProto(err)}
		}
	}
	return nil
}

// noBatches is the refusal of a batch by a Fleet that takes none.
func noBatches() error {
	return model.Refusef(model.ErrInvalid, "volumes: this fleet takes no batches; register or deregister the volumes one at a time")
}

// registerVolumesResponse is the answer to RegisterVolumes: out, or err.
func registerVolumesResponse(out []*model.CSIVolume, err error) *messages.RegisterVolumesResponse {
	resp := &messages.RegisterVolumesResponse{Error: messages.ErrorToProto(err)}
	if err == nil {
		for _, v := range out {
			resp.Volumes = append(resp.Volumes, v.Proto())
		}
	}
	return resp
}

// RegisterVolumes registers vs (see RegisterVolume for each one's rules)
// all or nothing, in one durable write, and returns them as registered, in
// order. A batch holds one to model.MaxBatch volumes, each named once; else
// model.ErrInvalid naming the field. A refusal of one volume names it by
// its index and ID ("volumes[2] (volume "v3"): …"), matches what that
// volume's refusal matches, and registers none.
func (c *Catalog) RegisterVolumes(ctx context.Context, vs []*model.CSIVolume) ([]*model.CSIVolume, error) {
	if err := model.CheckRegisterBatch(vs); err != nil {
		return nil, err
	}
	resp, err := catalogCall[*messages.RegisterVolumesResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		m := &messages.RegisterVolumes{ReplyTo: replyTo}
		for _, v := range vs {
			m.Volumes = append(m.Volumes, v.Proto())
		}
		return m
	})
	if err != nil {
		return nil, err
	}
	out := make([]*model.CSIVolume, len(resp.GetVolumes()))
	for i, m := range resp.GetVolumes() {
		out[i] = model.VolumeFromProto(m)
	}
	return out, nil
}

// DeregisterVolumes forgets the volumes ids of namespace (empty means the
// default one) all or nothing, in one durable write; a batch's rules are
// RegisterVolumes'. A volume with claims is model.ErrVolumeInUse, an unknown one
// model.ErrVolumeNotFound, each naming its item.
func (c *Catalog) DeregisterVolumes(ctx context.Context, namespace string, ids []string) error {
	if err := model.CheckDeregisterBatch(namespace, ids); err != nil {
		return err
	}
	_, err := catalogCall[*messages.DeregisterVolumesResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.DeregisterVolumes{Namespace: namespace, VolumeIds: ids, ReplyTo: replyTo}
	})
	return err
}
