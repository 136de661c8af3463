package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet"
)

// fleetVolumeCatalog is the volume manager's Catalog in cluster mode: the
// catalog, and the attachments of every node in the fleet, which this
// node records under its own node ID.
type fleetVolumeCatalog struct {
	volumeCatalog
	fleet catalog.Fleet
	node  string
}

var _ volumes.Attachments = fleetVolumeCatalog{}

// FleetVolumeCatalog is the catalog c, whose Fleet is f, as the volume
// manager's Catalog of the node node, as the agent wires them in cluster
// mode: for embedders and tests that start the parts themselves.
func FleetVolumeCatalog(system *actor.ActorSystem, c *catalog.Catalog, f catalog.Fleet, node string) volumes.Catalog {
	return fleetVolumeCatalog{volumeCatalog: volumeCatalog{system: system, catalog: c}, fleet: f, node: node}
}

// RecordAttachment records this node's attachment in the fleet.
func (c fleetVolumeCatalog) RecordAttachment(ctx context.Context, namespace, id, externalNodeID string, attached bool) error {
	state := model.AttachmentStateAttaching
	if attached {
		state = model.AttachmentStateAttached
	}
	_, err := c.fleet.Attach(ctx, namespace, id, &model.Attachment{NodeID: c.node, ExternalNodeID: externalNodeID, State: state})
	return catalogError(err)
}

// ForgetAttachment removes the attachment of node (this one when empty)
// from the fleet; a volume that is gone holds none.
func (c fleetVolumeCatalog) ForgetAttachment(ctx context.Context, namespace, id, node string) error {
	_, err := c.fleet.Detach(ctx, namespace, id, cmp.Or(node, c.node))
	if errors.Is(err, catalog.ErrVolumeNotFound) {
		return nil
	}
	return catalogError(err)
}

// DetachTarget resolves an operator's detach from node against the
// fleet's attachments and, for a recorded one, marks it detaching
// (Fleet.MarkDetaching), which holds only while that node is down and
// claims nothing: a node that comes back keeps its attachment, and cannot
// attach again until the detach is done.
func (c fleetVolumeCatalog) DetachTarget(ctx context.Context, namespace, id, node string) (string, string, error) {
	v, err := c.fleet.GetVolume(ctx, namespace, id)
	if err != nil {
		return "", "", catalogError(err)
	}
	a := attachmentNamed(v, node)
	if a == nil {
		return node, "", nil
	}
	if _, err := c.fleet.MarkDetaching(ctx, namespace, id, a.NodeID); err != nil {
		if errors.Is(err, catalog.ErrVolumeInUse) {
			return "", "", fmt.Errorf("%w: %w", volumes.ErrInUse, err)
		}
		return "", "", catalogError(err)
	}
	return a.ExternalNodeID, a.NodeID, nil
}

// attachmentNamed is v's attachment to node, named by its node ID or by
// its plugin node ID (the first by node ID when several share one), or
// nil.
func attachmentNamed(v *model.CSIVolume, node string) *model.Attachment {
	for _, n := range slices.Sorted(maps.Keys(v.Attachments)) {
		if a := v.Attachments[n]; a.NodeID == node || a.ExternalNodeID == node {
			return a
		}
	}
	return nil
}

// runsController reports whether this node runs the controller of the
// plugin: the fleet's Detacher detaches only the stranded attachments of
// those plugins.
func (a *Agent) runsController(plugin string) bool {
	_, ok := a.registry.Snapshot().Current(volumes.ControllerPluginType, plugin)
	return ok
}

// detachStranded detaches a stranded attachment of the fleet (of a down
// node that holds no claim on the volume anymore, fleet.Stranded) through
// the volume manager, as Nomad's volume watcher does: the fleet's Detacher
// calls it on one node that runs the plugin's controller, under a guard in
// etcd, and the volume manager checks again that the node is down and
// holds no claim.
func (a *Agent) detachStranded(ctx context.Context, s fleet.Stranded) error {
	err := a.volumes.Detach(ctx, s.Namespace, s.VolumeID, s.Attachment.NodeID)
	a.metrics.fleet.detached(err)
	return err
}
