package hostpath

import (
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// contentSource returns the snapshot ID or the volume ID (cloning) of a
// content source; both empty for none. A source without an ID, or of a
// type CSI does not define, is InvalidArgument.
func contentSource(src *csi.VolumeContentSource) (snapshotID, volumeID string, err error) {
	switch t := src.GetType().(type) {
	case nil:
		return "", "", nil
	case *csi.VolumeContentSource_Snapshot:
		id := t.Snapshot.GetSnapshotId()
		if err := checkID("snapshot", id); err != nil {
			return "", "", invalidArgument(err)
		}
		return id, "", nil
	case *csi.VolumeContentSource_Volume:
		id := t.Volume.GetVolumeId()
		if err := checkID("source volume", id); err != nil {
			return "", "", invalidArgument(err)
		}
		return "", id, nil
	}
	return "", "", invalidArgument(errors.New("volume content source must be a snapshot or a volume"))
}

// fillFromVolume checks the source volume of a clone, as the spec asks:
// NotFound when it does not exist, OutOfRange when it is larger than the
// requested size (see checkSourceSize). The caller holds d.mu.
func (d *Driver) fillFromVolume(rec *volumeRecord, r *csi.CapacityRange) error {
	if rec.SourceVolumeID == "" {
		return nil
	}
	src, found, err := d.loadVolume(rec.SourceVolumeID)
	if err != nil {
		return internal(err)
	}
	if !found {
		return status.Errorf(codes.NotFound, "hostpath: source volume %s does not exist", rec.SourceVolumeID)
	}
	return checkSourceSize(rec, r, "source volume", src.ID, src.CapacityBytes)
}
