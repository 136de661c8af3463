package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/registry"
)

// checkClone says what is wrong with a create's clone_from.
func (r CreateRequest) checkClone() []string {
	if r.CloneFrom == "" {
		return nil
	}
	var problems []string
	if err := registry.ValidateID("clone_from", r.CloneFrom); err != nil {
		problems = append(problems, err.Error())
	}
	if r.SnapshotID != "" {
		problems = append(problems, "clone_from and snapshot_id are both set: a volume is made from a snapshot or cloned from a volume, give one")
	}
	if r.CloneFrom == r.ID {
		problems = append(problems, fmt.Sprintf("clone_from names the volume being created (%s): name another volume", r.ID))
	}
	return problems
}

// cloneSource is the catalog volume req clones, nil when it clones none.
// The source is a catalog volume of req's namespace and of req's plugin:
// one of another plugin is refused, naming both, before any RPC, and an
// unknown one is model.ErrVolumeNotFound naming clone_from.
func (c *Controller) cloneSource(ctx context.Context, what string, req CreateRequest) (*model.CSIVolume, error) {
	if req.CloneFrom == "" {
		return nil, nil
	}
	src, err := c.cfg.Catalog.GetVolume(ctx, req.Namespace, req.CloneFrom)
	switch {
	case errors.Is(err, model.ErrVolumeNotFound):
		return nil, fmt.Errorf("%s: clone_from: %w; name a volume of the namespace", what, err)
	case err != nil:
		return nil, fmt.Errorf("%s: clone_from: %w", what, err)
	case src.PluginID != req.PluginID:
		return nil, invalid([]string{fmt.Sprintf(
			"clone_from: volume %s/%s is of plugin %q, and the new volume of plugin %q: a plugin clones only its own volumes",
			src.Namespace, src.ID, src.PluginID, req.PluginID)})
	}
	return src, nil
}
