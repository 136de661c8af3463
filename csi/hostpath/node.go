package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi/hostpath/internal/mount"
)

// nodeServer serves the CSI Node service.
type nodeServer struct {
	csi.UnimplementedNodeServer
	d *Driver
}

// NodeGetCapabilities advertises STAGE_UNSTAGE_VOLUME, GET_VOLUME_STATS,
// SINGLE_NODE_MULTI_WRITER (the single-node access modes are enforced),
// EXPAND_VOLUME, GET_VOLUME_HEALTH and VOLUME_MOUNT_GROUP.
func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	caps := capabilities(func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	},
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
	)
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeGetInfo reports the node ID, the volume limit and the node's topology
// segment.
func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             s.d.cfg.NodeID,
		MaxVolumesPerNode:  s.d.cfg.MaxVolumes,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{TopologyKey: s.d.cfg.NodeID}},
	}, nil
}

// nodeRequest is what every node RPC checks first: the volume ID and a path
// (target or staging) are well formed.
func (d *Driver) nodeRequest(volumeID, pathKind, path string) (string, error) {
	if err := checkID("volume", volumeID); err != nil {
		return "", invalidArgument(err)
	}
	path, err := d.checkPath(pathKind, path)
	if err != nil {
		return "", invalidArgument(err)
	}
	return path, nil
}

// updateNode runs change on this node's record of volume id with d.mu held
// shared and id's lock held, and saves the record when change reports that
// it changed it, even if change also failed (a failed publication is
// forgotten that way). Other volumes' node RPCs run meanwhile; change reads
// only id's records, and the controller's records of id, which no RPC
// writes while d.mu is held shared.
func (d *Driver) updateNode(id string, change func(rec *nodeRecord) (changed bool, err error)) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	defer d.volumes.lock(id)()
	rec, err := d.loadNode(id)
	if err != nil {
		return internal(err)
	}
	changed, err := change(&rec)
	if !changed {
		return err
	}
	if serr := d.saveNode(rec); serr != nil {
		if err != nil {
			d.log.Error("hostpath: could not save node record", "volume_id", id, "error", serr)
			return err
		}
		return internal(serr)
	}
	return err
}

// NodeStageVolume bind-mounts the volume directory on the staging path,
// creating that directory if needed, and records it; publications bind the
// staging path onward, as drivers of disks mount the disk there. Staging
// again at the same path succeeds (and mounts again what was unmounted); at
// another path it fails with FailedPrecondition: a volume is staged once per
// node. With AttachRequired, a volume not attached to this node, or a
// publish context of another attachment, fails with FailedPrecondition, and
// a missing publish context with InvalidArgument. Staging more volumes than
// MaxVolumes fails with ResourceExhausted. A volume_mount_group gives the
// volume root that group (see applyMountGroup); staging again with another
// one fails with FailedPrecondition. Secrets are neither kept nor logged.
func (s *nodeServer) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	d := s.d
	id := req.GetVolumeId()
	staging, err := d.nodeRequest(id, "staging target", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, invalidArgument(err)
	}
	group, err := mountGroupOf(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	err = d.updateNode(id, func(rec *nodeRecord) (bool, error) {
		vol, err := d.requireVolumeLocked(id)
		if err != nil {
			return false, err
		}
		if err := d.checkAttached(vol, req.GetPublishContext()); err != nil {
			return false, err
		}
		switch rec.StagingPath {
		case staging, "":
		default:
			return false, status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is already staged at %s: a volume is staged once per node; publish it from there", id, rec.StagingPath)
		}
		if rec.StagingPath == staging {
			if err := sameMountGroup(id, rec.MountGroup, group); err != nil {
				return false, err
			}
		}
		if err := d.applyMountGroup(id, group); err != nil {
			return false, err
		}
		rec.MountGroup = group
		return d.stageRecorded(rec, staging)
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// stageRecorded records the staging, then bind-mounts the volume directory
// on the staging path (record first, as for publications), then records
// whether it is mounted. Staging again at the same path mounts again what a
// reboot or an admin unmounted. When the bind mount is not permitted and
// SymlinkFallback is set, the staging is recorded without a mount, and
// publications bind (or link) the volume directory itself.
func (d *Driver) stageRecorded(rec *nodeRecord, staging string) (changed bool, err error) {
	again := rec.StagingPath == staging
	if !again {
		if d.cfg.MaxVolumes > 0 {
			d.staging.Lock()
			defer d.staging.Unlock()
		}
		if err := d.checkStagingLimit(); err != nil {
			return false, err
		}
		if _, err := os.Lstat(staging); errors.Is(err, fs.ErrNotExist) {
			// The CO creates it; made here, it goes again if staging fails.
			defer func() {
				if rec.StagingPath == "" {
					d.removeTarget(staging)
				}
			}()
		}
		if err := os.MkdirAll(staging, 0o750); err != nil {
			return false, internal(fmt.Errorf("create staging path: %w", err))
		}
		// Recorded as mounted before it is: the bind mount that follows
		// needs no second write, and a plugin killed in between leaves a
		// record that NodeUnstageVolume cleans up, or a staging again
		// mounts (the CO publishes nothing it did not see staged).
		rec.StagingPath, rec.StagingMounted = staging, true
		if err := d.saveNode(*rec); err != nil {
			return false, internal(err)
		}
		d.log.Info("hostpath: staging volume", "volume_id", rec.VolumeID, "staging_path", staging)
	}
	mounted, err := mount.IsMountPoint(staging)
	switch {
	case err != nil:
		return !again, internal(err)
	case mounted && !again:
		rec.StagingPath = ""
		return true, status.Errorf(codes.FailedPrecondition, "hostpath: staging path %s is already a mount point", staging)
	case mounted:
		// Mounted before a killed plugin could record it, or long since.
		changed = !rec.StagingMounted
		rec.StagingMounted = true
		return changed, nil
	}
	err = mount.Bind(d.volumeDir(rec.VolumeID), staging, false)
	if needsRoot, denied := d.bindDenied(err); denied {
		if !d.cfg.SymlinkFallback {
			if !again {
				rec.StagingPath = ""
			}
			return !again, status.Error(codes.FailedPrecondition, needsRoot+"; run the plugin as root, or with -symlink-fallback")
		}
		d.log.Warn("hostpath: bind mount not permitted, staged without a mount (-symlink-fallback)", "staging_path", staging, "reason", needsRoot)
		changed = rec.StagingMounted
		rec.StagingMounted = false
		return changed, nil
	}
	if err != nil {
		if !again {
			rec.StagingPath = ""
		}
		return true, internal(fmt.Errorf("%w", err))
	}
	changed = !rec.StagingMounted
	rec.StagingMounted = true
	return changed, nil
}

// bindDenied reports whether a bind mount failed for want of privilege, and
// says so in a message.
func (d *Driver) bindDenied(err error) (string, bool) {
	if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) && !errors.Is(err, mount.ErrUnsupported) {
		return "", false
	}
	return fmt.Sprintf("hostpath: bind mount needs root: %v (running as uid %d)", err, os.Geteuid()), true
}

// checkStagingLimit fails with ResourceExhausted when this node already
// stages MaxVolumes volumes.
func (d *Driver) checkStagingLimit() error {
	limit := d.cfg.MaxVolumes
	if limit == 0 {
		return nil
	}
	n, err := d.stagedCount()
	if err != nil {
		return internal(err)
	}
	if n >= limit {
		return status.Errorf(codes.ResourceExhausted, "hostpath: node %s already has %d volumes staged, its limit", d.cfg.NodeID, n)
	}
	return nil
}

// NodeUnstageVolume unmounts the staging path and forgets the staging. The
// staging directory belongs to the CO and stays. A volume that is not staged
// there is already unstaged; one still published fails with
// FailedPrecondition. A volume that no longer exists fails with NotFound,
// leaving the staging path as it is (see requireExisting).
func (s *nodeServer) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	d := s.d
	id := req.GetVolumeId()
	staging, err := d.nodeRequest(id, "staging target", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	err = d.updateNode(id, func(rec *nodeRecord) (bool, error) {
		if err := d.requireExisting(id); err != nil {
			return false, err
		}
		if rec.StagingPath != staging {
			return false, nil
		}
		if len(rec.Targets) > 0 {
			return false, status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is still published at %v", id, slices.Sorted(maps.Keys(rec.Targets)))
		}
		if err := unmountAll(staging); err != nil {
			return false, err
		}
		rec.StagingPath, rec.StagingMounted = "", false
		d.log.Info("hostpath: unstaged volume", "volume_id", id, "staging_path", staging)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume makes the volume directory appear at the target path: a
// bind mount (remounted read-only when asked), or, when the bind mount is not
// permitted and SymlinkFallback is set, a symbolic link (never read-only).
// The volume must be staged at the given staging path (FailedPrecondition
// otherwise, an empty staging path included: the driver advertises
// STAGE_UNSTAGE_VOLUME). With AttachRequired it must be attached to this
// node, with this attachment's publish context (see NodeStageVolume), and a
// read-only attachment is published read-only only. Publishing again at the
// same target with the same options succeeds; with other options it fails
// with AlreadyExists. A SINGLE_NODE_SINGLE_WRITER volume is published at one
// target at a time (FailedPrecondition), and its volume_mount_group must be
// the one the volume was staged with (FailedPrecondition).
func (s *nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	d := s.d
	id := req.GetVolumeId()
	target, err := d.nodeRequest(id, "target", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	capability := req.GetVolumeCapability()
	if err := checkCapability(capability); err != nil {
		return nil, invalidArgument(err)
	}
	group, err := mountGroupOf(capability)
	if err != nil {
		return nil, err
	}
	if req.GetStagingTargetPath() == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "hostpath: volume %s must be staged before it is published (staging target path is empty)", id)
	}
	staging, err := d.checkPath("staging target", req.GetStagingTargetPath())
	if err != nil {
		return nil, invalidArgument(err)
	}
	want := publication{Readonly: req.GetReadonly(), AccessMode: capability.GetAccessMode().GetMode()}
	err = d.updateNode(id, func(rec *nodeRecord) (bool, error) {
		vol, err := d.requireVolumeLocked(id)
		if err != nil {
			return false, err
		}
		if err := d.checkAttached(vol, req.GetPublishContext()); err != nil {
			return false, err
		}
		if a, ok := vol.Attachments[d.cfg.NodeID]; ok && a.Readonly && !want.Readonly {
			return false, status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is attached to node %s read-only: publish it read-only", id, d.cfg.NodeID)
		}
		if rec.StagingPath != staging {
			return false, status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is not staged at %s", id, staging)
		}
		if err := sameMountGroup(id, rec.MountGroup, group); err != nil {
			return false, err
		}
		have, again := rec.Targets[target]
		if again && (have.Readonly != want.Readonly || have.AccessMode != want.AccessMode) {
			return false, status.Errorf(codes.AlreadyExists, "hostpath: volume %s is already published at %s with readonly=%t and access mode %s", id, target, have.Readonly, have.AccessMode)
		}
		if err := singleWriterConflict(*rec, target, want); err != nil {
			return false, err
		}
		return d.publishRecorded(rec, target, want, again)
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// publishRecorded records the publication, then makes it (record first: a
// plugin killed in between leaves a record that NodeUnpublishVolume cleans
// up, never a mount nobody knows about), then records how it was made when
// that is not what the first record says (a symlink, not a bind mount).
func (d *Driver) publishRecorded(rec *nodeRecord, target string, want publication, again bool) (changed bool, err error) {
	if rec.Targets == nil {
		rec.Targets = map[string]publication{}
	}
	rec.Targets[target] = want
	saved := want
	if err := d.saveNode(*rec); err != nil {
		return false, internal(err)
	}
	want.Symlink, err = d.publish(d.publishSource(*rec), target, want.Readonly, again)
	if err != nil {
		if !again {
			delete(rec.Targets, target)
			return true, err
		}
		return false, err
	}
	rec.Targets[target] = want
	how := "bind mount"
	if want.Symlink {
		how = "symlink"
	}
	d.log.Info("hostpath: published volume", "volume_id", rec.VolumeID, "target_path", target, "readonly", want.Readonly, "how", how)
	return want != saved, nil
}

// publishSource is what publications bind: the staging path where the
// volume is mounted, else the volume directory.
func (d *Driver) publishSource(rec nodeRecord) string {
	if rec.StagingMounted {
		return rec.StagingPath
	}
	return d.volumeDir(rec.VolumeID)
}

// singleWriterConflict fails with FailedPrecondition when publishing at
// target would give a SINGLE_NODE_SINGLE_WRITER volume a second target.
func singleWriterConflict(rec nodeRecord, target string, want publication) error {
	for other, p := range rec.Targets {
		if other == target {
			continue
		}
		if p.AccessMode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER ||
			want.AccessMode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
			return status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is published at %s and SINGLE_NODE_SINGLE_WRITER allows one target", rec.VolumeID, other)
		}
	}
	return nil
}

// publish makes source appear at target and reports whether it used a
// symlink. The CO creates the target's parent; publish creates the target,
// and removes it again if publication fails. When again is set the driver
// published there before, so an existing bind mount or link is the one it
// made and is kept.
func (d *Driver) publish(source, target string, readonly, again bool) (symlink bool, err error) {
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(target, 0o750); err != nil {
			return false, status.Errorf(codes.FailedPrecondition, "hostpath: create target path (the CO creates its parent): %v", err)
		}
		defer func() {
			if err != nil {
				d.removeTarget(target)
			}
		}()
	case err != nil:
		return false, internal(fmt.Errorf("inspect target path: %w", err))
	case fi.Mode()&fs.ModeSymlink != 0:
		if dest, _ := os.Readlink(target); again && dest == source {
			return true, nil
		}
		return false, status.Errorf(codes.FailedPrecondition, "hostpath: target path %s is a symbolic link the driver did not make", target)
	case !fi.IsDir():
		return false, status.Errorf(codes.FailedPrecondition, "hostpath: target path %s exists and is not a directory", target)
	default:
		mounted, err := mount.IsMountPoint(target)
		switch {
		case err != nil:
			return false, internal(err)
		case mounted && again:
			return false, nil
		case mounted:
			return false, status.Errorf(codes.FailedPrecondition, "hostpath: target path %s is already a mount point", target)
		}
	}
	err = mount.Bind(source, target, readonly)
	if err == nil {
		return false, nil
	}
	needsRoot, denied := d.bindDenied(err)
	switch {
	case !denied:
		return false, internal(fmt.Errorf("%w", err))
	case !d.cfg.SymlinkFallback:
		return false, status.Error(codes.FailedPrecondition, needsRoot+"; run the plugin as root, or with -symlink-fallback")
	case readonly:
		return false, status.Error(codes.FailedPrecondition, needsRoot+"; the symlink fallback cannot publish read-only")
	}
	if err := os.Remove(target); err != nil {
		return false, status.Errorf(codes.FailedPrecondition, "hostpath: replace target directory with a symlink: %v", err)
	}
	if err := os.Symlink(source, target); err != nil {
		return false, internal(fmt.Errorf("symlink fallback: %w", err))
	}
	d.log.Warn("hostpath: bind mount not permitted, published with a symlink instead (-symlink-fallback)", "target_path", target, "source", source, "reason", needsRoot)
	return true, nil
}

// removeTarget removes a target or staging directory the driver created, if
// it is still an empty directory, so a failed publication or staging leaves
// the path as it was.
func (d *Driver) removeTarget(path string) {
	if err := syscall.Rmdir(path); err != nil && !errors.Is(err, syscall.ENOENT) {
		d.log.Warn("hostpath: could not remove the directory it made after a failure", "path", path, "error", err)
	}
}

// NodeUnpublishVolume undoes NodePublishVolume: it unmounts the bind mount
// (or removes the symlink) and removes the target. A target where the driver
// did not publish this volume is left alone and the call succeeds. A volume
// that no longer exists fails with NotFound, leaving the target as it is
// (see requireExisting).
func (s *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d := s.d
	id := req.GetVolumeId()
	target, err := d.nodeRequest(id, "target", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	err = d.updateNode(id, func(rec *nodeRecord) (bool, error) {
		if err := d.requireExisting(id); err != nil {
			return false, err
		}
		if _, ok := rec.Targets[target]; !ok {
			return false, nil
		}
		if err := unpublish(target); err != nil {
			return false, err
		}
		delete(rec.Targets, target)
		d.log.Info("hostpath: unpublished volume", "volume_id", id, "target_path", target)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// requireExisting answers NotFound for a volume that does not exist (or no
// longer does), as the upstream kubernetes-csi hostpath driver answers
// NodeUnpublishVolume and NodeUnstageVolume: it looks the volume up before
// anything else, and leaves a target or staging path it still has mounted
// as it is. Upstream deletes a volume in use unless it runs with
// -check-volume-lifecycle, so a CO meets this when a volume was deleted
// under its mounts. The caller holds d.mu shared.
func (d *Driver) requireExisting(id string) error {
	_, err := d.requireVolumeLocked(id)
	return err
}

// maxStackedMounts bounds how many mounts unpublish takes off one target.
const maxStackedMounts = 16

// unpublish removes whatever the driver put at target: a symlink, or a
// directory after unmounting every bind mount stacked on it.
func unpublish(target string) error {
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return internal(fmt.Errorf("inspect target path: %w", err))
	case fi.Mode()&fs.ModeSymlink != 0:
		if err := removeFile(target); err != nil {
			return internal(err)
		}
		return nil
	}
	if err := unmountAll(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return internal(fmt.Errorf("remove target path: %w", err))
	}
	return nil
}

// unmountAll unmounts every mount stacked on path; a path that is not a
// mount point, or does not exist, is left as it is.
func unmountAll(path string) error {
	for unmounts := 0; ; unmounts++ {
		mounted, err := mount.IsMountPoint(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return internal(err)
		}
		if !mounted {
			return nil
		}
		if unmounts == maxStackedMounts {
			return internal(fmt.Errorf("%s is still a mount point after %d unmounts", path, unmounts))
		}
		err = mount.Unmount(path)
		switch {
		case errors.Is(err, syscall.EBUSY):
			return status.Errorf(codes.FailedPrecondition, "hostpath: %s is busy: a process holds files or its working "+
				"directory there; stop it, then unpublish again", path)
		case err != nil:
			return internal(fmt.Errorf("%w", err))
		}
	}
}
