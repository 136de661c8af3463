package hostpath

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi/hostpath/internal/mount"
)

// The reasons of the health entries the driver reports, all INACCESSIBLE.
const (
	// HealthVolumeDirectoryMissing: the volume's directory under the root
	// is gone or is not a directory.
	HealthVolumeDirectoryMissing = "VolumeDirectoryMissing"
	// HealthTargetNotMounted: a target the node bind-mounted the volume on
	// is no longer a mount point (someone unmounted it behind the driver).
	HealthTargetNotMounted = "TargetNotMounted"
	// HealthStagingNotMounted: the staging path the node bind-mounted the
	// volume on is no longer a mount point; staging again mounts it again.
	HealthStagingNotMounted = "StagingNotMounted"
)

// ControllerGetVolumeHealth reports whether a volume's directory is in
// place. An unknown volume fails with NotFound.
func (s *controllerServer) ControllerGetVolumeHealth(_ context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.requireVolumeLocked(id); err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: id, HealthStatuses: d.dirHealth(id)}}, nil
}

// NodeGetVolumeHealth reports whether a volume's directory is in place, and
// whether the staging path and the targets this node bind-mounted it on (the
// target at volume_publish_path, or all) are still mount points. An unknown
// volume fails with NotFound.
func (s *nodeServer) NodeGetVolumeHealth(_ context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	d := s.d
	id := req.GetVolumeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	only := req.GetVolumePublishPath()
	if only != "" {
		var err error
		if only, err = d.checkPath("volume publish", only); err != nil {
			return nil, invalidArgument(err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.requireVolumeLocked(id); err != nil {
		return nil, err
	}
	rec, err := d.loadNode(id)
	if err != nil {
		return nil, internal(err)
	}
	health := d.dirHealth(id)
	if rec.StagingMounted {
		if mounted, err := mount.IsMountPoint(rec.StagingPath); err != nil || !mounted {
			health = append(health, &csi.VolumeHealth_VolumeHealthEntry{Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: HealthStagingNotMounted,
				Message: "hostpath: not a mount point any more: " + rec.StagingPath})
		}
	}
	var unmounted []string
	for _, target := range slices.Sorted(maps.Keys(rec.Targets)) {
		if rec.Targets[target].Symlink || (only != "" && target != only) {
			continue
		}
		if mounted, err := mount.IsMountPoint(target); err != nil || !mounted {
			unmounted = append(unmounted, target)
		}
	}
	if len(unmounted) > 0 {
		health = append(health, &csi.VolumeHealth_VolumeHealthEntry{Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: HealthTargetNotMounted,
			Message: "hostpath: not a mount point any more: " + strings.Join(unmounted, ", ")})
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: id, HealthStatuses: health}}, nil
}

// dirHealth reports the volume's directory as INACCESSIBLE when it is gone
// or not a directory, and nothing otherwise.
func (d *Driver) dirHealth(id string) []*csi.VolumeHealth_VolumeHealthEntry {
	dir := d.volumeDir(id)
	fi, err := os.Stat(dir)
	msg := ""
	switch {
	case err != nil:
		msg = fmt.Sprintf("hostpath: volume directory: %v", err)
	case !fi.IsDir():
		msg = fmt.Sprintf("hostpath: volume directory %s is not a directory", dir)
	default:
		return nil
	}
	return []*csi.VolumeHealth_VolumeHealthEntry{{Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: HealthVolumeDirectoryMissing, Message: msg}}
}
