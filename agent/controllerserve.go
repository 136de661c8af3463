package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/messages"
)

// volumeOp is the request of the controller operations that name a
// volume, or a snapshot, by their fields, as another member sends them.
type volumeOp struct {
	Namespace     string            `json:"namespace,omitempty"`
	ID            string            `json:"id,omitempty"`
	RequiredBytes int64             `json:"required_bytes,omitempty"`
	LimitBytes    int64             `json:"limit_bytes,omitempty"`
	Params        map[string]string `json:"params,omitempty"`
	PluginID      string            `json:"plugin_id,omitempty"`
	SnapshotID    string            `json:"snapshot_id,omitempty"`
	Secrets       map[string]string `json:"secrets,omitempty"`
}

// servedControllers runs the controller operations other members send
// this one on ctl, this node's own controller (never routed further: an
// operation goes from one node to another once).
func servedControllers(ctl *controller.Controller) member.ControllerHandler {
	return func(ctx context.Context, req *messages.FleetControllerRequest) *messages.FleetControllerResponse {
		resp, err := serveController(ctx, ctl, req)
		if err != nil {
			return &messages.FleetControllerResponse{Error: messages.ErrorToProto(err)}
		}
		return resp
	}
}

// serveController decodes req, runs it on ctl and encodes its result.
func serveController(ctx context.Context, ctl *controller.Controller, req *messages.FleetControllerRequest) (*messages.FleetControllerResponse, error) {
	var op volumeOp
	decode := func(v any) error {
		if err := json.Unmarshal(req.GetRequest(), v); err != nil {
			return fmt.Errorf("%w: controller operation %s: %v", controller.ErrInvalidRequest, req.GetOperation(), err)
		}
		return nil
	}
	withVolume := func(v *model.CSIVolume, err error) (*messages.FleetControllerResponse, error) {
		if err != nil {
			return nil, err
		}
		return &messages.FleetControllerResponse{Volume: v.Proto()}, nil
	}
	switch req.GetOperation() {
	case opCreate:
		var r controller.CreateRequest
		if err := decode(&r); err != nil {
			return nil, err
		}
		return withVolume(ctl.Create(ctx, r))
	case opDelete:
		if err := decode(&op); err != nil {
			return nil, err
		}
		return &messages.FleetControllerResponse{}, ctl.Delete(ctx, op.Namespace, op.ID)
	case opExpand:
		if err := decode(&op); err != nil {
			return nil, err
		}
		res, err := ctl.Expand(ctx, op.Namespace, op.ID, op.RequiredBytes, op.LimitBytes)
		if err != nil {
			return nil, err
		}
		v := res.Volume
		res.Volume = nil
		return withResult(res, &messages.FleetControllerResponse{Volume: v.Proto()})
	case opModify:
		if err := decode(&op); err != nil {
			return nil, err
		}
		return withVolume(ctl.Modify(ctx, op.Namespace, op.ID, op.Params))
	case opCreateSnapshot:
		var r controller.SnapshotRequest
		if err := decode(&r); err != nil {
			return nil, err
		}
		return answer(ctl.CreateSnapshot(ctx, r))
	case opDeleteSnapshot:
		if err := decode(&op); err != nil {
			return nil, err
		}
		return &messages.FleetControllerResponse{}, ctl.DeleteSnapshot(ctx, op.PluginID, op.SnapshotID, op.Secrets)
	case opListSnapshots:
		var r controller.ListSnapshotsRequest
		if err := decode(&r); err != nil {
			return nil, err
		}
		return answer(ctl.ListSnapshots(ctx, r))
	case opCapacity:
		var r controller.CapacityRequest
		if err := decode(&r); err != nil {
			return nil, err
		}
		return answer(ctl.Capacity(ctx, r))
	}
	return nil, fmt.Errorf("%w: no controller operation %q", controller.ErrInvalidRequest, req.GetOperation())
}

// answer is an answer whose result is v, or err.
func answer[T any](v T, err error) (*messages.FleetControllerResponse, error) {
	if err != nil {
		return nil, err
	}
	return withResult(v, &messages.FleetControllerResponse{})
}

// withResult is resp with v as its result.
func withResult(v any, resp *messages.FleetControllerResponse) (*messages.FleetControllerResponse, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	resp.Result = data
	return resp, nil
}
