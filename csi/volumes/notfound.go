package volumes

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// maxStackedMounts bounds how many mounts unmountStacked takes off one path.
const maxStackedMounts = 16

// cleanUpAfterNotFound finishes a node step of the way out that the plugin
// answered NotFound (answer). CSI makes NodeUnpublishVolume and
// NodeUnstageVolume idempotent, so the plugin has nothing left to undo; but
// a driver that lost the volume (deleted under its mounts, as the upstream
// hostpath driver allows) answers NotFound without unmounting, and leaves
// its mount at path (what: "target" or "staging path"). As kubelet's mount
// cleanup does, the agent unmounts it itself, never lazily, and the job's
// note says so with the plugin's exact answer. A mount the kernel keeps
// (busy) fails the step with ErrTargetBusy, saying what the plugin
// answered; the step is retried.
func (j *job) cleanUpAfterNotFound(what, path string, answer error) error {
	n, err := unmountStacked(path)
	if err != nil {
		return fmt.Errorf("%w: %v; the %s %s is still mounted and the agent could not unmount it (%v): stop what uses it, then unmount again",
			ErrTargetBusy, answer, what, path, err)
	}
	if n == 0 {
		return nil
	}
	j.log.Warn("the plugin answered NotFound and left its mount: the agent unmounted it, as kubelet's mount cleanup does",
		"answer", answer.Error(), "path", path)
	j.addNote(fmt.Sprintf("%v; the %s %s was still mounted: the agent unmounted it", answer, what, path))
	return nil
}

// addNote adds to the job's note, which the volume's status shows with the
// operation.
func (j *job) addNote(note string) {
	if j.note != "" {
		j.note += "; "
	}
	j.note += note
}

// unmountStacked unmounts every mount stacked at path, never lazily and
// never through a symbolic link, and says how many it unmounted; a path
// that is not mounted, or not there, is done.
func unmountStacked(path string) (int, error) {
	for n := range maxStackedMounts {
		err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return n, nil
		default:
			return n, err
		}
	}
	return maxStackedMounts, fmt.Errorf("more than %d mounts are stacked there", maxStackedMounts)
}
