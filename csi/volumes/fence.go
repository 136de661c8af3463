package volumes

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"golang.org/x/sys/unix"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// EventKind names what became of an alloc's mount when this node's
// standing in its fleet changed (see SetStanding), or how its volume's
// condition changed.
type EventKind string

const (
	// EventClaimAtRisk: the node has not renewed its lease for half its
	// TTL. The mount stays; new mounts and claims wait for the lease.
	EventClaimAtRisk EventKind = "claim-at-risk"
	// EventClaimLost: the lease may have expired, and the fleet's GC may
	// give the volume to another node once its grace is over: a writer's
	// target is now read-only, until the claim is checked again.
	EventClaimLost EventKind = "claim-lost"
	// EventFenceFailed: the kernel refused to make a writer's target read-only
	// (a file open for writing makes it busy). The publish is never made
	// writable or published again; the fence is tried again.
	EventFenceFailed EventKind = "fence-failed"
	// EventClaimRestored: the fleet still gives the claim to this node: a
	// fenced writer's target is writable again.
	EventClaimRestored EventKind = "claim-restored"
	// EventClaimGone: the fleet no longer gives the claim to this node (its
	// GC freed it while the node was cut off or down): the mount is taken
	// down through the plugin, releasing nothing.
	EventClaimGone EventKind = "claim-gone"
	// EventConditionAbnormal: the node plugin reports the volume abnormal
	// (NodeGetVolumeStats' volume condition); Detail is its message. It
	// is news: nothing is retried for it.
	EventConditionAbnormal EventKind = "condition-abnormal"
	// EventConditionNormal: the node plugin reports the volume normal
	// again.
	EventConditionNormal EventKind = "condition-normal"
)

// Event tells whoever runs an alloc what became of its mount, or of its
// volume's condition.
type Event struct {
	Kind                         EventKind
	Namespace, VolumeID, AllocID string
	TargetPath                   string
	// ReadOnly is set for a reader's publish (the fence leaves it alone).
	ReadOnly bool
	// Detail says why, for logs and the event stream.
	Detail string
}

// standingChanged is sent by SetStanding to the manager.
type standingChanged struct{ standing model.Standing }

// SetStanding tells the volume manager how sure this node is that the
// fleet still counts its claims (cluster mode; see fleet's
// Store.WatchStanding). At risk, new mounts and claims are refused with
// ErrFenced and Config.OnEvent hears of every publish. Lost, every
// writer's target is remounted read-only at once, and each volume's record
// says so. Held again, every volume is reconciled against the fleet's
// claims: a fenced writer whose claim is still this node's is writable
// again, a publish whose claim is gone is taken down.
func (m *Manager) SetStanding(s model.Standing) {
	m.system.Root.Send(m.pid, &standingChanged{standing: s})
}

// onStanding follows a change of the node's standing.
func (m *manager) onStanding(ctx actor.Context, s model.Standing) {
	prev := m.standing
	if s == prev || m.closing {
		return
	}
	m.standing = s
	m.env.refuse.Store(s != model.StandingHeld)
	m.env.fenced.Store(s == model.StandingLost)
	switch s {
	case model.StandingAtRisk:
		m.log.Warn("this node's lease in the fleet is at risk: new mounts and claims are refused until it is renewed")
		m.announce(EventClaimAtRisk, "this node has not renewed its lease in the fleet for half its TTL and the etcd client's half-second tick")
	case model.StandingLost:
		m.log.Warn("this node's lease in the fleet may be lost: writers' mounts become read-only until their claims are checked")
		m.fenceNow(ctx)
	case model.StandingHeld:
		m.log.Info("this node's lease in the fleet is renewed: checking every mount against the fleet's claims", "was", prev.String())
		m.reconcileAll(ctx)
	}
}

// announce tells OnEvent of every publish on this node.
func (m *manager) announce(kind EventKind, detail string) {
	for key, rec := range m.records {
		for _, pub := range rec.GetPublishes() {
			m.env.emit(kind, key, pub, detail)
		}
	}
}

// fenceNow remounts every writer's target read-only on a goroutine of its
// own, without waiting behind the volumes' queues, then queues a
// reconcile of every volume, which records the fence (and tries again
// where the kernel refused). A publish that a running job completes after
// this is fenced by the job itself (see fencedAfter).
func (m *manager) fenceNow(ctx actor.Context) {
	var targets []string
	for _, rec := range m.records {
		writer := false
		for _, pub := range rec.GetPublishes() {
			if mayBeWritable(pub) {
				targets, writer = append(targets, pub.GetTargetPath()), true
			}
		}
		if st := rec.GetStage(); writer && st != nil {
			targets = append(targets, st.GetStagingPath())
		}
	}
	m.remountReadOnly(targets)
	m.reconcileAll(ctx)
}

// reconcileAll queues a reconcile of every volume with a record.
func (m *manager) reconcileAll(ctx actor.Context) {
	for key := range m.records {
		m.enqueue(ctx, &op{kind: opReconcile, key: key})
	}
}

// mayBeWritable reports whether pub is a writer's whose target may be
// mounted.
func mayBeWritable(pub *messages.VolumePublish) bool {
	switch pub.GetState() {
	case statePublishing, statePublished, stateUnpublishing:
		return !pub.GetReadOnly()
	}
	return false
}

// emit tells OnEvent, if set, and the Manager's subscribers.
func (e *env) emit(kind EventKind, key volumeKey, pub *messages.VolumePublish, detail string) {
	ev := Event{Kind: kind, Namespace: key.namespace, VolumeID: key.id, AllocID: pub.GetAllocId(),
		TargetPath: pub.GetTargetPath(), ReadOnly: pub.GetReadOnly(), Detail: detail}
	if e.onEvent != nil {
		e.onEvent(ev)
	}
	e.feed.publish(ev)
}

// fence keeps every writer's target of the volume read-only while this
// node's standing is lost, and records it in the publish: the claims
// cannot be checked until etcd answers. It returns ErrFenced, so that the
// volume stays unsettled and is tried again (a busy target included).
func (j *job) fence(mounts map[string]bool) error {
	var refused []error
	changed := false
	for _, alloc := range publishedAllocs(j.rec) {
		pub := j.rec.GetPublishes()[alloc]
		note, kind := "", EventClaimLost
		switch {
		case pub.GetReadOnly():
			note = "a reader's mount, read-only already; the claim is checked once the lease is renewed"
		case !mayBeWritable(pub) || mounts != nil && !mounts[pub.GetTargetPath()]:
			continue
		default:
			note = "read-only until the claim is checked once the lease is renewed"
			if err := remount(pub.GetTargetPath(), true); err != nil && !errors.Is(err, unix.EINVAL) {
				note, kind = fmt.Sprintf("NOT read-only: the kernel refused to remount the target read-only (%v); never published again", err), EventFenceFailed
				refused = append(refused, fmt.Errorf("alloc %s: %s", alloc, note))
			}
		}
		if pub.GetFence() != note {
			pub.Fence, changed = note, true
			j.log.Warn("mount fenced: this node's lease in the fleet may be lost", "alloc_id", alloc, "target_path", pub.GetTargetPath(), "fence", note)
			j.env.emit(kind, j.key, pub, note)
		}
	}
	if err := j.fenceStage(); err != nil {
		refused = append(refused, err)
	} else if st := j.rec.GetStage(); st != nil && st.GetFenced() {
		changed = true
	}
	if changed {
		if err := j.save(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: volume %s is fenced until this node's lease is renewed%s", ErrFenced, j.key, joinedNote(refused))
}

// fenceStage makes the staging path read-only too while a writer's
// publish is fenced: the publish is a bind mount of it, and a process of
// the host could write the volume there. Only a stage that a writer
// publishes is made read-only, and the record says so (stage.fenced), so
// that the unfence makes writable again only what the fence made
// read-only.
func (j *job) fenceStage() error {
	st := j.rec.GetStage()
	if st == nil || st.GetFenced() || !j.writerPublished() {
		return nil
	}
	if err := remount(st.GetStagingPath(), true); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("staging path %s NOT read-only: the kernel refused to remount it (%v)", st.GetStagingPath(), err)
	}
	st.Fenced = true
	j.log.Warn("staging path fenced: read-only until the claims are checked", "staging_path", st.GetStagingPath())
	return nil
}

// unfenceStage makes the staging path writable again once the fence that
// made it read-only is lifted: one the record says was fenced, or one a
// writer publishes and the kernel has read-only (fenceNow made it so
// before a job recorded it; a writer's stage is writable by design).
func (j *job) unfenceStage() error {
	st := j.rec.GetStage()
	if st == nil || !st.GetFenced() && !(j.writerPublished() && readOnlyMount(st.GetStagingPath())) {
		return nil
	}
	if err := remount(st.GetStagingPath(), false); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("make the fenced staging path %s writable again: %w", st.GetStagingPath(), err)
	}
	st.Fenced = false
	return nil
}

// writerPublished reports whether a writer's publish of the volume may be
// mounted.
func (j *job) writerPublished() bool {
	return slices.ContainsFunc(publishedAllocs(j.rec), func(a string) bool { return mayBeWritable(j.rec.GetPublishes()[a]) })
}

func joinedNote(errs []error) string {
	if len(errs) == 0 {
		return ""
	}
	return " (" + errors.Join(errs...).Error() + ")"
}

// claimHolders returns the node of each alloc holding a claim on the
// volume (in any state); an unknown volume holds none. An error means the
// catalog could not say.
func (j *job) claimHolders(ctx context.Context) (map[string]string, error) {
	vol, err := j.volume(ctx)
	return holdersOf(vol, err)
}

// readHolders is claimHolders read from catalog, off any job.
func readHolders(ctx context.Context, catalog Catalog, key volumeKey) (map[string]string, error) {
	vol, err := catalog.GetVolume(ctx, key.namespace, key.id)
	return holdersOf(vol, catalogError(err, ErrClaimRefused))
}

// holdersOf is the node of each alloc holding a claim on vol, read with err:
// none for an unknown volume.
func holdersOf(vol *model.CSIVolume, err error) (map[string]string, error) {
	if errors.Is(err, ErrVolumeNotFound) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range vol.AllClaims() {
		out[c.AllocID] = c.NodeID
	}
	return out, nil
}

// ours reports whether holders give alloc's claim to this node.
func (j *job) ours(holders map[string]string, alloc string) bool {
	return holdsHere(holders, alloc, j.env.nodeID)
}

// holdsHere reports whether holders give alloc's claim to node (or to any
// node, when node or the claim's node is "").
func holdsHere(holders map[string]string, alloc, node string) bool {
	at, ok := holders[alloc]
	return ok && (node == "" || at == "" || at == node)
}

// claimGone takes alloc's publish down, the catalog giving its claim to
// no alloc of this node any more: read-only first, then through the
// plugin's way out, releasing nothing (the claim, if any, is not this
// node's to release).
func (j *job) claimGone(ctx context.Context, alloc string, holders map[string]string) error {
	pub := j.rec.GetPublishes()[alloc]
	detail := "the fleet holds no claim of this alloc on volume " + j.key.String()
	if node, ok := holders[alloc]; ok {
		detail = "the fleet gives this alloc's claim to node " + node
	}
	j.log.Warn("taking down a mount whose claim is not this node's", "alloc_id", alloc, "target_path", pub.GetTargetPath(), "why", detail)
	if mayBeWritable(pub) {
		if err := remount(pub.GetTargetPath(), true); err != nil && !errors.Is(err, unix.EINVAL) {
			j.log.Warn("could not make the target read-only before taking it down", "alloc_id", alloc, "error", err)
		}
	}
	pub.ClaimedByMount, pub.Fence = false, "claim gone: "+detail+"; taken down"
	j.env.emit(EventClaimGone, j.key, pub, detail)
	return j.takeDown(ctx, alloc)
}

// unfence makes a fenced writer's target writable again, its claim being
// this node's; when the node's standing was lost meanwhile, it is made
// read-only again (see fencedAfter). The claim is read again once the
// target is writable: the fleet may have freed it after the reconcile
// read it, and the manager's fence for that (onClaimsChanged) may have
// come before this remount; the publish is then taken down.
func (j *job) unfence(ctx context.Context, pub *messages.VolumePublish) error {
	if err := j.unfenceStage(); err != nil {
		return j.failed(pub, err)
	}
	if !pub.GetReadOnly() {
		if err := remount(pub.GetTargetPath(), false); err != nil {
			return j.failed(pub, fmt.Errorf("make the fenced target %s writable again: %w", pub.GetTargetPath(), err))
		}
		if err := j.fencedAfter(pub); err != nil {
			return err
		}
		j.vol = nil
		holders, err := j.claimHolders(ctx)
		if err != nil {
			if rerr := remount(pub.GetTargetPath(), true); rerr != nil && !errors.Is(rerr, unix.EINVAL) {
				err = errors.Join(err, rerr)
			}
			return j.failed(pub, fmt.Errorf("check the claim of alloc %s again before unfencing it: %w", pub.GetAllocId(), err))
		}
		if !j.ours(holders, pub.GetAllocId()) {
			return j.claimGone(ctx, pub.GetAllocId(), holders)
		}
	}
	j.log.Info("mount unfenced: the fleet still gives its claim to this node", "alloc_id", pub.GetAllocId(), "target_path", pub.GetTargetPath())
	pub.Fence, pub.LastError = "", ""
	j.env.emit(EventClaimRestored, j.key, pub, "the claim is still this node's")
	return j.save()
}

// fencedAfter is checked after each step that leaves a writer's target
// mounted writable (a publish, a publish again, an unfence): when this
// node's standing stopped being held meanwhile, the target is made
// read-only again and the step fails with ErrFenced. Because the standing
// changes before the manager fences what it knows of, every writable
// target is fenced by one or the other.
func (j *job) fencedAfter(pub *messages.VolumePublish) error {
	if pub.GetReadOnly() || !j.env.refuse.Load() {
		return nil
	}
	if err := remount(pub.GetTargetPath(), true); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w: this node's lease in the fleet is not held, and the kernel refused to make %s read-only: %w", ErrFenced, pub.GetTargetPath(), err)
	}
	return fmt.Errorf("%w: this node's lease in the fleet is not held: %s is read-only until the claim is checked", ErrFenced, pub.GetTargetPath())
}

// refused is ErrFenced for a new mount or claim while the lease is not held.
func (j *job) refused(what string) error {
	if !j.env.refuse.Load() {
		return nil
	}
	return fmt.Errorf("%w: %s of volume %s refused: this node's lease in the fleet is not held, so its claims cannot be vouched for; retry once etcd answers",
		ErrFenced, what, j.key)
}

// remount sets or clears the read-only flag of the mount at target,
// keeping its other per-mount flags. A target that is no mount point is
// EINVAL; one with a file open for writing is EBUSY.
func remount(target string, readOnly bool) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return err
	}
	const kept = unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.ST_NOATIME | unix.ST_NODIRATIME | unix.ST_RELATIME
	flags := uintptr(unix.MS_REMOUNT|unix.MS_BIND) | uintptr(st.Flags)&kept
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount("", target, "", flags, "")
}

// readOnlyMount reports whether the mount at target is read-only.
func readOnlyMount(target string) bool {
	var st unix.Statfs_t
	return unix.Statfs(target, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}
