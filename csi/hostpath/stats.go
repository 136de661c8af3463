package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetVolumeStats reports the usage of a volume at a path where it is
// staged or published: bytes and inodes used by the volume's files, and the
// total and available figures of the file system holding it. An unknown
// volume, or a path where it is not, fails with NotFound.
func (s *nodeServer) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	d := s.d
	id, path, err := volumePathRequest(req.GetVolumeId(), req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.requireNodePath(id, path); err != nil {
		return nil, err
	}
	return volumeStats(d.volumeDir(id))
}

// volumePathRequest checks the volume ID and volume path of a node request
// about a volume where it is (stats, expansion), and cleans the path.
func volumePathRequest(id, path string) (string, string, error) {
	if err := checkID("volume", id); err != nil {
		return "", "", invalidArgument(err)
	}
	if path == "" {
		return "", "", invalidArgument(errors.New("volume path must not be empty"))
	}
	return id, filepath.Clean(path), nil
}

// requireNodePath returns this node's record of volume id, with d.mu held,
// or fails with NotFound when the volume is unknown or neither staged nor
// published at path.
func (d *Driver) requireNodePath(id, path string) (nodeRecord, error) {
	if _, err := d.requireVolumeLocked(id); err != nil {
		return nodeRecord{}, err
	}
	rec, err := d.loadNode(id)
	if err != nil {
		return rec, internal(err)
	}
	if _, published := rec.Targets[path]; !published && path != rec.StagingPath {
		return rec, status.Errorf(codes.NotFound, "hostpath: volume %s is not staged or published at %s", id, path)
	}
	return rec, nil
}

// volumeStats measures dir like kubelet does: du for what is used, statfs
// for the file system's total and available.
func volumeStats(dir string) (*csi.NodeGetVolumeStatsResponse, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil, internal(fmt.Errorf("statfs %s: %w", dir, err))
	}
	var usedBytes, usedInodes int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		usedInodes++
		if info.Mode().IsRegular() {
			usedBytes += info.Size()
		}
		return nil
	})
	if err != nil {
		return nil, internal(fmt.Errorf("measure %s: %w", dir, err))
	}
	bsize := int64(st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bsize, Available: int64(st.Bavail) * bsize, Used: usedBytes},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: usedInodes},
	}}, nil
}
