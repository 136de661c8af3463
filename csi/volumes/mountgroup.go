package volumes

import (
	"context"
	"fmt"
	"strconv"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/errclass"
)

// MaxMountGroup is the largest mount group a mount takes: the largest
// GID, as 4294967295 is (gid_t)-1, "no group", to the kernel.
const MaxMountGroup = 4294967294

// ErrUnsupported: the volume's node plugin does not advertise what the
// request needs (VOLUME_MOUNT_GROUP for a mount group). Nothing was sent
// to the plugin and nothing changed.
var ErrUnsupported = errclass.New(errclass.Unsupported, "not supported by the node plugin")

// CheckMountGroup refuses a mount group that is not a GID in decimal, 0 to
// MaxMountGroup, naming the field. The empty string is no mount group.
func CheckMountGroup(group string) error {
	if group == "" {
		return nil
	}
	n, err := strconv.ParseUint(group, 10, 64)
	if err != nil || n > MaxMountGroup || strconv.FormatUint(n, 10) != group {
		return invalid(fmt.Sprintf("mount_group %q is not a GID: give a decimal number from 0 to %d", group, uint64(MaxMountGroup)))
	}
	return nil
}

// mountGroupSupported refuses a mount group, before any volume RPC, when
// the node plugin at socket does not advertise VOLUME_MOUNT_GROUP.
func (j *job) mountGroupSupported(ctx context.Context, socket, group string) error {
	if group == "" {
		return nil
	}
	node, err := j.client(ctx, socket)
	if err != nil {
		return err
	}
	caps, err := node.NodeCapabilitiesCached(ctx)
	if err != nil {
		return err
	}
	if !caps.VolumeMountGroup {
		return fmt.Errorf("%w: volume %s: its node plugin does not advertise VOLUME_MOUNT_GROUP, so mount_group %s cannot be passed; mount without it",
			ErrUnsupported, j.key, group)
	}
	return nil
}

// withMountGroup sets c's volume_mount_group to group when c mounts a file
// system; a block volume has none.
func withMountGroup(c *csipb.VolumeCapability, group string) *csipb.VolumeCapability {
	if m := c.GetMount(); m != nil && group != "" {
		m.VolumeMountGroup = group
	}
	return c
}
