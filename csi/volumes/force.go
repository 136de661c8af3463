package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// forceUnmount is an operator's unmount of a stuck volume (see
// Manager.ForceUnmount): the way out of takeDown, where each node step the
// plugin fails is done in the kernel instead, and a detach the controller
// fails leaves the attachment recorded for the GC step to retry. The agent
// removes a target it unmounted, as the plugin would have; a staging
// directory stays for the staging sweep, as after any unmount. What was
// forced is the job's note, shown in the volume's status, and logged.
func (j *job) forceUnmount(ctx context.Context, alloc string) error {
	pub := j.rec.GetPublishes()[alloc]
	if pub == nil {
		return fmt.Errorf("%w: alloc %s has no mount of volume %s on this node", ErrNotMounted, alloc, j.key)
	}
	var forced []string
	switch pub.GetState() {
	case statePublishing, statePublished, stateUnpublishing:
		if err := j.unpublish(ctx, pub); err != nil {
			if kerr := kernelUnmount(pub.GetTargetPath()); kerr != nil {
				return j.failed(pub, fmt.Errorf("%w; and the agent could not unmount the target %s itself: %w", err, pub.GetTargetPath(), kerr))
			}
			note := "the agent unmounted the target"
			if rerr := os.Remove(pub.GetTargetPath()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				note += fmt.Sprintf(" and left it, as it could not remove it (%v)", rerr)
			}
			forced = append(forced, fmt.Sprintf("NodeUnpublishVolume failed (%v): %s", err, note))
		}
	}
	pub.State, pub.LastError, pub.Fence = stateReleasing, "", ""
	if err := j.save(); err != nil {
		return err
	}
	if len(otherPublishes(j.rec, alloc)) == 0 {
		if s := j.rec.GetStage(); s != nil {
			if err := j.unstage(ctx); err != nil {
				if kerr := kernelUnmount(s.GetStagingPath()); kerr != nil {
					return j.failed(pub, fmt.Errorf("%w; and the agent could not unmount the staging path %s itself: %w", err, s.GetStagingPath(), kerr))
				}
				j.rec.Stage = nil
				if err := j.save(); err != nil {
					return err
				}
				forced = append(forced, fmt.Sprintf("NodeUnstageVolume failed (%v): the agent unmounted the staging path", err))
			}
		}
		if err := j.detach(ctx); err != nil {
			forced = append(forced, fmt.Sprintf("ControllerUnpublishVolume failed (%v): the attachment stays recorded, and is retried", err))
		}
	}
	if err := j.releaseMountClaim(ctx, pub, alloc); err != nil {
		return j.failed(pub, err)
	}
	delete(j.rec.Publishes, alloc)
	if err := j.save(); err != nil {
		return err
	}
	if len(forced) > 0 {
		j.note = "forced: " + strings.Join(forced, "; ")
		j.log.Warn("volume unmounted by force", "alloc_id", alloc, "forced", j.note)
	} else {
		j.log.Info("volume unmounted (by force, though the plugin did every step)", "alloc_id", alloc)
	}
	return nil
}

// kernelUnmount unmounts the mount at path, never lazily (a busy mount
// fails); a path that is not mounted, or not there, is done.
func kernelUnmount(path string) error {
	if err := unix.Unmount(path, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}
