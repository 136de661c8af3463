package hostpath_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/internal/mount"
)

func TestAVolumeCreatedFromASnapshotHasTheSnapshotsFiles(t *testing.T) {
	p := serve(t, config(t))
	source, dir := p.createWithData(t, "source", "before")

	snapReq := &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: source}
	snap, err := p.ctrl.CreateSnapshot(t.Context(), snapReq)
	require.NoError(t, err)
	require.True(t, snap.GetSnapshot().GetReadyToUse())
	require.EqualValues(t, 1<<20, snap.GetSnapshot().GetSizeBytes())
	again, err := p.ctrl.CreateSnapshot(t.Context(), snapReq)
	require.NoError(t, err)
	require.Equal(t, snap.GetSnapshot().GetSnapshotId(), again.GetSnapshot().GetSnapshotId())
	other := p.create(t, "other")
	_, err = p.ctrl.CreateSnapshot(t.Context(), &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: other})
	requireCode(t, codes.AlreadyExists, err)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "data"), []byte("after"), 0o644))
	snapID := snap.GetSnapshot().GetSnapshotId()
	fromSnap := createReq("restored", 0)
	fromSnap.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}}
	_, err = p.ctrl.CreateVolume(t.Context(), fromSnap)
	requireCode(t, codes.OutOfRange, err) // no size is 0, as upstream's driver takes it: less than the snapshot
	require.ErrorContains(t, err, "of 1048576 bytes is larger than the requested volume size 0")
	fromSnap.CapacityRange.RequiredBytes = 1 << 20
	restored, err := p.ctrl.CreateVolume(t.Context(), fromSnap)
	require.NoError(t, err)
	require.Equal(t, snapID, restored.GetVolume().GetContentSource().GetSnapshot().GetSnapshotId())
	require.EqualValues(t, 1<<20, restored.GetVolume().GetCapacityBytes())
	restoredDir, err := p.srv.Driver.VolumePath(restored.GetVolume().GetVolumeId())
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(restoredDir, "sub", "data"))
	require.NoError(t, err)
	require.Equal(t, "before", string(data), "the volume has the files as they were at the snapshot")

	_, err = p.ctrl.CreateVolume(t.Context(), createReq("restored", 1<<20))
	requireCode(t, codes.AlreadyExists, err) // the same name without the source
	tooSmall := createReq("small", 0)
	tooSmall.CapacityRange.LimitBytes = 1
	tooSmall.VolumeContentSource = fromSnap.VolumeContentSource
	_, err = p.ctrl.CreateVolume(t.Context(), tooSmall)
	requireCode(t, codes.OutOfRange, err)

	list, err := p.ctrl.ListSnapshots(t.Context(), &csi.ListSnapshotsRequest{SourceVolumeId: source})
	require.NoError(t, err)
	require.Len(t, list.GetEntries(), 1)
	list, err = p.ctrl.ListSnapshots(t.Context(), &csi.ListSnapshotsRequest{SourceVolumeId: other})
	require.NoError(t, err)
	require.Empty(t, list.GetEntries())

	_, err = p.ctrl.DeleteSnapshot(t.Context(), &csi.DeleteSnapshotRequest{SnapshotId: snapID})
	require.NoError(t, err)
	_, err = p.ctrl.DeleteSnapshot(t.Context(), &csi.DeleteSnapshotRequest{SnapshotId: snapID})
	require.NoError(t, err)
	fromSnap.Name = "late"
	_, err = p.ctrl.CreateVolume(t.Context(), fromSnap)
	requireCode(t, codes.NotFound, err)
	require.FileExists(t, filepath.Join(restoredDir, "sub", "data"), "a volume made from a snapshot outlives it")
}

func TestExpansionGrowsTheVolumeAndTheNodeFollows(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	grow := &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 << 20}}
	resp, err := p.ctrl.ControllerExpandVolume(t.Context(), grow)
	require.NoError(t, err)
	require.EqualValues(t, 4<<20, resp.GetCapacityBytes())
	require.True(t, resp.GetNodeExpansionRequired())
	shrink := &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}}
	resp, err = p.ctrl.ControllerExpandVolume(t.Context(), shrink)
	require.NoError(t, err)
	require.EqualValues(t, 4<<20, resp.GetCapacityBytes(), "a volume never shrinks")

	got, err := p.ctrl.ControllerGetVolume(t.Context(), &csi.ControllerGetVolumeRequest{VolumeId: id})
	require.NoError(t, err)
	require.EqualValues(t, 4<<20, got.GetVolume().GetCapacityBytes())
	require.Equal(t, []string{"node-1"}, got.GetStatus().GetPublishedNodeIds(), "staged counts as in use")

	node, err := p.node.NodeExpandVolume(t.Context(), &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging, CapacityRange: grow.CapacityRange})
	require.NoError(t, err)
	require.EqualValues(t, 4<<20, node.GetCapacityBytes())
}

func TestHealthReportsAMissingDirectoryAndAnUnmountedTarget(t *testing.T) {
	cfg := config(t)
	cfg.SymlinkFallback = os.Geteuid() != 0
	p, id, staging := stagedVolume(t, cfg)
	target := p.path("target")
	_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, staging, target, false))
	require.NoError(t, err)

	ctrl, err := p.ctrl.ControllerGetVolumeHealth(t.Context(), &csi.ControllerGetVolumeHealthRequest{VolumeId: id})
	require.NoError(t, err)
	require.Empty(t, ctrl.GetVolumeHealth().GetHealthStatuses(), "a healthy volume reports no entries")

	if os.Geteuid() == 0 {
		require.NoError(t, mount.Unmount(target)) // behind the driver's back
		node, err := p.node.NodeGetVolumeHealth(t.Context(), &csi.NodeGetVolumeHealthRequest{VolumeId: id})
		require.NoError(t, err)
		require.Len(t, node.GetVolumeHealth().GetHealthStatuses(), 1)
		require.Equal(t, hostpath.HealthTargetNotMounted, node.GetVolumeHealth().GetHealthStatuses()[0].GetReason())
		require.Contains(t, node.GetVolumeHealth().GetHealthStatuses()[0].GetMessage(), target)
	}
	p.unpublish(t, id, target)
	p.unstage(t, id, staging)

	dir, err := p.srv.Driver.VolumePath(id)
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(dir))
	ctrl, err = p.ctrl.ControllerGetVolumeHealth(t.Context(), &csi.ControllerGetVolumeHealthRequest{VolumeId: id})
	require.NoError(t, err)
	entries := ctrl.GetVolumeHealth().GetHealthStatuses()
	require.Len(t, entries, 1)
	require.Equal(t, csi.VolumeHealthErrorType_INACCESSIBLE, entries[0].GetStatus())
	require.Equal(t, hostpath.HealthVolumeDirectoryMissing, entries[0].GetReason())
}

// TestSecretsAreNeverLoggedOrKept sends secrets with every call that takes
// them, successful or refused, with the driver logging at Debug, and looks
// for them in the log and in every file under the root.
func TestSecretsAreNeverLoggedOrKept(t *testing.T) {
	const secret = "s3cr3t-do-not-log"
	secrets := map[string]string{"password": secret}
	var logs bytes.Buffer
	cfg := attachConfig(t)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &logs})
	p := serve(t, cfg)

	create := createReq("v", 1<<20)
	create.Secrets = secrets
	vol, err := p.ctrl.CreateVolume(t.Context(), create)
	require.NoError(t, err)
	id := vol.GetVolume().GetVolumeId()
	create.CapacityRange.RequiredBytes = 2 << 20
	_, err = p.ctrl.CreateVolume(t.Context(), create)
	requireCode(t, codes.AlreadyExists, err)
	require.NotContains(t, err.Error(), secret)

	attach := controllerPublishReq(id, "node-1", false)
	attach.Secrets = secrets
	resp, err := p.ctrl.ControllerPublishVolume(t.Context(), attach)
	require.NoError(t, err)
	staging := p.path("staging")
	stage := stageReq(id, staging, nil)
	stage.Secrets = secrets
	_, err = p.node.NodeStageVolume(t.Context(), stage)
	requireCode(t, codes.InvalidArgument, err)
	require.NotContains(t, err.Error(), secret)
	stage.PublishContext = resp.GetPublishContext()
	_, err = p.node.NodeStageVolume(t.Context(), stage)
	require.NoError(t, err)
	publish := publishReq(id, staging, p.path("target"), false)
	publish.PublishContext, publish.Secrets = resp.GetPublishContext(), secrets
	_, err = p.node.NodePublishVolume(t.Context(), publish)
	require.NoError(t, err)
	_, err = p.ctrl.CreateSnapshot(t.Context(), &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: id, Secrets: secrets})
	require.NoError(t, err)
	_, err = p.ctrl.ControllerExpandVolume(t.Context(), &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}, Secrets: secrets})
	require.NoError(t, err)
	p.unpublish(t, id, p.path("target"))
	p.unstage(t, id, staging)

	require.Contains(t, logs.String(), "hostpath: attached volume", "the driver did log")
	require.NotContains(t, logs.String(), secret)
	for path, content := range tree(t, p.srv.Driver.Config().Root) {
		require.NotContains(t, content, secret, "in %s", path)
	}
}

func TestArgsParseBackIntoTheSameConfig(t *testing.T) {
	want := hostpath.Config{Name: "hp.example.com", Version: "2.0.0", NodeID: "n7", Root: "/var/lib/hp",
		Mode: hostpath.ModeNode, MaxVolumes: 5, SymlinkFallback: true, AttachRequired: true, Topology: true}
	var got hostpath.Config
	fs := flag.NewFlagSet("hostpath-csi", flag.ContinueOnError)
	got.RegisterFlags(fs)
	require.NoError(t, fs.Parse(want.Args()))
	require.Equal(t, want, got)
	require.Contains(t, want.Args(), "-attach-required=true")
}
