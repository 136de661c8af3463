package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// unmount takes alloc's mount of the volume down, from whatever state its
// record is in.
func (j *job) unmount(ctx context.Context, alloc string) error {
	if j.rec.GetPublishes()[alloc] == nil {
		return fmt.Errorf("%w: alloc %s has no mount of volume %s on this node", ErrNotMounted, alloc, j.key)
	}
	if err := j.takeDown(ctx, alloc); err != nil {
		return err
	}
	j.log.Info("volume unmounted", "alloc_id", alloc)
	return nil
}

// takeDown runs the way out for alloc's publish record: unpublish (unless
// it never reached publishing), then, when no other publish record remains
// on the node, unstage and detach, then release a claim the mount made,
// then remove the publish record. Each step is written before its RPC and
// after it, the write after one step being the next one's write before
// its own where they follow each other (releasing and unstaging, the
// stage removed and the detaching or the record's last write); a step
// that fails leaves its state and last error for the GC
// step to retry. It is also the rollback of a failed mount and the
// reconcile of an unfinished one: every step is safe to repeat.
func (j *job) takeDown(ctx context.Context, alloc string) error {
	pub := j.rec.GetPublishes()[alloc]
	switch pub.GetState() {
	case statePublishing, statePublished, stateUnpublishing:
		if err := j.unpublish(ctx, pub); err != nil {
			return j.failed(pub, err)
		}
	}
	pub.State, pub.LastError = stateReleasing, ""
	last := len(otherPublishes(j.rec, alloc)) == 0
	// An unstage writes this state with its own first record: one
	// durable write, not two (a crash before it leaves the publish
	// "unpublishing", and NodeUnpublishVolume is sent again).
	if !last || j.rec.GetStage() == nil {
		if err := j.save(); err != nil {
			return err
		}
	}
	if last {
		// The stage's removal is written by the next write: detach's
		// before its RPC, failed's, or the last one below.
		if _, err := j.unstageUnsaved(ctx); err != nil {
			return j.failed(pub, err)
		}
		if err := j.detach(ctx); err != nil {
			if pub.GetClaimedByMount() {
				j.stuckClaim(ctx, alloc, model.ClaimStateNodeDetached, err)
			}
			return j.failed(pub, err)
		}
	}
	if err := j.releaseMountClaim(ctx, pub, alloc); err != nil {
		return j.failed(pub, err)
	}
	delete(j.rec.Publishes, alloc)
	return j.save()
}

// releaseMountClaim releases the claim that alloc's mount (pub) made, if
// it made one, once the mount is down. Its error says that the mount is
// down: a caller who retries on a 503 must not take it for a mount still
// up. The release stays for the GC step to retry, and an unmount sent
// again finishes it.
func (j *job) releaseMountClaim(ctx context.Context, pub *messages.VolumePublish, alloc string) error {
	if !pub.GetClaimedByMount() {
		return nil
	}
	if err := j.releaseClaim(ctx, alloc, model.ClaimStateReadyToFree, ""); err != nil {
		return fmt.Errorf("the mount of volume %s by alloc %s is down, but its claim is not released yet (the agent retries the release; an unmount sent again finishes it): %w",
			j.key, alloc, err)
	}
	return nil
}

// failed records err as pub's last error and returns it.
func (j *job) failed(pub *messages.VolumePublish, err error) error {
	pub.LastError = err.Error()
	if saveErr := j.save(); saveErr != nil && !errors.Is(err, ErrStore) {
		return fmt.Errorf("%w (and %w)", err, saveErr)
	}
	return err
}

// stuckClaim records in the catalog that alloc's claim is released as far
// as state and why it is stuck there; the alloc keeps its claim (and its
// writer slot) until the GC step frees it.
func (j *job) stuckClaim(ctx context.Context, alloc string, state model.ClaimState, cause error) {
	err := j.releaseClaim(ctx, alloc, state, cause.Error())
	if err != nil {
		j.log.Warn("could not record a stuck claim in the catalog", "alloc_id", alloc, "error", err)
	}
}

// unpublish sends NodeUnpublishVolume for pub and removes its target.
func (j *job) unpublish(ctx context.Context, pub *messages.VolumePublish) error {
	pub.State = stateUnpublishing
	if err := j.save(); err != nil {
		return err
	}
	node, socket, err := j.nodeClientAt(ctx, pub.GetNodeSocket())
	if err == nil {
		err = j.checkPlugin(ctx, node, socket, pub)
	}
	if err != nil {
		return err
	}
	pub.NodeSocket = socket
	said := "succeeded"
	if _, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{
		VolumeId: j.rec.GetExternalId(), TargetPath: pub.GetTargetPath(),
	}); err != nil {
		if !j.goneAlready("NodeUnpublishVolume", err) {
			return err
		}
		said = "answered NotFound"
		if err := j.cleanUpAfterNotFound("target", pub.GetTargetPath(), err); err != nil {
			return err
		}
	}
	err = os.Remove(pub.GetTargetPath())
	switch {
	case err == nil, errors.Is(err, os.ErrNotExist):
	case errors.Is(err, syscall.EBUSY), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%w: NodeUnpublishVolume %s but left %s mounted or not empty (%v); "+
			"stop what uses it, then unmount again", ErrTargetBusy, said, pub.GetTargetPath(), errors.Unwrap(err))
	default:
		return fmt.Errorf("NodeUnpublishVolume %s but the target is still there: %w", said, err)
	}
	return nil
}

// unstage sends NodeUnstageVolume when the volume is staged (or may be)
// and removes the stage from the record. Callers check first that no
// publish record remains.
func (j *job) unstage(ctx context.Context) error {
	if removed, err := j.unstageUnsaved(ctx); err != nil || !removed {
		return err
	}
	return j.save()
}

// unstageUnsaved is unstage but for the write after NodeUnstageVolume,
// which the caller's next write makes (it must make one): removed says the
// stage was removed from the record.
func (j *job) unstageUnsaved(ctx context.Context) (removed bool, err error) {
	s := j.rec.GetStage()
	if s == nil {
		return false, nil
	}
	if others := publishedAllocs(j.rec); len(others) > 1 {
		return false, fmt.Errorf("internal error: unstage of %s with allocs %v published", j.key, others)
	}
	s.State = stateUnstaging
	if err := j.save(); err != nil {
		return false, err
	}
	if err := j.nodeUnstage(ctx, s); err != nil {
		s.LastError = err.Error()
		return false, err
	}
	// The staging directory stays for the volume's next mount: the
	// staging sweep removes it once the volume is idle (stagingsweep.go).
	j.rec.Stage = nil
	return true, nil
}

func (j *job) nodeUnstage(ctx context.Context, s *messages.VolumeStage) error {
	node, socket, err := j.nodeClientAt(ctx, s.GetNodeSocket())
	if err == nil {
		err = j.checkPlugin(ctx, node, socket, nil)
	}
	if err != nil {
		return err
	}
	s.NodeSocket = socket
	_, err = node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{
		VolumeId: j.rec.GetExternalId(), StagingTargetPath: s.GetStagingPath(),
	})
	if err != nil && j.goneAlready("NodeUnstageVolume", err) {
		return j.cleanUpAfterNotFound("staging path", s.GetStagingPath(), err)
	}
	return err
}

// goneAlready reports whether err, a plugin's answer to a step of the way
// out, is NotFound: CSI makes those steps idempotent, so the plugin has
// nothing left to undo, and the step is done (as Nomad's CSI client takes
// it). It is logged; a node step then cleans up what the kernel still
// holds of what the plugin forgot (cleanUpAfterNotFound).
func (j *job) goneAlready(rpc string, err error) bool {
	if !errors.Is(err, csi.ErrNotFound) {
		return false
	}
	j.log.Warn(rpc+" answered NotFound: the plugin has nothing left to undo; the step is done", "error", err)
	return true
}

// detach sends ControllerUnpublishVolume with the stored node ID once the
// volume is no longer staged, and removes the attachment from the record.
// NotFound (the volume or node is gone) counts as done.
func (j *job) detach(ctx context.Context) error {
	a := j.rec.GetAttachment()
	if a == nil || j.rec.GetStage() != nil {
		return nil
	}
	a.State = stateDetaching
	if err := j.save(); err != nil {
		return err
	}
	err := j.controllerUnpublish(ctx, a)
	if err == nil || j.goneAlready("ControllerUnpublishVolume", err) {
		err = j.forgetAttachment(ctx, "")
	}
	if err != nil {
		a.LastError = err.Error()
		return err
	}
	j.rec.Attachment = nil
	return j.save()
}

func (j *job) controllerUnpublish(ctx context.Context, a *messages.VolumeAttachment) error {
	ctrl, socket, err := j.controllerClient(ctx, a.GetControllerSocket())
	if err == nil {
		err = j.checkPlugin(ctx, ctrl, socket, nil)
	}
	if err != nil {
		return err
	}
	a.ControllerSocket = socket
	_, err = ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{
		VolumeId: j.rec.GetExternalId(), NodeId: a.GetNodeId(), Secrets: j.secrets(ctx),
	})
	return err
}
