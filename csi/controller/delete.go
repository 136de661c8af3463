package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// Delete destroys a volume on its plugin and forgets it: the catalog marks
// it Deleting (refused with model.ErrVolumeInUse, naming the allocs, while
// any claim, held or being released, exists; from then on claims are
// refused), then DeleteVolume with the volume's plugin ID and secrets (a
// volume the plugin does not know counts as deleted), then the catalog
// deregisters it. The plugin must advertise CREATE_DELETE_VOLUME; a plugin
// that does not, or that is not registered, is refused before anything is
// marked. A delete that stops half way leaves the volume Deleting: running
// it again finishes it.
func (c *Controller) Delete(ctx context.Context, namespace, id string) error {
	var problems []string
	checkVolumeKey(namespace, id, &problems)
	if err := invalid(problems); err != nil {
		return err
	}
	ctx, cancel := c.operation(ctx)
	defer cancel()
	what := fmt.Sprintf("%s/%s", nsOrDefault(namespace), id)
	v, err := c.cfg.Catalog.GetVolume(ctx, namespace, id)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if allocs := strings.Join(v.Claimants(), ", "); allocs != "" {
		return fmt.Errorf("%s: %w: claimed by allocs %s; they must release it before it is deleted", what, model.ErrVolumeInUse, allocs)
	}
	client, err := c.connect(ctx, v.PluginID, what, capCreateDelete)
	if err != nil {
		return err
	}
	defer client.Close()
	if v, err = c.cfg.Catalog.MarkVolumeDeleting(ctx, namespace, id); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = client.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.PluginVolumeID(), Secrets: maps.Clone(v.Secrets)})
	if err != nil && !errors.Is(err, csi.ErrNotFound) {
		return fmt.Errorf("%s: the volume stays marked as deleting (run the delete again): %w", what, err)
	}
	if err := c.cfg.Catalog.DeregisterVolume(ctx, namespace, id); err != nil {
		return fmt.Errorf("%s: the plugin deleted volume %q, but the catalog still holds it (run the delete again): %w",
			what, v.PluginVolumeID(), err)
	}
	c.log.Info("volume deleted", "namespace", v.Namespace, "volume_id", v.ID, "plugin", v.PluginID, "external_id", v.PluginVolumeID())
	return nil
}
