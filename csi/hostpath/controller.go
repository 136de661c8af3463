package hostpath

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// controllerServer serves the CSI Controller service. RPCs it does not
// implement return Unimplemented through the embedded server.
type controllerServer struct {
	csi.UnimplementedControllerServer
	d *Driver
}

// ControllerGetCapabilities advertises CREATE_DELETE_VOLUME and LIST_VOLUMES.
func (s *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := capabilities(func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	},
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	)
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// CreateVolume creates the volume directory and its record. The volume ID is
// derived from the name, so a repeated request finds the volume it created:
// it succeeds if the volume's capacity fits the requested range and the
// parameters are the same, and fails with AlreadyExists otherwise.
func (s *controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalidArgument(errors.New("hostpath: volume name must not be empty"))
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, invalidArgument(err)
	}
	if req.GetVolumeContentSource() != nil {
		return nil, invalidArgument(errors.New("hostpath: volume content sources (snapshots, clones) are not supported"))
	}
	if len(req.GetMutableParameters()) > 0 {
		return nil, invalidArgument(errors.New("hostpath: mutable parameters are not supported"))
	}
	capacity, err := capacityFor(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	if err := s.d.checkTopology(req.GetAccessibilityRequirements()); err != nil {
		return nil, err
	}

	d := s.d
	id := volumeIDFor(name)
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, found, err := d.loadVolume(id)
	if err != nil {
		return nil, internal(err)
	}
	if found {
		if err := rec.compatible(name, req.GetCapacityRange(), req.GetParameters()); err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: rec.volume()}, nil
	}
	rec = volumeRecord{ID: id, Name: name, CapacityBytes: capacity, Parameters: req.GetParameters(), NodeID: d.cfg.NodeID}
	// The directory first, the record last: the record is what makes the
	// volume exist, so a plugin killed in between leaves no half volume.
	if err := os.MkdirAll(d.volumeDir(id), 0o755); err != nil {
		return nil, internal(fmt.Errorf("hostpath: create volume directory: %w", err))
	}
	if err := writeJSON(d.volumeFile(id), rec); err != nil {
		return nil, internal(err)
	}
	d.log.Info("hostpath: created volume", "volume_id", id, "name", name, "capacity_bytes", capacity, "path", d.volumeDir(id))
	return &csi.CreateVolumeResponse{Volume: rec.volume()}, nil
}

// capacityFor returns the capacity to record for a requested range: the
// required bytes, else the limit, else 0 (unknown). A hostpath directory
// cannot enforce it.
func capacityFor(r *csi.CapacityRange) (int64, error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case required < 0 || limit < 0:
		return 0, status.Errorf(codes.InvalidArgument, "hostpath: capacity range (required %d, limit %d bytes) must not be negative", required, limit)
	case limit > 0 && required > limit:
		return 0, status.Errorf(codes.OutOfRange, "hostpath: required bytes %d exceed limit bytes %d", required, limit)
	case required > 0:
		return required, nil
	}
	return limit, nil
}

// compatible reports, as an AlreadyExists error, why an existing volume does
// not satisfy a repeated CreateVolume.
func (rec volumeRecord) compatible(name string, r *csi.CapacityRange, params map[string]string) error {
	if rec.Name != name {
		return status.Errorf(codes.AlreadyExists, "hostpath: volume ID %s is taken by volume %q (hash collision with %q)", rec.ID, rec.Name, name)
	}
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if rec.CapacityBytes < required || (limit > 0 && rec.CapacityBytes > limit) {
		return status.Errorf(codes.AlreadyExists, "hostpath: volume %q exists with %d bytes, outside the requested range (required %d, limit %d)", name, rec.CapacityBytes, required, limit)
	}
	if !maps.Equal(rec.Parameters, params) {
		return status.Errorf(codes.AlreadyExists, "hostpath: volume %q exists with parameters %v, not %v", name, rec.Parameters, params)
	}
	return nil
}

// volume is the CSI view of the record.
func (rec volumeRecord) volume() *csi.Volume {
	return &csi.Volume{
		VolumeId:           rec.ID,
		CapacityBytes:      rec.CapacityBytes,
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{TopologyKey: rec.NodeID}}},
	}
}

// checkTopology fails with ResourceExhausted when the requisite topologies
// exclude this node, the only place the driver can put a volume.
func (d *Driver) checkTopology(req *csi.TopologyRequirement) error {
	requisite := req.GetRequisite()
	if len(requisite) == 0 {
		return nil
	}
	for _, t := range requisite {
		if t.GetSegments()[TopologyKey] == d.cfg.NodeID {
			return nil
		}
	}
	return status.Errorf(codes.ResourceExhausted, "hostpath: volumes are created on node %q (%s), which the requisite topologies exclude", d.cfg.NodeID, TopologyKey)
}

// DeleteVolume removes the volume's directory and record. An unknown volume
// is already deleted. A volume still staged or published on a node is not
// deleted (FailedPrecondition): its directory is mounted somewhere.
func (s *controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	nodes, err := d.nodesUsing(id)
	if err != nil {
		return nil, internal(err)
	}
	if len(nodes) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "hostpath: volume %s is still staged or published on node %s", id, strings.Join(nodes, ", "))
	}
	_, found, err := d.loadVolume(id)
	if err != nil {
		return nil, internal(err)
	}
	// The directory first, the record last: a plugin killed in between still
	// lists the volume, and the CO's retry finishes the job.
	if err := os.RemoveAll(d.volumeDir(id)); err != nil {
		return nil, internal(fmt.Errorf("hostpath: remove volume directory: %w", err))
	}
	if err := removeFile(d.volumeFile(id)); err != nil {
		return nil, internal(err)
	}
	if found {
		d.log.Info("hostpath: deleted volume", "volume_id", id)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms the capabilities if the driver supports
// all of them and the parameters, if given, are the volume's; otherwise it
// answers without confirmation and says why in the message.
func (s *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	caps := req.GetVolumeCapabilities()
	if len(caps) == 0 {
		return nil, invalidArgument(errors.New("hostpath: volume capabilities must not be empty"))
	}
	rec, err := s.d.requireVolume(id)
	if err != nil {
		return nil, err
	}
	if err := checkCapabilities(caps); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	if params := req.GetParameters(); len(params) > 0 && !maps.Equal(params, rec.Parameters) {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("hostpath: volume %s has parameters %v, not %v", id, rec.Parameters, params)}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: caps,
		Parameters:         req.GetParameters(),
	}}, nil
}

// requireVolume loads the record of volume id, or fails with NotFound.
func (d *Driver) requireVolume(id string) (volumeRecord, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requireVolumeLocked(id)
}

// requireVolumeLocked is requireVolume with d.mu held.
func (d *Driver) requireVolumeLocked(id string) (volumeRecord, error) {
	rec, found, err := d.loadVolume(id)
	if err != nil {
		return rec, internal(err)
	}
	if !found {
		return rec, status.Errorf(codes.NotFound, "hostpath: volume %s does not exist", id)
	}
	return rec, nil
}

// ListVolumes lists volumes in ID order. The next token is the ID of the
// first volume not returned; a page starts at the first volume whose ID is
// not smaller than the token, so deleting volumes between pages loses nothing.
// A token that is not a volume ID this driver hands out fails with Aborted.
func (s *controllerServer) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	maxEntries := req.GetMaxEntries()
	if maxEntries < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "hostpath: max entries %d must not be negative", maxEntries)
	}
	token := req.GetStartingToken()
	if token != "" && !volumeIDPattern.MatchString(token) {
		return nil, status.Errorf(codes.Aborted, "hostpath: starting token %q is not one this driver handed out", token)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	ids, err := d.volumeIDs()
	if err != nil {
		return nil, internal(err)
	}
	start, _ := slices.BinarySearch(ids, token)
	ids = ids[start:]
	resp := &csi.ListVolumesResponse{}
	if maxEntries > 0 && len(ids) > int(maxEntries) {
		resp.NextToken = ids[maxEntries]
		ids = ids[:maxEntries]
	}
	for _, id := range ids {
		rec, found, err := d.loadVolume(id)
		if err != nil {
			return nil, internal(err)
		}
		if found {
			resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: rec.volume()})
		}
	}
	return resp, nil
}
