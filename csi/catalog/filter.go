package catalog

import (
	"context"
	"slices"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/names"
)

// ListPluginVolumes is ListVolumes keeping the volumes of plugin only (all
// of them when plugin is empty). A plugin name that cannot be one is
// refused with model.ErrInvalid naming the field.
func (c *Catalog) ListPluginVolumes(ctx context.Context, namespace, plugin string) ([]*model.CSIVolumeStub, error) {
	if plugin != "" {
		if err := names.Check("plugin", plugin); err != nil {
			return nil, model.Refusal(model.ErrInvalid, err)
		}
	}
	stubs, err := c.ListVolumes(ctx, namespace)
	if err != nil || plugin == "" {
		return stubs, err
	}
	return slices.DeleteFunc(stubs, func(s *model.CSIVolumeStub) bool { return s.PluginID != plugin }), nil
}
