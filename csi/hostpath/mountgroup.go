package hostpath

import (
	"math"
	"os"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mountGroupOf returns c's volume_mount_group, checked to be a GID in
// decimal (InvalidArgument otherwise); empty when c has none.
func mountGroupOf(c *csi.VolumeCapability) (string, error) {
	g := c.GetMount().GetVolumeMountGroup()
	if g == "" {
		return "", nil
	}
	n, err := strconv.ParseUint(g, 10, 32)
	if err != nil || n == math.MaxUint32 || strconv.FormatUint(n, 10) != g {
		return "", status.Errorf(codes.InvalidArgument, "hostpath: volume_mount_group %q is not a GID (a decimal number from 0 to %d)", g, uint64(math.MaxUint32-1))
	}
	return g, nil
}

// sameMountGroup fails with FailedPrecondition when the volume, staged
// with the mount group have, is asked for another one (want): as with
// kubelet's fsGroup delegation, the volume root belongs to one group at a
// time, until it is unstaged.
func sameMountGroup(id, have, want string) error {
	if have == want {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is staged with mount group %q; mount group %q waits until it is unstaged", id, have, want)
}

// applyMountGroup gives the volume's root directory the group gid, group
// read, write and search, and the setgid bit (so that what is made inside
// keeps the group), as kubelet does to a volume root for an fsGroup.
func (d *Driver) applyMountGroup(id, group string) error {
	if group == "" {
		return nil
	}
	gid, err := strconv.Atoi(group)
	if err != nil {
		return internal(err)
	}
	dir := d.volumeDir(id)
	if err := os.Lchown(dir, -1, gid); err != nil {
		return internal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return internal(err)
	}
	if err := os.Chmod(dir, fi.Mode().Perm()|0o070|os.ModeSetgid); err != nil {
		return internal(err)
	}
	return nil
}
