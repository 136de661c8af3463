package volumes

import (
	"context"
	"fmt"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
)

// EventPluginChanged: a step of the volume's way out was not sent, since
// its socket serves another plugin than the one the volume was mounted
// through (ErrPluginChanged); Detail says which. The step is retried.
const EventPluginChanged EventKind = "plugin-changed"

// learnPlugin keeps, in a record that names none, the CSI name of the
// plugin at the socket of the way in (c): the way out checks it. A record
// that names one must be served by that plugin, as the way out must
// (checkPlugin).
func (j *job) learnPlugin(ctx context.Context, c *csi.Client, socket string, pub *messages.VolumePublish) error {
	if j.rec.GetPluginName() != "" {
		return j.checkPlugin(ctx, c, socket, pub)
	}
	info, err := c.PluginInfoCached(ctx)
	if err != nil {
		return err
	}
	j.rec.PluginName = info.Name
	return nil
}

// checkPlugin refuses, with ErrPluginChanged and a volume event, a step
// whose socket (c) serves another plugin than the one the record's volume
// was mounted through: the socket was taken over, and the plugin there
// must not be sent this volume's steps (it could answer that it unmounted
// a volume it does not know, and the claim would go while the mount
// stays). The name is asked of the plugin at each step, not taken from
// the connection's cache: a plugin stopped a moment ago may not yet have
// been seen to end its transport, and the step would then go to the
// plugin that took its socket. A record written before the name was kept
// is not checked.
func (j *job) checkPlugin(ctx context.Context, c *csi.Client, socket string, pub *messages.VolumePublish) error {
	want := j.rec.GetPluginName()
	if want == "" {
		return nil
	}
	info, err := c.GetPluginInfo(ctx)
	if err != nil || info.Name == want {
		return err
	}
	err = fmt.Errorf("%w: the socket %s now serves plugin %q, and volume %s was mounted through plugin %q; nothing was sent to it: start %q at that socket again, or unmount with force to clean up this node",
		ErrPluginChanged, socket, info.Name, j.key, want, want)
	j.log.Warn("another plugin serves the socket of the volume's plugin: the step is not sent", "socket", socket, "plugin", info.Name, "mounted_through", want)
	j.env.emit(EventPluginChanged, j.key, pub, err.Error())
	return err
}
