package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry"
)

// CapacityRequest asks a plugin's controller how much room it has for new
// volumes (GetCapacity).
type CapacityRequest struct {
	PluginID string
	// Capabilities the new volumes would have; none means any.
	Capabilities []Capability
	// Parameters are the creation parameters the volumes would have.
	Parameters map[string]string
	// Topology, when set, is where the volumes would be reachable.
	Topology *model.Topology
}

// Capability is one access mode with its attachment mode and, for a file
// system, its type (empty: the plugin's default), as the CLI and the API
// spell it (model.ParseCapability).
type Capability = model.RequestedCapability

// CapacityResult is the plugin's GetCapacity answer. The sizes are nil
// when the plugin did not say.
type CapacityResult struct {
	AvailableBytes    int64
	MaximumVolumeSize *int64
	MinimumVolumeSize *int64
}

// Validate reports every problem of r at once, each matching
// ErrInvalidRequest and naming its field as the API spells it.
func (r CapacityRequest) Validate() error {
	var problems []string
	if err := registry.ValidateID("plugin_id", r.PluginID); err != nil {
		problems = append(problems, err.Error())
	}
	for i, c := range r.Capabilities {
		if err := c.AccessMode.Validate(); err != nil {
			problems = append(problems, fmt.Sprintf("capabilities[%d].access_mode: %v", i, err))
		}
		if err := c.AttachmentMode.Validate(); err != nil {
			problems = append(problems, fmt.Sprintf("capabilities[%d].attachment_mode: %v", i, err))
		}
	}
	if _, ok := r.Parameters[""]; ok {
		problems = append(problems, "parameters has an empty key")
	}
	if r.Topology != nil {
		if len(r.Topology.Segments) == 0 {
			problems = append(problems, "topology has no segments")
		}
		for _, k := range slices.Sorted(maps.Keys(r.Topology.Segments)) {
			if err := names.CheckKey("topology segment", k); err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	return invalid(problems)
}

// Capacity asks the plugin's controller for its capacity (GetCapacity),
// which needs GET_CAPACITY: a plugin without it is refused with
// ErrUnsupported and gets no GetCapacity.
func (c *Controller) Capacity(ctx context.Context, req CapacityRequest) (CapacityResult, error) {
	if err := req.Validate(); err != nil {
		return CapacityResult{}, err
	}
	ctx, cancel := c.operation(ctx)
	defer cancel()
	what := fmt.Sprintf("plugin %q", req.PluginID)
	client, err := c.connect(ctx, req.PluginID, what, capCapacity)
	if err != nil {
		return CapacityResult{}, err
	}
	defer client.Close()
	in := &csipb.GetCapacityRequest{Parameters: maps.Clone(req.Parameters)}
	for _, vc := range req.Capabilities {
		in.VolumeCapabilities = append(in.VolumeCapabilities, model.VolumeCapability(vc.AccessMode, vc.AttachmentMode, &model.MountOptions{FSType: vc.FSType}))
	}
	if req.Topology != nil {
		in.AccessibleTopology = &csipb.Topology{Segments: maps.Clone(req.Topology.Segments)}
	}
	resp, err := client.GetCapacity(ctx, in)
	if err != nil {
		return CapacityResult{}, fmt.Errorf("%s: %w", what, err)
	}
	out := CapacityResult{AvailableBytes: resp.GetAvailableCapacity()}
	if v := resp.GetMaximumVolumeSize(); v != nil {
		out.MaximumVolumeSize = &v.Value
	}
	if v := resp.GetMinimumVolumeSize(); v != nil {
		out.MinimumVolumeSize = &v.Value
	}
	return out, nil
}
