package volumes

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/plugvisor/plugvisor/messages"
)

// reconcile brings the volume's record and the node into agreement, at
// start, when the node's lease in its fleet is held again, and from the GC
// step: a publish on the way in (claiming, publishing) rolls back; one on
// the way out (unpublishing, releasing) completes; a published one whose
// claim the catalog does not give to this node is taken down (claimGone);
// one whose target the kernel no longer has mounted is staged and
// published again (both RPCs are idempotent); a fenced one is made
// writable again (unfence); a published volume's condition is asked of
// the node plugin where it can say (NodeGetVolumeStats), an abnormal one
// kept as the last error of its publish; an attachment is checked with the
// controller where it can say (ListVolumes, see checkAttachment); and with
// no publish left, a stage and an attachment are taken down. While the
// node's lease may be lost, it only fences (see fence). mounts is the
// kernel's mount table under the root, nil when unknown.
func (j *job) reconcile(ctx context.Context, mounts map[string]bool) error {
	if j.env.fenced.Load() {
		return j.fence(mounts)
	}
	errs := []error{j.checkAttachment(ctx)}
	var holders map[string]string
	var claimsErr error
	if len(j.rec.GetPublishes()) > 0 {
		holders, claimsErr = j.claimHolders(ctx)
	}
	for _, alloc := range publishedAllocs(j.rec) {
		pub := j.rec.GetPublishes()[alloc]
		switch {
		case pub.GetState() != statePublished:
			errs = append(errs, j.takeDown(ctx, alloc))
		case claimsErr != nil: // kept as it is, a fenced one read-only, until the catalog answers
			errs = append(errs, fmt.Errorf("check the claim of alloc %s: %w", alloc, claimsErr))
		case !j.ours(holders, alloc):
			errs = append(errs, j.claimGone(ctx, alloc, holders))
		case mounts != nil && !mounts[pub.GetTargetPath()]:
			errs = append(errs, j.republish(ctx, pub))
		case pub.GetFence() != "" || !pub.GetReadOnly() && readOnlyMount(pub.GetTargetPath()):
			errs = append(errs, j.unfence(ctx, pub))
		}
	}
	errs = append(errs, j.checkCondition(ctx))
	if len(j.rec.GetPublishes()) == 0 {
		if err := j.unstage(ctx); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, j.detach(ctx))
		}
	}
	return errors.Join(errs...)
}

// republish stages (when staged) and publishes pub again, through the
// plugin the volume was mounted through alone (checkPlugin): the way out
// would refuse another.
func (j *job) republish(ctx context.Context, pub *messages.VolumePublish) error {
	node, socket, err := j.nodeClientAt(ctx, pub.GetNodeSocket())
	if err == nil {
		err = j.checkPlugin(ctx, node, socket, pub)
	}
	if err != nil {
		return j.failed(pub, err)
	}
	vol, err := j.volume(ctx)
	if err != nil {
		return j.failed(pub, err)
	}
	j.log.Warn("a published volume is not mounted: publishing it again", "alloc_id", pub.GetAllocId(), "target_path", pub.GetTargetPath())
	if s := j.rec.GetStage(); s != nil {
		if err := j.nodeStage(ctx, vol, s); err != nil {
			return j.failed(pub, err)
		}
	}
	if err := j.nodePublish(ctx, vol, pub); err != nil {
		return j.failed(pub, err)
	}
	if err := j.fencedAfter(pub); err != nil {
		return j.failed(pub, err)
	}
	pub.LastError, pub.Fence = "", ""
	return j.save()
}

// settled reports whether rec needs no more work: every publish published
// without error, the stage staged and the attachment attached, and both
// only while something is published.
func settled(rec *messages.VolumeRecord) bool {
	if holdsNothing(rec) {
		return true
	}
	if len(rec.GetPublishes()) == 0 {
		return false
	}
	for _, p := range rec.GetPublishes() {
		if p.GetState() != statePublished || p.GetLastError() != "" || p.GetFence() != "" {
			return false
		}
	}
	if s := rec.GetStage(); s != nil && (s.GetState() != stateStaged || s.GetLastError() != "") {
		return false
	}
	a := rec.GetAttachment()
	return a == nil || (a.GetState() == stateAttached && a.GetLastError() == "")
}

// orphans returns, sorted, the mounts under root's staging and per-alloc
// directories that no record explains.
func orphans(root string, mounts map[string]bool, records map[volumeKey]*messages.VolumeRecord) []string {
	known := map[string]bool{}
	for _, rec := range records {
		if s := rec.GetStage(); s != nil {
			known[s.GetStagingPath()] = true
		}
		for _, p := range rec.GetPublishes() {
			known[p.GetTargetPath()] = true
		}
	}
	var out []string
	for m := range mounts {
		rel, err := filepath.Rel(root, m)
		if err != nil || known[m] {
			continue
		}
		parts := strings.Split(rel, string(filepath.Separator))
		if len(parts) >= 3 && (parts[1] == StagingDirName || parts[1] == PerAllocDirName) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}
