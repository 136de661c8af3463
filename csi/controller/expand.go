package controller

import (
	"context"
	"fmt"
	"maps"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// ExpandResult is the outcome of Expand.
type ExpandResult struct {
	// Volume is the volume with its new capacity, as the catalog holds it.
	Volume *model.CSIVolume
	// CapacityBytes is the capacity the plugin answered.
	CapacityBytes int64
	// NodeExpansionRequired says the plugin asks for NodeExpandVolume on
	// the nodes where the volume is staged or published.
	NodeExpansionRequired bool
	// NodeExpanded says a node expanded the volume (NodeExpandVolume);
	// false when it is published on no node.
	NodeExpanded bool
}

// Expand grows a volume to at least requiredBytes (and at most limitBytes,
// when not zero) with ControllerExpandVolume, which the plugin must
// advertise (EXPAND_VOLUME), and records the capacity the plugin answers in
// the model. Claims do not stop it (expansion may be online); a volume
// being deleted is refused. When the plugin answers
// node_expansion_required, the result says so, and the configured
// NodeExpander, if any, is asked to finish on the nodes.
func (c *Controller) Expand(ctx context.Context, namespace, id string, requiredBytes, limitBytes int64) (ExpandResult, error) {
	var problems []string
	checkVolumeKey(namespace, id, &problems)
	problems = append(problems, checkRange(requiredBytes, limitBytes)...)
	if requiredBytes == 0 && limitBytes == 0 {
		problems = append(problems, "capacity.required_bytes or capacity.limit_bytes must be set: the size to grow to")
	}
	if err := invalid(problems); err != nil {
		return ExpandResult{}, err
	}
	ctx, cancel := c.operation(ctx)
	defer cancel()
	what := fmt.Sprintf("%s/%s", nsOrDefault(namespace), id)
	v, err := c.cfg.Catalog.GetVolume(ctx, namespace, id)
	if err != nil {
		return ExpandResult{}, fmt.Errorf("%s: %w", what, err)
	}
	if v.Deleting {
		return ExpandResult{}, fmt.Errorf("%s: %w", what, model.ErrVolumeDeleting)
	}
	client, err := c.connect(ctx, v.PluginID, what, capExpand)
	if err != nil {
		return ExpandResult{}, err
	}
	defer client.Close()
	resp, err := client.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
		VolumeId:         v.PluginVolumeID(),
		CapacityRange:    &csipb.CapacityRange{RequiredBytes: requiredBytes, LimitBytes: limitBytes},
		Secrets:          maps.Clone(v.Secrets),
		VolumeCapability: v.Capability(),
	})
	if err != nil {
		return ExpandResult{}, fmt.Errorf("%s: %w", what, err)
	}
	res := ExpandResult{CapacityBytes: resp.GetCapacityBytes(), NodeExpansionRequired: resp.GetNodeExpansionRequired()}
	if res.CapacityBytes < requiredBytes {
		return ExpandResult{}, fmt.Errorf("%s: ControllerExpandVolume: %w: %d bytes, less than the %d required",
			what, csi.ErrInvalidResponse, res.CapacityBytes, requiredBytes)
	}
	if res.Volume, err = c.cfg.Catalog.RecordVolumeCapacity(ctx, namespace, id, res.CapacityBytes); err != nil {
		return ExpandResult{}, fmt.Errorf("%s: the plugin expanded volume %q to %d bytes, but the catalog did not record it (run the expand again): %w",
			what, v.PluginVolumeID(), res.CapacityBytes, err)
	}
	if res.NodeExpansionRequired && c.cfg.NodeExpander != nil {
		expanded, err := c.cfg.NodeExpander.ExpandOnNodes(ctx, res.Volume, res.CapacityBytes)
		if err != nil {
			return res, fmt.Errorf("%s: the controller expanded it to %d bytes; the nodes did not: %w", what, res.CapacityBytes, err)
		}
		res.NodeExpanded = expanded
	}
	c.log.Info("volume expanded", "namespace", v.Namespace, "volume_id", v.ID, "plugin", v.PluginID,
		"capacity_bytes", res.CapacityBytes, "node_expansion_required", res.NodeExpansionRequired)
	return res, nil
}
