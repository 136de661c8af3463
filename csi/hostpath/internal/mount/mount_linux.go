package mount

import (
	"errors"
	"fmt"
	"syscall"
)

// Bind bind-mounts source onto target (both directories) and, when readonly
// is set, remounts the bind read-only. On failure nothing stays mounted. The
// returned error wraps the errno, so callers can test for syscall.EPERM.
func Bind(source, target string, readonly bool) error {
	if err := syscall.Mount(source, target, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount: mount --bind %s %s: %w", source, target, err)
	}
	if !readonly {
		return nil
	}
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
	if err := syscall.Mount("", target, "", flags, ""); err != nil {
		undo := syscall.Unmount(target, 0)
		return errors.Join(fmt.Errorf("mount: remount %s read-only: %w", target, err), undo)
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
	return fmt.Errorf("mount: umount %s: %w", target, err)
}
