package agent

import (
	"context"

	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet"
)

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
