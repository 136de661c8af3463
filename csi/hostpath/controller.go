package hostpath

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"

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

// ControllerGetCapabilities advertises CREATE_DELETE_VOLUME, LIST_VOLUMES,
// LIST_VOLUMES_PUBLISHED_NODES, GET_VOLUME, GET_VOLUME_HEALTH, EXPAND_VOLUME,
// CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS, CLONE_VOLUME, GET_CAPACITY and MODIFY_VOLUME, and with AttachRequired also
// PUBLISH_UNPUBLISH_VOLUME and PUBLISH_READONLY.
func (s *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	}
	if s.d.cfg.AttachRequired {
		types = append(types,
			csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			csi.ControllerServiceCapability_RPC_PUBLISH_READONLY)
	}
	caps := capabilities(func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	}, types...)
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// CreateVolume creates the volume directory and its record, empty or filled
// with a copy of a snapshot's or a volume's files (cloning). The volume ID is derived from the name,
// so a repeated request finds the volume it created: it succeeds if the
// volume's capacity fits the requested range and the parameters and source
// are the same, and fails with AlreadyExists otherwise. An unknown source
// snapshot or volume fails with NotFound, a source larger than the
// requested size (none given is 0) with OutOfRange. Secrets are accepted and neither kept nor logged.
func (s *controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalidArgument(errors.New("volume name must not be empty"))
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, invalidArgument(err)
	}
	snapshotID, sourceVolumeID, err := contentSource(req.GetVolumeContentSource())
	if err != nil {
		return nil, err
	}
	if err := checkMutable(req.GetMutableParameters()); err != nil {
		return nil, invalidArgument(err)
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
		if err := rec.compatible(name, req.GetCapacityRange(), req.GetParameters(), snapshotID, sourceVolumeID); err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: rec.volume()}, nil
	}
	rec = volumeRecord{ID: id, Name: name, CapacityBytes: capacity, Parameters: req.GetParameters(), NodeID: d.cfg.NodeID, SourceSnapshotID: snapshotID, SourceVolumeID: sourceVolumeID,
		MutableParameters: req.GetMutableParameters()}
	if err := d.fillFromSnapshot(&rec, req.GetCapacityRange()); err != nil {
		return nil, err
	}
	if err := d.fillFromVolume(&rec, req.GetCapacityRange()); err != nil {
		return nil, err
	}
	// The directory first, the record last: the record is what makes the
	// volume exist, so a plugin killed in between leaves no half volume.
	if err := d.makeVolumeDir(rec); err != nil {
		return nil, err
	}
	if err := writeJSON(d.volumeFile(id), rec); err != nil {
		return nil, internal(err)
	}
	d.log.Info("hostpath: created volume", "volume_id", id, "name", name, "capacity_bytes", rec.CapacityBytes,
		"path", d.volumeDir(id), "source_snapshot_id", snapshotID, "source_volume_id", sourceVolumeID)
	return &csi.CreateVolumeResponse{Volume: rec.volume()}, nil
}

// makeVolumeDir creates the volume's directory, empty or, for a volume made
// from a snapshot or a volume, as a copy of its files. A copy left half
// done by a killed plugin is replaced.
func (d *Driver) makeVolumeDir(rec volumeRecord) error {
	dir, source := d.volumeDir(rec.ID), d.snapshotDir(rec.SourceSnapshotID)
	if rec.SourceVolumeID != "" {
		source = d.volumeDir(rec.SourceVolumeID)
	}
	if rec.SourceSnapshotID == "" && rec.SourceVolumeID == "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return internal(fmt.Errorf("create volume directory: %w", err))
		}
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return internal(fmt.Errorf("remove half-made volume directory: %w", err))
	}
	if err := copyTree(source, dir); err != nil {
		return internal(err)
	}
	return nil
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
func (rec volumeRecord) compatible(name string, r *csi.CapacityRange, params map[string]string, snapshotID, sourceVolumeID string) error {
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
	if rec.SourceSnapshotID != snapshotID {
		return status.Errorf(codes.AlreadyExists, "hostpath: volume %q exists with source snapshot %q, not %q", name, rec.SourceSnapshotID, snapshotID)
	}
	if rec.SourceVolumeID != sourceVolumeID {
		return status.Errorf(codes.AlreadyExists, "hostpath: volume %q exists with source volume %q, not %q", name, rec.SourceVolumeID, sourceVolumeID)
	}
	return nil
}

// VolumeContextNodeID is the volume context key CreateVolume sets to the
// node whose disk holds the volume.
const VolumeContextNodeID = "hostpath.csi.plugvisor.io/node-id"

// volume is the CSI view of the record.
func (rec volumeRecord) volume() *csi.Volume {
	v := &csi.Volume{
		VolumeId:           rec.ID,
		CapacityBytes:      rec.CapacityBytes,
		VolumeContext:      map[string]string{VolumeContextNodeID: rec.NodeID},
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{TopologyKey: rec.NodeID}}},
	}
	if rec.SourceSnapshotID != "" {
		v.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: rec.SourceSnapshotID}}}
	}
	if rec.SourceVolumeID != "" {
		v.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: rec.SourceVolumeID}}}
	}
	return v
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
// is already deleted. A volume still attached to, staged on or published on
// a node is not deleted (FailedPrecondition). Snapshots of the volume are
// copies and stay.
func (s *controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, found, err := d.loadVolume(id)
	if err != nil {
		return nil, internal(err)
	}
	rec.ID = id
	nodes, err := d.attachedNodes(rec)
	if err != nil {
		return nil, internal(err)
	}
	if len(nodes) > 0 {
		return nil, errInUse(id, nodes)
	}
	// The directory first, the record last: a plugin killed in between still
	// lists the volume, and the CO's retry finishes the job.
	if err := os.RemoveAll(d.volumeDir(id)); err != nil {
		return nil, internal(fmt.Errorf("remove volume directory: %w", err))
	}
	if err := removeRecord(d.volumeFile(id)); err != nil {
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
		return nil, invalidArgument(errors.New("volume capabilities must not be empty"))
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

// requireVolumeLocked is requireVolume with d.mu held (shared or not).
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
	ids = ids[lowerBound(ids, token):]
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
		if !found {
			continue
		}
		st, err := d.volumeStatus(rec)
		if err != nil {
			return nil, internal(err)
		}
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: rec.volume(), Status: st})
	}
	return resp, nil
}

// volumeStatus is what ListVolumes and ControllerGetVolume say of a volume
// besides the volume itself: the nodes it is attached to or used on.
func (d *Driver) volumeStatus(rec volumeRecord) (*csi.ListVolumesResponse_VolumeStatus, error) {
	nodes, err := d.attachedNodes(rec)
	if err != nil {
		return nil, err
	}
	return &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodes}, nil
}

// ControllerGetVolume reports a volume and the nodes it is attached to or
// used on. An unknown volume fails with NotFound.
func (s *controllerServer) ControllerGetVolume(_ context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, err := d.requireVolumeLocked(id)
	if err != nil {
		return nil, err
	}
	st, err := d.volumeStatus(rec)
	if err != nil {
		return nil, internal(err)
	}
	return &csi.ControllerGetVolumeResponse{Volume: rec.volume(), Status: &csi.ControllerGetVolumeResponse_VolumeStatus{
		PublishedNodeIds: st.GetPublishedNodeIds()}}, nil
}
