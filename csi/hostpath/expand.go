package hostpath

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ControllerExpandVolume grows a volume's recorded capacity to the required
// bytes (or the limit when none are required), online or offline. A volume
// never shrinks: a smaller request returns the current capacity, and a limit
// below it fails with OutOfRange. It asks for node expansion, which
// NodeExpandVolume does where the volume is staged or published.
func (s *controllerServer) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	if req.GetCapacityRange() == nil {
		return nil, invalidArgument(errors.New("capacity range must be set"))
	}
	if c := req.GetVolumeCapability(); c != nil {
		if err := checkCapability(c); err != nil {
			return nil, invalidArgument(err)
		}
	}
	capacity, err := capacityFor(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, err := d.requireVolumeLocked(id)
	if err != nil {
		return nil, err
	}
	if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 && rec.CapacityBytes > limit {
		return nil, status.Errorf(codes.OutOfRange, "hostpath: volume %s has %d bytes, more than limit bytes %d: volumes do not shrink", id, rec.CapacityBytes, limit)
	}
	if capacity > rec.CapacityBytes {
		rec.CapacityBytes = capacity
		if err := writeJSON(d.volumeFile(id), rec); err != nil {
			return nil, internal(err)
		}
		d.log.Info("hostpath: expanded volume", "volume_id", id, "capacity_bytes", capacity)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: rec.CapacityBytes, NodeExpansionRequired: true}, nil
}

// NodeExpandVolume finishes an expansion on the node, at a path where the
// volume is staged or published, and reports the volume's capacity. A
// directory needs no resizing; what the driver checks is the order: asking
// for more than ControllerExpandVolume granted fails with OutOfRange. An
// unknown volume, or a path where it is not, fails with NotFound.
func (s *nodeServer) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	d := s.d
	id, path, err := volumePathRequest(req.GetVolumeId(), req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	if c := req.GetVolumeCapability(); c != nil {
		if err := checkCapability(c); err != nil {
			return nil, invalidArgument(err)
		}
	}
	if _, err := capacityFor(req.GetCapacityRange()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.requireNodePath(id, path); err != nil {
		return nil, err
	}
	vol, err := d.requireVolumeLocked(id)
	if err != nil {
		return nil, err
	}
	if required := req.GetCapacityRange().GetRequiredBytes(); required > vol.CapacityBytes {
		return nil, status.Errorf(codes.OutOfRange, "hostpath: required bytes %d exceed the %d bytes of volume %s: call ControllerExpandVolume first", required, vol.CapacityBytes, id)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: vol.CapacityBytes}, nil
}
