package mount

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// isMountRoot asks the kernel whether path, symbolic links followed, is the
// root of a mount (STATX_ATTR_MOUNT_ROOT); known is false when the kernel
// does not say.
func isMountRoot(path string) (root, known bool, err error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_TYPE, &st); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return false, false, nil
		}
		return false, false, fmt.Errorf("resolve %s: %w", path, err)
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, false, nil
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, true, nil
}

// Bind bind-mounts source onto target (both directories) and, when readonly
// is set, remounts the bind read-only. On failure nothing stays mounted. The
// returned error wraps the errno, so callers can test for syscall.EPERM.
func Bind(source, target string, readonly bool) error {
	if err := syscall.Mount(source, target, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount --bind %s %s: %w", source, target, err)
	}
	if !readonly {
		return nil
	}
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
	if err := syscall.Mount("", target, "", flags, ""); err != nil {
		undo := syscall.Unmount(target, 0)
		return errors.Join(fmt.Errorf("remount %s read-only: %w", target, err), undo)
	}
	return nil
}

// Unmount unmounts target once. A target that is not a mount point (EINVAL)
// is not an error.
func Unmount(target string) error {
	return unmount(target, 0)
}

// Detach lazily unmounts target (MNT_DETACH): the mount leaves the tree now
// and the kernel drops it when it is no longer busy. For test clean-up.
func Detach(target string) error {
	return unmount(target, syscall.MNT_DETACH)
}

func unmount(target string, flags int) error {
	err := syscall.Unmount(target, flags)
	if err == nil || errors.Is(err, syscall.EINVAL) {
		return nil
	}
	return fmt.Errorf("umount %s: %w", target, err)
}
