package controller

import (
	"context"
	"errors"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
)

// ErrCapabilityRefused: the plugin's ValidateVolumeCapabilities did not
// confirm the capabilities a volume is registered with. Nothing changed.
var ErrCapabilityRefused = errclass.New(errclass.Invalid, "capability refused by the plugin")

// ValidateCapabilities asks the controller of v's plugin, with
// ValidateVolumeCapabilities, whether it supports every capability v is
// registered with (its access and attachment modes and fs types), before
// the volume is registered. As in Nomad, only a plugin that requires a
// controller (one that advertises PUBLISH_UNPUBLISH_VOLUME) is asked: a
// plugin without a registered controller, or whose controller does not
// attach, has nothing to say, and the answer is nil. An unconfirmed answer
// is ErrCapabilityRefused naming the capabilities and the plugin's
// message; an RPC error (say NotFound: the plugin has no such volume) is
// returned with the csi package's sentinel.
func (c *Controller) ValidateCapabilities(ctx context.Context, v *model.CSIVolume) error {
	ctx, cancel := c.operation(ctx)
	defer cancel()
	what := fmt.Sprintf("capabilities of volume %s/%s", v.Namespace, v.ID)
	client, err := c.connect(ctx, v.PluginID, what)
	if errors.Is(err, ErrNoController) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	caps, err := client.ControllerGetCapabilities(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !caps.PublishUnpublishVolume {
		return nil
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("%s: %w: %w", what, ErrInvalidRequest, err)
	}
	resp, err := client.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{
		VolumeId: v.PluginVolumeID(), VolumeCapabilities: v.CSICapabilities(), VolumeContext: v.Context,
		Parameters: v.Parameters, Secrets: v.Secrets,
	})
	if err != nil {
		return fmt.Errorf("%s: plugin %q: %w", what, v.PluginID, err)
	}
	if resp.GetConfirmed() == nil {
		return fmt.Errorf("%s: %w: plugin %q did not confirm capabilities %v: %s; register the volume with capabilities the plugin supports",
			what, ErrCapabilityRefused, v.PluginID, v.Capabilities(), resp.GetMessage())
	}
	return nil
}
