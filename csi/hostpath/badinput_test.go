package hostpath_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

// TestBadInput sends malformed requests: each fails with the right code and
// a "hostpath: " message, and none of them changes anything on disk.
func TestBadInput(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	outside := p.path("outside")
	require.NoError(t, os.WriteFile(outside, []byte("keep"), 0o600))
	before := tree(t, p.dir)

	long := strings.Repeat("v", hostpath.MaxIDLength+1)
	multiNode := mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	noAccessType := &csi.VolumeCapability{AccessMode: writer.AccessMode}
	tests := []struct {
		name string
		call func(ctx context.Context) error
		want codes.Code
	}{
		{"create a volume without a name", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, createReq("", 0)))
		}, codes.InvalidArgument},
		{"create a volume without capabilities", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new"}))
		}, codes.InvalidArgument},
		{"create a volume with the block access type", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: []*csi.VolumeCapability{blockCap()}}))
		}, codes.InvalidArgument},
		{"create a volume with a multi-node access mode", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: []*csi.VolumeCapability{multiNode}}))
		}, codes.InvalidArgument},
		{"create a volume with a capability without access type", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: []*csi.VolumeCapability{noAccessType}}))
		}, codes.InvalidArgument},
		{"create a volume requiring more than its limit", func(ctx context.Context) error {
			req := createReq("new", 2<<20)
			req.CapacityRange.LimitBytes = 1 << 20
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.OutOfRange},
		{"create a volume with a negative size", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, createReq("new", -1)))
		}, codes.InvalidArgument},
		{"create a volume from a snapshot that does not exist", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s"}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.NotFound},
		{"create a volume as a clone of a volume that does not exist", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "nope"}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.NotFound},
		{"create a clone smaller than its source", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.CapacityRange.LimitBytes = 1
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.OutOfRange},
		{"create a clone of a volume whose id climbs out of the root", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "../x"}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.InvalidArgument},
		{"create a volume only on another node", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{hostpath.TopologyKey: "node-2"}}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.ResourceExhausted},
		{"delete a volume with an empty id", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{}))
		}, codes.InvalidArgument},
		{"delete a volume whose id climbs out of the root", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "../../outside"}))
		}, codes.InvalidArgument},
		{"delete a volume whose id is two dots", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: ".."}))
		}, codes.InvalidArgument},
		{"delete a volume whose id is longer than 128 bytes", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: long}))
		}, codes.InvalidArgument},
		{"delete a volume that is still staged", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}))
		}, codes.FailedPrecondition},
		{"validate a volume without capabilities", func(ctx context.Context) error {
			return call(p.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id}))
		}, codes.InvalidArgument},
		{"validate a volume whose id has a slash", func(ctx context.Context) error {
			return call(p.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "a/b", VolumeCapabilities: []*csi.VolumeCapability{writer}}))
		}, codes.InvalidArgument},
		{"validate an unknown volume", func(ctx context.Context) error {
			return call(p.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "unknown", VolumeCapabilities: []*csi.VolumeCapability{writer}}))
		}, codes.NotFound},
		{"list volumes from a token the driver did not hand out", func(ctx context.Context) error {
			return call(p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: "page-2"}))
		}, codes.Aborted},
		{"list volumes with a negative page size", func(ctx context.Context) error {
			return call(p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: -1}))
		}, codes.InvalidArgument},
		{"stage a volume whose id climbs out of the root", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "../state", StagingTargetPath: p.path("s2"), VolumeCapability: writer}))
		}, codes.InvalidArgument},
		{"stage a volume without a capability", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: p.path("s2")}))
		}, codes.InvalidArgument},
		{"stage a volume with the block access type", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: p.path("s2"), VolumeCapability: blockCap()}))
		}, codes.InvalidArgument},
		{"stage a volume at a relative path", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: "staging", VolumeCapability: writer}))
		}, codes.InvalidArgument},
		{"stage a volume inside the driver root", func(ctx context.Context) error {
			root := p.srv.Driver.Config().Root
			_, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: root + "/state/x", VolumeCapability: writer})
			return err
		}, codes.InvalidArgument},
		{"stage an unknown volume", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "unknown", StagingTargetPath: p.path("s2"), VolumeCapability: writer}))
		}, codes.NotFound},
		{"stage a volume at a second staging path", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: p.path("s2"), VolumeCapability: writer}))
		}, codes.FailedPrecondition},
		{"unstage a volume with an empty id", func(ctx context.Context) error {
			return call(p.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: staging}))
		}, codes.InvalidArgument},
		{"unstage a volume at a relative path", func(ctx context.Context) error {
			return call(p.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: "staging"}))
		}, codes.InvalidArgument},
		{"publish a volume at a relative target path", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, staging, "target", false)))
		}, codes.InvalidArgument},
		{"publish a volume without a target path", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, staging, "", false)))
		}, codes.InvalidArgument},
		{"publish a volume whose id has a slash", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq("/etc", staging, p.path("target"), false)))
		}, codes.InvalidArgument},
		{"publish a volume onto the driver root", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, staging, p.srv.Driver.Config().Root, false)))
		}, codes.InvalidArgument},
		{"publish a volume without a capability", func(ctx context.Context) error {
			req := publishReq(id, staging, p.path("target"), false)
			req.VolumeCapability = nil
			return call(p.node.NodePublishVolume(ctx, req))
		}, codes.InvalidArgument},
		{"publish a volume with the block access type", func(ctx context.Context) error {
			req := publishReq(id, staging, p.path("target"), false)
			req.VolumeCapability = blockCap()
			return call(p.node.NodePublishVolume(ctx, req))
		}, codes.InvalidArgument},
		{"publish a volume that is not staged", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, "", p.path("target"), false)))
		}, codes.FailedPrecondition},
		{"publish a volume staged elsewhere", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, p.path("s2"), p.path("target"), false)))
		}, codes.FailedPrecondition},
		{"publish an unknown volume", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq("unknown", staging, p.path("target"), false)))
		}, codes.NotFound},
		{"unpublish a volume at a relative target path", func(ctx context.Context) error {
			return call(p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: "target"}))
		}, codes.InvalidArgument},
		{"unpublish a volume whose id is empty", func(ctx context.Context) error {
			return call(p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: p.path("target")}))
		}, codes.InvalidArgument},
		{"get stats without a volume path", func(ctx context.Context) error {
			return call(p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id}))
		}, codes.InvalidArgument},
		{"get stats at a path where the volume is not", func(ctx context.Context) error {
			return call(p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: outside}))
		}, codes.NotFound},
		{"controller publish, which needs -attach-required", func(ctx context.Context) error {
			return call(p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: writer}))
		}, codes.Unimplemented},
		{"controller unpublish, which needs -attach-required", func(ctx context.Context) error {
			return call(p.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"}))
		}, codes.Unimplemented},
		{"create a snapshot without a name", func(ctx context.Context) error {
			return call(p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{SourceVolumeId: id}))
		}, codes.InvalidArgument},
		{"create a snapshot of a volume whose id climbs out of the root", func(ctx context.Context) error {
			return call(p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "../state"}))
		}, codes.InvalidArgument},
		{"create a snapshot of an unknown volume", func(ctx context.Context) error {
			return call(p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "unknown"}))
		}, codes.NotFound},
		{"delete a snapshot whose id climbs out of the root", func(ctx context.Context) error {
			return call(p.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "../volumes/" + id}))
		}, codes.InvalidArgument},
		{"list snapshots from a token the driver did not hand out", func(ctx context.Context) error {
			return call(p.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: id}))
		}, codes.Aborted},
		{"expand a volume without a capacity range", func(ctx context.Context) error {
			return call(p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id}))
		}, codes.InvalidArgument},
		{"expand an unknown volume", func(ctx context.Context) error {
			return call(p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "unknown", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}}))
		}, codes.NotFound},
		{"shrink a volume below its capacity", func(ctx context.Context) error {
			return call(p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{LimitBytes: 1}}))
		}, codes.OutOfRange},
		{"expand on the node beyond what the controller granted", func(ctx context.Context) error {
			return call(p.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}}))
		}, codes.OutOfRange},
		{"expand on the node at a path where the volume is not", func(ctx context.Context) error {
			return call(p.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: outside}))
		}, codes.NotFound},
		{"get the controller's health of an unknown volume", func(ctx context.Context) error {
			return call(p.ctrl.ControllerGetVolumeHealth(ctx, &csi.ControllerGetVolumeHealthRequest{VolumeId: "unknown"}))
		}, codes.NotFound},
		{"get a volume whose id is empty", func(ctx context.Context) error {
			return call(p.ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{}))
		}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, tt.want, tt.call(t.Context()))
		})
	}
	require.Equal(t, before, tree(t, p.dir), "bad input changed files")
}
