package hostpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CreateSnapshot copies the files of a volume into a snapshot, which is
// ready to use when the call returns. The snapshot ID is derived from the
// name: a repeated request for the same source volume returns the snapshot
// it made, one for another source fails with AlreadyExists. An unknown source
// volume fails with NotFound. Secrets are accepted and neither kept nor logged.
func (s *controllerServer) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, source := req.GetName(), req.GetSourceVolumeId()
	if name == "" {
		return nil, invalidArgument(errors.New("snapshot name must not be empty"))
	}
	if err := checkID("source volume", source); err != nil {
		return nil, invalidArgument(err)
	}
	d := s.d
	id := snapshotIDFor(name)
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, found, err := d.loadSnapshot(id)
	if err != nil {
		return nil, internal(err)
	}
	if found {
		if rec.Name != name || rec.SourceVolumeID != source {
			return nil, status.Errorf(codes.AlreadyExists, "hostpath: snapshot %q exists of volume %s, not %s", rec.Name, rec.SourceVolumeID, source)
		}
		return &csi.CreateSnapshotResponse{Snapshot: rec.snapshot()}, nil
	}
	vol, err := d.requireVolumeLocked(source)
	if err != nil {
		return nil, err
	}
	rec = snapshotRecord{ID: id, Name: name, SourceVolumeID: source, SizeBytes: vol.CapacityBytes,
		CreatedUnixNs: time.Now().UnixNano(), Parameters: req.GetParameters()}
	// The copy first, the record last, as for volumes.
	dir := d.snapshotDir(id)
	if err := os.RemoveAll(dir); err != nil {
		return nil, internal(fmt.Errorf("remove half-made snapshot: %w", err))
	}
	if err := copyTree(d.volumeDir(source), dir); err != nil {
		return nil, internal(err)
	}
	if err := writeJSON(d.snapshotFile(id), rec); err != nil {
		return nil, internal(err)
	}
	d.log.Info("hostpath: created snapshot", "snapshot_id", id, "name", name, "source_volume_id", source)
	return &csi.CreateSnapshotResponse{Snapshot: rec.snapshot()}, nil
}

// snapshot is the CSI view of the record.
func (rec snapshotRecord) snapshot() *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     rec.ID,
		SourceVolumeId: rec.SourceVolumeID,
		SizeBytes:      rec.SizeBytes,
		CreationTime:   timestamppb.New(time.Unix(0, rec.CreatedUnixNs)),
		ReadyToUse:     true,
	}
}

// copyTree copies the directory src, with its files, directories and
// symbolic links, to dst, which must not exist.
func copyTree(src, dst string) error {
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// fillFromSnapshot checks, for a volume made from a snapshot, that the
// snapshot exists (NotFound) and fits the requested size (OutOfRange; see
// checkSourceSize).
func (d *Driver) fillFromSnapshot(rec *volumeRecord, r *csi.CapacityRange) error {
	if rec.SourceSnapshotID == "" {
		return nil
	}
	snap, found, err := d.loadSnapshot(rec.SourceSnapshotID)
	if err != nil {
		return internal(err)
	}
	if !found {
		return status.Errorf(codes.NotFound, "hostpath: source snapshot %s does not exist", rec.SourceSnapshotID)
	}
	return checkSourceSize(rec, r, "snapshot", snap.ID, snap.SizeBytes)
}

// checkSourceSize refuses a volume whose requested size (the required
// bytes, else the limit, else none: 0) is less than the size of its
// source, as the CSI spec asks (OutOfRange) and as the upstream
// kubernetes-csi hostpath driver does (it answers InvalidArgument): the
// CO must ask for at least the source's size. The caller holds d.mu.
func checkSourceSize(rec *volumeRecord, r *csi.CapacityRange, kind, id string, size int64) error {
	if limit := r.GetLimitBytes(); limit > 0 && limit < size {
		return status.Errorf(codes.OutOfRange, "hostpath: limit bytes %d are less than the %d bytes of %s %s", limit, size, kind, id)
	}
	if rec.CapacityBytes < size {
		return status.Errorf(codes.OutOfRange, "hostpath: %s %s of %d bytes is larger than the requested volume size %d: ask for at least its size",
			kind, id, size, rec.CapacityBytes)
	}
	return nil
}

// DeleteSnapshot removes a snapshot's files and record. An unknown snapshot
// is already deleted. Volumes made from it are copies and stay.
func (s *controllerServer) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if err := checkID("snapshot", id); err != nil {
		return nil, invalidArgument(err)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	_, found, err := d.loadSnapshot(id)
	if err != nil {
		return nil, internal(err)
	}
	if err := os.RemoveAll(d.snapshotDir(id)); err != nil {
		return nil, internal(fmt.Errorf("remove snapshot: %w", err))
	}
	if err := removeRecord(d.snapshotFile(id)); err != nil {
		return nil, internal(err)
	}
	if found {
		d.log.Info("hostpath: deleted snapshot", "snapshot_id", id)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists snapshots in ID order, all of them or those of one
// snapshot ID or source volume, paged like ListVolumes.
func (s *controllerServer) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	maxEntries := req.GetMaxEntries()
	if maxEntries < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "hostpath: max entries %d must not be negative", maxEntries)
	}
	token := req.GetStartingToken()
	if token != "" && !snapshotIDPattern.MatchString(token) {
		return nil, status.Errorf(codes.Aborted, "hostpath: starting token %q is not one this driver handed out", token)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	ids, err := recordIDs(d.snapshotStateDir())
	if err != nil {
		return nil, internal(err)
	}
	if want := req.GetSnapshotId(); want != "" {
		ids = slices.DeleteFunc(ids, func(id string) bool { return id != want })
	}
	var snaps []*csi.Snapshot
	for _, id := range ids[lowerBound(ids, token):] {
		rec, found, err := d.loadSnapshot(id)
		if err != nil {
			return nil, internal(err)
		}
		if found && (req.GetSourceVolumeId() == "" || rec.SourceVolumeID == req.GetSourceVolumeId()) {
			snaps = append(snaps, rec.snapshot())
		}
	}
	resp := &csi.ListSnapshotsResponse{}
	if maxEntries > 0 && len(snaps) > int(maxEntries) {
		resp.NextToken = snaps[maxEntries].GetSnapshotId()
		snaps = snaps[:maxEntries]
	}
	for _, snap := range snaps {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snap})
	}
	return resp, nil
}

// lowerBound is the index of the first of the sorted ids not smaller than
// token: where a page that starts at token starts.
func lowerBound(ids []string, token string) int {
	i, _ := slices.BinarySearch(ids, token)
	return i
}
