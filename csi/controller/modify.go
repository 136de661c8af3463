package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// Modify changes a volume's mutable parameters with ControllerModifyVolume,
// which the plugin must advertise (MODIFY_VOLUME): a plugin without it, or
// bad parameters, get no ControllerModifyVolume. The plugin checks the
// keys and values (a strict one refuses an unknown key with
// InvalidArgument). Once the plugin took them, the catalog records them,
// merged into the volume's (RecordVolumeModify), and Modify returns the
// volume as recorded. A record that fails after the RPC says so: the
// plugin has the change, and a modify again (idempotent) records it.
func (c *Controller) Modify(ctx context.Context, namespace, id string, params map[string]string) (*model.CSIVolume, error) {
	var problems []string
	checkVolumeKey(namespace, id, &problems)
	if len(params) == 0 {
		problems = append(problems, "mutable_parameters must not be empty: give the KEY=VALUE pairs to change")
	}
	if _, ok := params[""]; ok {
		problems = append(problems, "mutable_parameters has an empty key")
	}
	if len(params) > model.MaxMutableParameters {
		problems = append(problems, fmt.Sprintf("mutable_parameters holds %d keys, over the limit of %d", len(params), model.MaxMutableParameters))
	}
	if err := invalid(problems); err != nil {
		return nil, err
	}
	ctx, cancel := c.operation(ctx)
	defer cancel()
	what := fmt.Sprintf("%s/%s", nsOrDefault(namespace), id)
	v, err := c.cfg.Catalog.GetVolume(ctx, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// The catalog's own check of the record to come, before the RPC: a
	// change the plugin took must be one the catalog can record (a
	// volume being deleted, or too many keys once merged, is refused now).
	if _, err := model.RecordModifyOn(v, params); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	client, err := c.connect(ctx, v.PluginID, what, capModify)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	if _, err := client.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{
		VolumeId: v.PluginVolumeID(), Secrets: maps.Clone(v.Secrets), MutableParameters: maps.Clone(params),
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	c.log.Info("volume modified", "namespace", v.Namespace, "volume_id", v.ID, "plugin", v.PluginID, "keys", slices.Sorted(maps.Keys(params)))
	recorded, err := c.cfg.Catalog.RecordVolumeModify(ctx, namespace, id, params)
	if err != nil {
		return nil, fmt.Errorf("%s: the plugin took the change, the catalog did not record it (modify again to record it): %w", what, err)
	}
	return recorded, nil
}
