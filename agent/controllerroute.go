package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/messages"
)

// The controller operations one member sends another
// (messages.FleetControllerRequest.operation).
const (
	opCreate         = "create"
	opDelete         = "delete"
	opExpand         = "expand"
	opModify         = "modify"
	opCreateSnapshot = "create-snapshot"
	opDeleteSnapshot = "delete-snapshot"
	opListSnapshots  = "list-snapshots"
	opCapacity       = "capacity"
)

// routedController is the API's controller in a fleet. Each operation
// runs on this node's controller first. When this node has no controller
// of the plugin (controller.ErrNoController), or cannot reach it
// (controller.ErrControllerUnreachable), nothing was sent, and the
// operation goes to a live node whose controller instance of the plugin
// is healthy (fleet.Store.ControllerNodes), through that node's cluster
// member (member.RequestController, signed like the grains' requests):
// it runs there on that node's controller, whose answer, an error
// included, is the answer here, with the same text and sentinels. The
// nodes are tried in order of their IDs until one runs it. A node that
// does not answer in time (member.ErrMemberGone) may have run the
// operation, and may still: an operation that changes something is then
// sent to no other node, and is answered model.ErrOutcomeUnknown. A node
// expansion the plugin asks for after a routed expansion runs here, on
// the volumes this node publishes, as after a local one.
type routedController struct {
	*controller.Controller
	// nodes are the nodes that run a healthy controller of a plugin
	// (fleet.Store.ControllerNodes), and send sends one of them an
	// operation (member.Member.RequestController).
	nodes    func(ctx context.Context, plugin string) ([]fleet.ControllerNode, error)
	send     func(ctx context.Context, address string, req *messages.FleetControllerRequest, timeout time.Duration) (*messages.FleetControllerResponse, error)
	nodeID   string
	catalog  controller.Catalog
	expander controller.NodeExpander
	// timeout bounds the wait for another node's answer: its operation
	// timeout, and a request timeout for the way there and back.
	timeout time.Duration
	log     hclog.Logger
}

var _ api.Controller = (*routedController)(nil)

// controllerAPI is the controller the API serves: routed across the fleet
// in cluster mode, this node's alone otherwise.
func (a *Agent) controllerAPI() api.Controller {
	if a.member == nil {
		return a.ctl
	}
	timeout := a.cfg.VolumeOperationTimeout
	if timeout <= 0 {
		timeout = controller.DefaultOperationTimeout
	}
	store := a.member.Store()
	return &routedController{
		Controller: a.ctl, nodes: store.ControllerNodes, send: a.member.RequestController, nodeID: store.NodeID(),
		catalog: a.catalog, expander: a.volumes, timeout: timeout + store.CallTimeout(), log: a.log.Named("controller"),
	}
}

// elsewhere reports whether err, a local operation's, left the operation
// to another node: nothing was sent to a plugin, and nothing changed.
func elsewhere(err error) bool {
	return errors.Is(err, controller.ErrNoController) || errors.Is(err, controller.ErrControllerUnreachable)
}

// route runs operation op of plugin, with body, on another node of the
// fleet that runs a healthy controller of it, after the local attempt
// failed with local; it returns that node's answer.
func (c *routedController) route(ctx context.Context, plugin, op string, body any, local error) (*messages.FleetControllerResponse, error) {
	nodes, err := c.nodes(ctx, plugin)
	if err != nil {
		return nil, fmt.Errorf("%w; and the nodes that run a controller of plugin %q cannot be read: %v", local, plugin, err)
	}
	request, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("controller operation %s: %w", op, err)
	}
	var tried []string
	for _, n := range nodes {
		if n.Node == c.nodeID {
			continue
		}
		resp, err := c.send(ctx, n.Address, &messages.FleetControllerRequest{Operation: op, Request: request}, c.timeout)
		if err == nil {
			err = messages.ErrorFromProto(resp.GetError())
		}
		if errors.Is(err, member.ErrMemberGone) && changes(op) {
			c.log.Warn("controller operation sent to another node went unanswered: it may have run there", "operation", op, "plugin", plugin, "node", n.Node, "error", err)
			return nil, model.Refusef(model.ErrOutcomeUnknown,
				"controller operation %s of plugin %q went to node %s, which did not answer (%v): it may or may not have run there, so no other node was sent it; read back what it changes before sending it again",
				op, plugin, n.Node, err)
		}
		if err == nil || !elsewhere(err) && !errors.Is(err, member.ErrMemberGone) && !errors.Is(err, member.ErrNoControllers) {
			c.log.Info("controller operation ran on another node", "operation", op, "plugin", plugin, "node", n.Node, "error", err)
			return resp, err
		}
		tried = append(tried, fmt.Sprintf("node %s: %v", n.Node, err))
	}
	if len(tried) > 0 {
		return nil, fmt.Errorf("%w; no other node of the fleet could run it (%v)", local, tried)
	}
	return nil, fmt.Errorf("%w; no other live node of the fleet runs a healthy controller of plugin %q", local, plugin)
}

// changes reports whether controller operation op changes something (a
// volume, a snapshot): all but a listing and a capacity.
func changes(op string) bool {
	return op != opListSnapshots && op != opCapacity
}

// volumePlugin is the plugin of the catalog volume (namespace, id); ""
// when it cannot be read (the local error then stands).
func (c *routedController) volumePlugin(ctx context.Context, namespace, id string) string {
	v, err := c.catalog.GetVolume(ctx, namespace, id)
	if err != nil {
		return ""
	}
	return v.PluginID
}

// Create creates a volume with the plugin's controller, here or on a node
// that runs it.
func (c *routedController) Create(ctx context.Context, req controller.CreateRequest) (*model.CSIVolume, error) {
	v, err := c.Controller.Create(ctx, req)
	if !elsewhere(err) {
		return v, err
	}
	resp, err := c.route(ctx, req.PluginID, opCreate, req, err)
	return answeredVolume(resp, err)
}

// Delete deletes a volume, here or on a node that runs its controller.
func (c *routedController) Delete(ctx context.Context, namespace, id string) error {
	err := c.Controller.Delete(ctx, namespace, id)
	if !elsewhere(err) {
		return err
	}
	plugin := c.volumePlugin(ctx, namespace, id)
	if plugin == "" {
		return err
	}
	_, err = c.route(ctx, plugin, opDelete, volumeOp{Namespace: namespace, ID: id}, err)
	return err
}

// Expand expands a volume, here or on a node that runs its controller; a
// node expansion the plugin asks for runs here.
func (c *routedController) Expand(ctx context.Context, namespace, id string, requiredBytes, limitBytes int64) (controller.ExpandResult, error) {
	res, err := c.Controller.Expand(ctx, namespace, id, requiredBytes, limitBytes)
	plugin := ""
	if elsewhere(err) {
		plugin = c.volumePlugin(ctx, namespace, id)
	}
	if plugin == "" {
		return res, err
	}
	resp, err := c.route(ctx, plugin, opExpand, volumeOp{Namespace: namespace, ID: id, RequiredBytes: requiredBytes, LimitBytes: limitBytes}, err)
	if err != nil {
		return controller.ExpandResult{}, err
	}
	if err := json.Unmarshal(resp.GetResult(), &res); err != nil {
		return controller.ExpandResult{}, fmt.Errorf("%s/%s: the answer of node %s: %w", namespace, id, resp.GetNode(), err)
	}
	res.Volume = model.VolumeFromProto(resp.GetVolume())
	if res.NodeExpansionRequired && c.expander != nil {
		expanded, err := c.expander.ExpandOnNodes(ctx, res.Volume, res.CapacityBytes)
		if err != nil {
			return res, fmt.Errorf("%s/%s: the controller expanded it to %d bytes; the nodes did not: %w", namespace, id, res.CapacityBytes, err)
		}
		res.NodeExpanded = expanded
	}
	return res, nil
}

// Modify changes a volume's mutable parameters, here or on a node that
// runs its controller.
func (c *routedController) Modify(ctx context.Context, namespace, id string, params map[string]string) (*model.CSIVolume, error) {
	v, err := c.Controller.Modify(ctx, namespace, id, params)
	plugin := ""
	if elsewhere(err) {
		plugin = c.volumePlugin(ctx, namespace, id)
	}
	if plugin == "" {
		return v, err
	}
	resp, err := c.route(ctx, plugin, opModify, volumeOp{Namespace: namespace, ID: id, Params: params}, err)
	return answeredVolume(resp, err)
}

// CreateSnapshot snapshots a volume, here or on a node that runs its
// controller.
func (c *routedController) CreateSnapshot(ctx context.Context, req controller.SnapshotRequest) (controller.Snapshot, error) {
	s, err := c.Controller.CreateSnapshot(ctx, req)
	plugin := ""
	if elsewhere(err) {
		plugin = c.volumePlugin(ctx, req.Namespace, req.VolumeID)
	}
	if plugin == "" {
		return s, err
	}
	return answered[controller.Snapshot](c.route(ctx, plugin, opCreateSnapshot, req, err))
}

// DeleteSnapshot deletes a snapshot, here or on a node that runs the
// plugin's controller.
func (c *routedController) DeleteSnapshot(ctx context.Context, pluginID, snapshotID string, secrets map[string]string) error {
	err := c.Controller.DeleteSnapshot(ctx, pluginID, snapshotID, secrets)
	if !elsewhere(err) {
		return err
	}
	_, err = c.route(ctx, pluginID, opDeleteSnapshot, volumeOp{PluginID: pluginID, SnapshotID: snapshotID, Secrets: secrets}, err)
	return err
}

// ListSnapshots lists snapshots, here or on a node that runs the
// plugin's controller.
func (c *routedController) ListSnapshots(ctx context.Context, req controller.ListSnapshotsRequest) ([]controller.Snapshot, error) {
	list, err := c.Controller.ListSnapshots(ctx, req)
	plugin := req.PluginID
	if elsewhere(err) && plugin == "" {
		plugin = c.volumePlugin(ctx, req.Namespace, req.VolumeID)
	}
	if !elsewhere(err) || plugin == "" {
		return list, err
	}
	return answered[[]controller.Snapshot](c.route(ctx, plugin, opListSnapshots, req, err))
}

// Capacity asks a plugin's controller for its capacity, here or on a
// node that runs it.
func (c *routedController) Capacity(ctx context.Context, req controller.CapacityRequest) (controller.CapacityResult, error) {
	res, err := c.Controller.Capacity(ctx, req)
	if !elsewhere(err) {
		return res, err
	}
	return answered[controller.CapacityResult](c.route(ctx, req.PluginID, opCapacity, req, err))
}

// answeredVolume is the volume of another node's answer.
func answeredVolume(resp *messages.FleetControllerResponse, err error) (*model.CSIVolume, error) {
	if err != nil {
		return nil, err
	}
	return model.VolumeFromProto(resp.GetVolume()), nil
}

// answered decodes the result of another node's answer.
func answered[T any](resp *messages.FleetControllerResponse, err error) (T, error) {
	var out T
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(resp.GetResult(), &out); err != nil {
		return out, fmt.Errorf("the answer of node %s: %w", resp.GetNode(), err)
	}
	return out, nil
}
